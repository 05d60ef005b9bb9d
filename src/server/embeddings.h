// The embeddings API of `minfer serve --embeddings`, as llama-server's:
//   POST /v1/embeddings (OpenAI): {"input": string | [string] | [ids] | [[ids] | string, ...],
//     "encoding_format": "float" (default) | "base64", "model", "embd_normalize"}
//     -> {"model", "object": "list", "usage": {"prompt_tokens", "total_tokens"},
//         "data": [{"embedding", "index", "object": "embedding"}]}, pooled and normalized
//     (euclidean unless embd_normalize says otherwise); pooling none is a 400.
//   POST /embedding, /embeddings (native): {"content" or "input": as above, "embd_normalize"}
//     -> [{"index", "embedding": [[...]]}]: one row pooled, or with pooling none every token's
//     row, not normalized. An OpenAI request that gives "content" gets the native answer.
// Every input is tokenized with BOS as the vocabulary says and control-token text recognised,
// and becomes its own task (Scheduler::submit_embeddings).
//
// Ownership: values. Thread safety: pure functions. Failure: parse_embeddings throws ApiError
// 400 naming the field (a missing input, an element of the wrong type, an empty list, an
// unknown encoding_format, token ids outside the vocabulary). Cost: O(body) plus tokenizing.
#pragma once

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/task.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

struct EmbeddingsRequest {
  std::vector<std::vector<int32_t>> inputs;  // tokenized, one per input
  bool oai = true;                           // the OpenAI answer (false: native)
  bool base64 = false;                       // encoding_format "base64"
  int normalize = 2;
  std::string model;  // the request's "model" (echoed), empty: none given
};

// `oai`: the route's shape (/v1/embeddings); a body with "content" and no "input" turns it off.
EmbeddingsRequest parse_embeddings(const json& body, bool oai, const tok::Tokenizer& tk,
                                   int default_normalize);

// The answer for the inputs' final events (in input order).
json embeddings_response(const EmbeddingsRequest& r, const std::vector<TaskEvent>& finals,
                         const std::string& model_id, int64_t n_embd);

// Standard base64 (with '=' padding) of the floats' little-endian bytes, as llama-server's
// encoding_format "base64" (what the OpenAI clients decode as float32).
std::string base64_floats(const std::vector<float>& v);

}  // namespace minfer::server
