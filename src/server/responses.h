// Response bodies: TaskEvents -> OpenAI (text_completion, chat.completion[.chunk]) or llama.cpp
// native (/completion) JSON, whole or as Server-Sent Events.
//
// A chat answer of a reasoning model first has its thinking split out (reasoning.h): whole,
// `message.reasoning_content` (absent when the model thought nothing); streamed,
// `delta.reasoning_content` chunks before the content's. Only the rest is content and is read
// for tool calls, so a call written inside the thinking is no call.
//
// A chat request with tools (tool_format != None) has its text read by a ToolCallParser
// (tool_calls.h): whole, `message.tool_calls` with `content` null when there is no other text
// and finish_reason "tool_calls" (when the model stopped by itself); text whose calls are
// malformed stays content. Streamed, deltas as OpenAI sends them: tool_calls[i] with index, id,
// type and name first, then `function.arguments` fragments; text that may start a call is held
// back.
//
// A gpt-oss answer (ctx.harmony) is read by one HarmonyParser instead (harmony.h): analysis
// channel -> reasoning_content, final -> content, messages to functions.NAME -> tool_calls.
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

#include "server/harmony.h"
#include "server/reasoning.h"
#include "server/task.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

struct ResponseContext {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  GenParams gen;
  const tok::Tokenizer* tk = nullptr;
  ToolCallFormat tool_format = ToolCallFormat::None;  // chat with tools: parse calls
  ParamTypes tool_types;  // the tools' parameter types (XML-parameter formats)
  bool parallel_tool_calls = true;
  ReasoningSyntax reasoning;    // chat: the thinking markers to split at (empty: none)
  bool reasoning_open = false;  // the prompt opened the thinking: the answer starts in it
  bool reasoning_keep_text = false;  // deepseek-legacy: the content keeps the thinking too
  // gpt-oss: the answer is harmony messages, read by a HarmonyParser instead of the splitter
  // and the tool-call parser (tool_format Harmony: calls too).
  std::optional<HarmonyReasoning> harmony;
};

class ResponseBuilder {
 public:
  explicit ResponseBuilder(ResponseContext ctx);
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
  std::string delta_chunks(const std::vector<json>& deltas,
                           const std::vector<TokenLogprob>& lps) const;
  std::vector<json> text_deltas(const std::string& text, bool at_end);
  std::vector<json> harmony_deltas(const std::string& text, bool at_end);

  ResponseContext ctx_;
  bool started_ = false;
  bool done_ = false;
  std::string text_;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprob> lps_;
  TaskEvent final_;
  std::optional<ApiError> error_;
  std::optional<ToolCallParser> tools_;     // streaming chat with tools
  std::optional<ReasoningSplitter> think_;  // streaming chat with a thinking syntax
  std::optional<HarmonyParser> harmony_;    // streaming chat of a harmony template
};

}  // namespace minfer::server
