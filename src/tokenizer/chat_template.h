// Chat templates: render a conversation into the prompt text a chat model was trained on.
//
// The template is Jinja2 text rendered by minfer's interpreter (template/template.h) the way
// Hugging Face transformers renders it: the GGUF's own tokenizer.chat_template, a file
// (--chat-template-file), or a built-in text picked by name (--chat-template chatml|llama2|
// llama3) for a model that ships none. The variables are messages, add_generation_prompt,
// bos_token and eos_token (the vocabulary's BOS/EOS text), tools / tool_choice when a
// request gives them, and extra variables (chat_template_kwargs) (ChatRenderOptions); a
// message's tool_calls, tool_call_id, name and reasoning_content are passed through as its keys
// (ChatMessage::fields).
//
// Tokenize the rendering with parse_special = true (so <|im_start|> etc. become their control
// tokens) and add_special = true after without_leading_bos(): many templates write bos_token
// themselves, and the tokenizer adds BOS too when the vocabulary asks for it.
// Stop generation on Tokenizer::is_eog() (EOS, <|im_end|>, <|eot_id|>, ...).
//
// Incremental chat: a chat session renders the whole conversation every turn and feeds only the
// tokens beyond the common prefix with what the model has seen (apps/minfer/cmd_chat.cpp);
// templates that rewrite earlier turns (e.g. dropping old reasoning) stay correct that way.
//
// Ownership: ChatTemplate is a value; it shares its parsed template (immutable) between copies.
// Thread safety: render is const and may run concurrently.
// Failure modes: from_name throws Error(InvalidArgument) listing the known names; from_text
// throws tmpl::TemplateError(Syntax) naming line and column; for_vocab throws
// Error(InvalidArgument) suggesting --chat-template when the model has no template; render
// throws tmpl::TemplateError when the template refuses the conversation (raise_exception:
// template_kind() == Raised, message() is the template's own text) or fails.
// Cost: parsing is linear in the template text, plus one probe render (done once); a render
// walks the template once.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "template/template.h"
#include "tokenizer/vocab.h"

namespace minfer::tok {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
  // The message's other keys a template may read, as the client sent them: tool_calls (with
  // each call's `arguments` as an object), tool_call_id, name. An object, or null for none.
  nlohmann::ordered_json fields{};
};

// What a render is given besides the messages. tools: the request's OpenAI tool list (null or
// empty: none, and the variable is left undefined, as transformers does); tool_choice: given to
// the template as it came (null: undefined), for the few templates that read it. kwargs:
// further variables (llama-server's chat_template_kwargs, e.g. Qwen3's enable_thinking), an
// object or null; its keys named as the variables above, messages, bos_token or eos_token are
// ignored (a request's own fields say those).
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools{};
  nlohmann::ordered_json tool_choice{};
  nlohmann::ordered_json kwargs{};
};

class ChatTemplate {
 public:
  // Built-in template texts: "chatml", "llama2", "llama3".
  static ChatTemplate from_name(std::string_view name);
  // A Jinja template's text; `origin` names it in messages ("the GGUF", a file path).
  static ChatTemplate from_text(std::string_view jinja, std::string origin);
  // `override_name` when non-empty, else the vocabulary's tokenizer.chat_template; bos_token /
  // eos_token come from the vocabulary either way.
  static ChatTemplate for_vocab(const Vocab& vocab, std::string_view override_name = {});
  // Sets bos_token / eos_token to the vocabulary's BOS / EOS text (empty when it has none).
  void use_special_tokens_of(const Vocab& vocab);

  // A conversation. When the template has no system role (supports_system_role()), system
  // messages are folded into the next user message (their text, "\n", the user's text; a
  // system message with no user message after it becomes one), as llama.cpp's Jinja path
  // (minja's polyfill) does, so that -sys / a system message works with e.g. Gemma's template
  // instead of failing with its "System role not supported".
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render(std::span<const ChatMessage> messages, const ChatRenderOptions& opt) const;
  // Full control over the variables (tools, extra flags); bos_token / eos_token are added
  // when the context lacks them. The context is rendered as given (no polyfill).
  std::string render(const nlohmann::ordered_json& context) const;

  // Whether a system message reaches the rendering: decided once when the template is made, by
  // rendering a system message with a marker text and a user message (a template that raises
  // on it or drops the marker has none). The probe costs one render.
  bool supports_system_role() const { return supports_system_role_; }

  // The built-in name, "gguf" or the file the text came from.
  const std::string& name() const { return name_; }

  std::string bos_token;
  std::string eos_token;

  // The built-in texts themselves (for tests and `minfer template --chat-template NAME`).
  static std::string_view builtin_text(std::string_view name);

 private:
  tmpl::Template template_;
  std::string name_;
  bool supports_system_role_ = true;
};

// `prompt` without its leading BOS text when the tokenizer will add BOS itself (the vocabulary's
// add_bos), so a template that writes bos_token does not yield two BOS tokens.
std::string_view without_leading_bos(std::string_view prompt, const Vocab& vocab);

}  // namespace minfer::tok
