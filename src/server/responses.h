// Response bodies: TaskEvents -> OpenAI (text_completion, chat.completion[.chunk]) or llama.cpp
// native (/completion) JSON, whole or as Server-Sent Events.
//
// One ResponseBuilder per request. Streaming: sse() turns the events that arrived into SSE
// frames (a chat stream opens with the role delta; the final event adds the finish_reason
// chunk, the usage chunk when stream_options.include_usage, and "data: [DONE]" for the OpenAI
// endpoints; an error becomes one `data: {"error": ...}` frame). Whole: add() accumulates, body()
// renders the final JSON.
//
// Ownership: a value; keeps a pointer to the Tokenizer (for logprob token texts), which must
// outlive it. Thread safety: none (one per request). Failure: none. Cost: linear in the text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/task.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

struct ResponseContext {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  GenParams gen;
  const tok::Tokenizer* tk = nullptr;
};

class ResponseBuilder {
 public:
  explicit ResponseBuilder(ResponseContext ctx) : ctx_(std::move(ctx)) {}
  std::string sse(const std::vector<TaskEvent>& events);
  void add(const TaskEvent& ev);
  json body() const;  // after the final event
  bool done() const { return done_; }
  const std::optional<ApiError>& error() const { return error_; }

 private:
  json chunk(const std::string& text, const std::vector<TokenLogprob>& lps,
             const std::vector<int32_t>& toks, const TaskEvent* final) const;
  json usage_json(const Usage& u) const;
  json logprobs_json(const std::vector<TokenLogprob>& lps, size_t text_offset) const;
  json native_final(const TaskEvent& f, const std::string& content) const;

  ResponseContext ctx_;
  bool started_ = false;
  bool done_ = false;
  std::string text_;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprob> lps_;
  TaskEvent final_;
  std::optional<ApiError> error_;
};

}  // namespace minfer::server
