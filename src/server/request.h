// Request bodies of the generation endpoints, parsed and validated into plain values.
//
//   POST /v1/completions       prompt (string, or a list of one string / token ids)
//   POST /v1/chat/completions  messages [{role, content (string or text parts), tool_calls,
//                              tool_call_id, name, reasoning_content}], tools, tool_choice,
//                              parallel_tool_calls, chat_template_kwargs, reasoning_format
//   POST /completion           llama.cpp's native form: prompt (text or ids), n_predict, ...
//
// Every field is checked for type and range; a wrong one is ApiError 400 naming the field.
// Unknown fields are ignored (OpenAI clients send many). Options the server cannot honour
// (n > 1, best_of > 1) are 400 too, never silently ignored.
//
// Ownership: values. Thread safety: the functions are pure. Failure: ApiError(400). Cost: linear
// in the body.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sample/sampler.h"
#include "server/api_error.h"
#include "server/reasoning.h"
#include "tokenizer/chat_template.h"

namespace minfer::server {

enum class Endpoint { Completions, ChatCompletions, Native };

struct GenParams {
  SamplerParams sampling;          // temperature, top_k, top_p, min_p, repeat penalty, seed
  float presence_penalty = 0.0f;   // OpenAI: -2..2, subtracted once per token seen
  float frequency_penalty = 0.0f;  // OpenAI: -2..2, subtracted per occurrence
  int64_t n_predict = -1;          // max_tokens / n_predict; -1: until EOG or the context ends
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int32_t top_logprobs = 0;  // alternatives per token (0..20)
  bool cache_prompt = true;  // reuse the slot's previous tokens when the prompt extends them
  bool ignore_eos = false;
  bool return_tokens = false;  // native: "return_tokens"
  // logit_bias: (token id, bias) added to the token's logit before sampling; -inf bans it
  // (llama.cpp's `false`). Ids are checked against the vocabulary with the prompt.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // grammar / json_schema / response_format, compiled (server/constrain.h); null: none.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Non-empty: `grammar` is lazy (tool_choice "auto", server/constrain.h): generation is free
  // until its text contains this trigger; the grammar then constrains the output from the
  // trigger on until it is complete and cannot go on, and generation is free again (the next
  // trigger starts it anew). Text after the trigger that the grammar refuses (in the same
  // token) leaves that occurrence free.
  std::string grammar_trigger;
  bool grammar_gbnf = false;  // `grammar` is the request's own GBNF (field "grammar")
  // A chat answer's thinking markers when a tool or schema grammar constrains it (empty: none,
  // or the grammar applies from the first token): the thinking at the answer's start is free,
  // the grammar constrains the answer after it (server/constrain.h gate_grammar_on_thinking).
  // think_open: the prompt opened the thinking. A lazy grammar's trigger is watched in the
  // answer only; a strict `grammar` is then `[ \t\r\n]* <the grammar>`, applied from the close
  // marker on, and `think_start_grammar` (when !think_open) `[ \t\r\n]* (<open> .* | <the
  // grammar>)`, applied until the answer shows whether it thinks.
  ReasoningSyntax think;
  bool think_open = false;
  std::shared_ptr<const grammar::Grammar> think_start_grammar;
  // Control tokens whose text the generated text keeps (others are dropped): the tool-call
  // markers of the chat format when the request has tools (e.g. Mistral's [TOOL_CALLS]).
  std::vector<int32_t> keep_special;
};

struct GenRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;
  std::string prompt_text;             // text prompt (or the rendered chat)
  std::vector<int32_t> prompt_tokens;  // given as ids (native / completions); then no text
  bool prompt_is_tokens = false;
  std::vector<tok::ChatMessage> messages;  // chat
  // chat: tools, tool_choice and chat_template_kwargs (as `kwargs`), to the template
  tok::ChatRenderOptions chat_options;
  bool parallel_tool_calls = true;  // chat: false returns only the first tool call
  // chat: "reasoning_format"; unset: the server's (--reasoning-format)
  std::optional<ReasoningFormat> reasoning_format;
  GenParams gen;
};

// Parses the body text; malformed JSON and non-object bodies are 400.
json parse_body(const std::string& body);

// `defaults` carries the server-wide values (seed, n_predict cap).
GenRequest parse_completions(const json& body, const GenParams& defaults);
GenRequest parse_chat(const json& body, const GenParams& defaults);
GenRequest parse_native(const json& body, const GenParams& defaults);

// Token ids in a request (native prompt, /detokenize): every id must be in [0, n_vocab).
void check_token_ids(const std::vector<int32_t>& ids, int32_t n_vocab, const char* field);

}  // namespace minfer::server
