// A reasoning model's thinking in a chat answer: the text between a thinking syntax's markers
// (`<think>` .. `</think>`, Mistral's `[THINK]` .. `[/THINK]`, ...) at the start of the answer
// is split out as OpenAI-style `reasoning_content`, whole or as stream deltas, before the rest
// (the content) reaches the tool-call parser (tool_calls.h).
//
// The syntax is detected once from the chat template's text (detect_reasoning_syntax), as the
// tool-call format is, since the template is what taught the model its markers. Whether an
// answer STARTS inside the thinking is read from each rendered prompt: a template whose
// generation prompt ends with the open marker (DeepSeek R1 distills; Qwen3.5 and GLM by default;
// Qwen3 does not, and writes `<think>\n\n</think>` itself when chat_template_kwargs turns
// thinking off) has opened it for the model (prompt_opens_reasoning).
//
// ReasoningSplitter consumes the text as it is generated and returns what is safe to send: only
// a thinking block at the very start counts (leading whitespace allowed; a marker later in the
// answer is content); text that may still become a marker, and whitespace that may end the
// thinking, is held back. Whitespace right inside the markers and right after the close marker
// is dropped; an answer with no thinking comes out byte for byte as content. An answer cut inside
// the thinking (max_tokens) returns what was thought as reasoning and no content.
//
// Ownership: values. Thread safety: none (one splitter per request, on its HTTP thread).
// Failure: none; any text is reasoning or content. Cost: linear in the text; each push rescans
// only the held tail (at most a marker's length plus trailing whitespace).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace minfer::server {

// llama-server's --reasoning-format / request "reasoning_format": none leaves the thinking in
// content; deepseek splits it (with `<think>` when the template names no syntax); auto splits
// when the template has a syntax; deepseek-legacy (DeepSeekLegacy) splits it as deepseek does
// and also leaves the text, thinking and markers included, in content.
enum class ReasoningFormat { Auto, None, DeepSeek, DeepSeekLegacy };

std::optional<ReasoningFormat> parse_reasoning_format(std::string_view name);
const char* reasoning_format_name(ReasoningFormat f);

struct ReasoningSyntax {
  std::string_view name;  // "none", "think", "mistral", ... (shown in /props)
  std::string_view open;  // empty: no syntax
  std::string_view close;
  // Templates whose thinking is one message and the answer another (Solar Open, Kimi K3): the
  // next message's header the model writes after the close marker (dropped when there), then
  // the content's own opening marker (dropped when there, also at the start of an answer
  // without thinking), and markup that ends the content (dropped wherever it appears in it).
  std::string_view after_close = {};
  std::string_view content_open = {};
  std::array<std::string_view, 3> trailers = {};
  // The text that identifies the syntax in a template (empty: `open` or `close`).
  std::string_view detect = {};
  bool empty() const { return open.empty(); }
};

// The syntax a chat template's Jinja text teaches (either of its markers appears), or none:
//   think    <think> .. </think>         Qwen3, Qwen3.5, DeepSeek R1 / V4, GLM 4.7, SmolLM3,
//                                        Kimi K2 Thinking, Nemotron 3, LFM2.5, Granite 3.3, ...
//   mistral  [THINK] .. [/THINK]         Ministral 3 Reasoning
//   minimax  <mm:think> .. </mm:think>   MiniMax M3
//   command  <|START_THINKING|> .. <|END_THINKING|>   Command A reasoning (Cohere2 MoE)
//   gemma4   <|channel>thought .. <channel|>           Gemma 4
//   apriel   Here are my reasoning steps: .. [BEGIN FINAL RESPONSE]   Apriel 1.5, 1.6 Thinker
//   solar    <|think|> .. <|end|> then <|begin|>assistant<|content|>   Solar Open
//   kimi_k3  <|open|>think<|sep|> .. <|close|>think<|sep|> then <|open|>response<|sep|>  Kimi K3
//   harmony  gpt-oss's analysis channel; its answers are read by harmony.h, not the splitter
ReasoningSyntax detect_reasoning_syntax(std::string_view template_text);

// Every marker of the syntax (open, close, headers, trailers): control tokens in some
// vocabularies, whose text generation must keep (GenParams::keep_special).
std::vector<std::string_view> reasoning_markers(const ReasoningSyntax& s);

// The syntax a request's answer is split with: none for `none`, the template's for `auto`, the
// template's or else <think> for `deepseek`.
ReasoningSyntax choose_reasoning_syntax(ReasoningFormat f, ReasoningSyntax detected);

// Whether the rendered prompt ends (but for whitespace) with the syntax's open marker.
bool prompt_opens_reasoning(const ReasoningSyntax& s, std::string_view prompt);
// Whether it ends with the close marker: the template wrote an empty thinking (Qwen3's
// enable_thinking false), so the answer is all content.
bool prompt_closes_reasoning(const ReasoningSyntax& s, std::string_view prompt);

struct ReasoningPiece {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  // inside: the prompt opened the thinking (prompt_opens_reasoning); the model may still write
  // the open marker once more, which is dropped. keep_text (deepseek-legacy): the content is
  // the text as generated, thinking and markers included; the reasoning is split all the same.
  ReasoningSplitter(ReasoningSyntax syntax, bool inside, bool keep_text = false);

  // Appends generated text (complete UTF-8); returns what can be sent now.
  ReasoningPiece push(std::string_view text);
  // End of generation: releases what is held (trailing whitespace of a cut thinking dropped).
  ReasoningPiece finish();

  // All sent so far (whole after finish()).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }

  // Where the text pushed so far stands: Start (whitespace or part of the open marker: not
  // known yet), Thinking, or Answer (the close marker was read, or the answer began without
  // thinking). The slot's grammar gate (server/slot.h) follows it; thought(): the thinking
  // opened (the answer, if any, came after a close marker).
  enum class Phase { Start, Thinking, Answer };
  Phase phase() const;
  bool thought() const { return thought_; }

 private:
  enum class State { Start, StartInside, Inside, AfterClose, ContentOpen, Content };
  void step(bool at_end, ReasoningPiece& out);
  void step_inside(bool at_end, ReasoningPiece& out);
  void step_content(bool at_end, ReasoningPiece& out);
  void emit_reasoning(std::string_view text, ReasoningPiece& out);
  void emit_content(std::string_view text, ReasoningPiece& out);

  ReasoningSyntax syntax_;
  State state_;
  std::string held_;  // pushed, not yet sent
  bool reasoning_started_ = false;
  bool thought_ = false;
  bool finished_ = false;
  bool keep_text_ = false;
  std::string reasoning_;
  std::string content_;
};

// A whole answer at once (push + finish).
ReasoningPiece split_reasoning(ReasoningSyntax syntax, bool inside, std::string_view text,
                               bool keep_text = false);

}  // namespace minfer::server
