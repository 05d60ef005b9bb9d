// gpt-oss's "harmony" answers: a sequence of messages, each a header and a body,
//   [<|start|>assistant] <|channel|>analysis <|message|> thinking <|end|>
//   <|start|>assistant <|channel|>final <|message|> the answer [<|return|>]
//   <|start|>assistant <|channel|>commentary to=functions.NAME <|constrain|>json <|message|>
//     {"arguments": ..} <|call|>
// (the first message's `<|start|>assistant` is the prompt's; a header's recipient ` to=..`
// may also come before its channel, as the template writes calls back, and its content type
// as ` json` or `<|constrain|>json`), read into OpenAI's `reasoning_content` (the analysis
// channel), `content` (the final channel, and commentary without a recipient: a preamble) and
// `tool_calls` (a message with a recipient: its name without the `functions.` prefix, its
// body the arguments object), whole or as stream deltas. The splitter of reasoning.h models
// one open / close pair; harmony's thinking ends in `<|end|>` followed by another message's
// header, and its calls are messages too, so it has its own parser, used instead of both the
// splitter and the tool-call parser when the template is gpt-oss's (ResponseBuilder).
//
// Streamed: a header is sent nothing until its `<|message|>` (so its channel is known); a body
// goes out as it arrives, but for a tail that may start an end marker; a call is announced
// (Begin) once its body starts with `{` and its arguments stream as the JSON text grows
// (json_scan.h: a valid JSON prefix at every fragment). Text that does not start as a header
// (a model that ignores the channels) is content byte for byte from there on. A call whose
// JSON breaks off (invalid, or cut by max_tokens) cannot be taken back once announced:
// broken() is set and its message's text from its header on is content. A body cut by
// max_tokens is kept (the thinking so far is reasoning).
//
// Modes (reasoning_format): Split (auto / deepseek): as above. Inline (none): the analysis
// messages and all headers and end markers stay in `content` as generated, only calls are
// taken out, so without tools the content is the text byte for byte. Both (deepseek-legacy):
// Inline's content, and the analysis bodies as `reasoning_content` too.
//
// Ownership: values. Thread safety: none (one parser per request, on its HTTP thread).
// Failure: none thrown; any text is reasoning, content or calls. Cost: linear in the text: a
// body's end-marker search and its JSON scan resume where the last push stopped; a header is
// rescanned per push until complete (headers are a few dozen bytes).
#pragma once

#include <cstddef>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "server/json_scan.h"
#include "server/tool_calls.h"

namespace minfer::server {

enum class HarmonyReasoning { Split, Inline, Both };

struct HarmonyDelta {
  enum class Kind { Reasoning, Content, Begin, Arguments };
  Kind kind = Kind::Content;
  size_t index = 0;  // Begin / Arguments: the call's position in calls()
  std::string text;  // Reasoning / Content: text; Begin: the function name; Arguments: a piece
  std::string id;    // Begin: the call id
};

// The control tokens harmony is written in; generation must keep their text for the parser
// (GenParams::keep_special).
std::vector<std::string_view> harmony_markers();

class HarmonyParser {
 public:
  // tools: a message with a recipient is a call (else it stays content, as generated);
  // parallel = false: only the first call is reported, later ones are dropped.
  HarmonyParser(HarmonyReasoning mode, bool tools, bool parallel);

  // Appends generated text (complete UTF-8); returns what can be sent now.
  std::vector<HarmonyDelta> push(std::string_view text);
  // End of generation: releases what is held; an unfinished call is broken.
  std::vector<HarmonyDelta> finish();

  // All sent so far (whole after finish()).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& calls() const { return calls_; }
  bool broken() const { return broken_; }

 private:
  enum class State { Header, Body, Raw };
  enum class Kind { Reasoning, Content, Call };
  void step(bool at_end, std::vector<HarmonyDelta>& out);
  bool step_header(bool at_end, std::vector<HarmonyDelta>& out);
  bool step_body(bool at_end, std::vector<HarmonyDelta>& out);
  bool step_call(bool at_end, std::vector<HarmonyDelta>& out);
  void end_message(size_t body_end, size_t next, std::vector<HarmonyDelta>& out);
  void break_call();
  void emit(HarmonyDelta::Kind kind, std::string_view text, std::vector<HarmonyDelta>& out);
  void emit_body(std::string_view text, std::vector<HarmonyDelta>& out);
  std::string new_id();

  HarmonyReasoning mode_;
  bool tools_;
  bool parallel_;
  std::string buf_;  // everything pushed
  size_t pos_ = 0;   // text before this is sent or dropped
  State state_ = State::Header;
  bool any_message_ = false;  // a header was complete: a later broken header is markup
  // The message in progress (Body): its kind, whether its markup goes to content, where its
  // header began, where the end-marker search goes on.
  Kind kind_ = Kind::Content;
  bool raw_ = false;
  size_t msg_at_ = 0;
  size_t search_ = 0;
  // A call's body: its arguments' scan, where they begin, how much was sent, its index in
  // calls_ (npos: dropped as parallel_ is false, or not begun yet).
  std::optional<JsonScanner> args_;
  std::string call_name_;
  size_t args_at_ = 0;
  size_t args_sent_ = 0;
  size_t call_index_ = 0;
  bool call_done_ = false;
  std::string reasoning_;
  std::string content_;
  std::vector<ToolCall> calls_;
  bool broken_ = false;
  bool finished_ = false;
  std::mt19937_64 rng_;
};

// A whole answer at once (push + finish).
struct ParsedHarmony {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  bool broken = false;
};
ParsedHarmony parse_harmony(HarmonyReasoning mode, bool tools, bool parallel,
                            std::string_view text);

}  // namespace minfer::server
