// Chat formatting: messages -> the prompt text the model was trained on.
//
// The ONE place the server turns a conversation into text: tok::ChatTemplate
// (tokenizer/chat_template.h), which renders the GGUF's own tokenizer.chat_template with the
// Jinja interpreter (src/template), a --chat-template-file's text, or a built-in text named by
// --chat-template (chatml, llama2, llama3).
//
// The template's text also tells the tool-call syntax (tool_calls.h) and the thinking markers
// (reasoning.h) the model was taught; both are detected once here.
//
// Ownership: a value (shares the parsed template). Thread safety: immutable after construction;
// format() may be called from many threads. Failure: the constructor records (why_unavailable)
// a missing or unparsable template (the server then answers chat requests with 400 naming
// --chat-template); format() throws ApiError(400) when the template refuses the conversation
// (its raise_exception message) or fails. Cost: one tree walk of the template per call.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "server/reasoning.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/vocab.h"

namespace minfer::server {

class ChatFormatter {
 public:
  // template_override: --chat-template NAME, or the text of --chat-template-file (any Jinja
  // chat template); empty: the vocabulary's own template.
  ChatFormatter(const tok::Vocab& vocab, const std::string& template_override);
  bool available() const { return tmpl_.has_value(); }
  std::string name() const;  // "chatml", ... or "none"
  // The tool-call syntax the template teaches (detected from its text once; None without one).
  ToolCallFormat tool_call_format() const { return tool_format_; }
  // The thinking markers the template teaches (detected from its text once; empty without).
  ReasoningSyntax reasoning_syntax() const { return reasoning_; }
  const std::string& why_unavailable() const { return why_; }
  std::string format(std::span<const tok::ChatMessage> messages,
                     bool add_generation_prompt = true) const;
  // With a request's tools / tool_choice (tok::ChatRenderOptions).
  std::string format(std::span<const tok::ChatMessage> messages,
                     const tok::ChatRenderOptions& options) const;

 private:
  std::optional<tok::ChatTemplate> tmpl_;
  std::string why_;
  ToolCallFormat tool_format_ = ToolCallFormat::None;
  ReasoningSyntax reasoning_ = detect_reasoning_syntax("");
};

}  // namespace minfer::server
