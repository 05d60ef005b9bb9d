// Chat templates: render a conversation into the prompt text a chat model was trained on.
//
// minfer does not run Jinja. It recognises the common template families from the text of a
// GGUF's tokenizer.chat_template (or takes one by name, for --chat-template NAME) and renders
// them with its own code:
//   chatml  <|im_start|>role\ncontent<|im_end|>\n ...   (Qwen; the template's default system
//           message, if it has a literal one, is inserted when the conversation has none)
//   llama2  [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST]assistant</s>[INST] ...
//   llama3  <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> ...
//
// The rendered text contains no BOS: tokenize it with add_special = true (BOS as the vocabulary
// says) and parse_special = true (so <|im_start|> etc. become their control tokens). Stop
// generation on Tokenizer::is_eog() (EOS, <|im_end|>, <|endoftext|>, <|eot_id|>, ...).
//
// Incremental chat: with the same messages, render(h, true) is a prefix of
// render(h + {assistant reply, next user message}, true), so a session can feed only the
// suffix beyond what the model has already seen.
//
// Ownership: ChatTemplate is a value (it copies what it keeps of the template text); render
// returns a new string. Thread safety: ChatTemplate is an immutable value; render is const and
// pure.
// Failure modes: detect() throws Error(Unsupported) for a template of an unknown family, and
// Error(InvalidArgument) for an empty one; from_name() throws Error(InvalidArgument) listing
// the known names; render() throws Error(InvalidArgument) for a role the family cannot express.
// Cost: linear in the conversation's size.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "tokenizer/vocab.h"

namespace minfer::tok {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (chatml/llama3 pass other roles through)
  std::string content;
};

enum class ChatFamily { ChatMl, Llama2, Llama3 };

struct ChatTemplate {
  ChatFamily family = ChatFamily::ChatMl;
  // ChatML: system message to insert when the conversation does not start with one.
  std::string default_system;
  // Llama 2 variants, as seen in the template text.
  bool llama2_system_tags = true;      // has <<SYS>>; otherwise system text is prepended plainly
  bool llama2_bos_in_history = false;  // later turns open with "<s>[INST] "
  bool llama2_strip = false;           // message contents are trimmed

  // "chatml", "llama2", "llama3".
  static ChatTemplate from_name(std::string_view name);
  // Recognise the family (and variant details) of a Jinja chat template's text.
  static ChatTemplate detect(std::string_view jinja);
  // `override_name` when non-empty, else the vocabulary's tokenizer.chat_template; a missing
  // template is Error(InvalidArgument) suggesting --chat-template.
  static ChatTemplate for_vocab(const Vocab& vocab, std::string_view override_name = {});

  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  const char* name() const;
};

}  // namespace minfer::tok
