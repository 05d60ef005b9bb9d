#include "tokenizer/chat_template.h"

#include "common/error.h"

namespace minfer::tok {

namespace {

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Qwen-style templates write their default system prompt as a literal:
//   '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n'
// Returns it, or "" when every "<|im_start|>system" is followed by template code instead.
std::string literal_default_system(std::string_view t) {
  constexpr std::string_view head = "<|im_start|>system";
  for (size_t pos = t.find(head); pos != std::string_view::npos; pos = t.find(head, pos + 1)) {
    std::string_view rest = t.substr(pos + head.size());
    if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else if (rest.starts_with("\n")) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    const size_t end = rest.find("<|im_end|>");
    if (end == std::string_view::npos || end == 0) continue;
    const std::string_view body = rest.substr(0, end);
    // A quote or brace means the content comes from Jinja code (e.g. messages[0]['content']).
    if (body.find_first_of("'\"{}") != std::string_view::npos) continue;
    return std::string(body);
  }
  return {};
}

void render_chatml(const ChatTemplate& t, std::span<const ChatMessage> msgs, bool gen,
                   std::string& out) {
  auto turn = [&](std::string_view role, std::string_view content) {
    out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
  };
  if (!t.default_system.empty() && (msgs.empty() || msgs[0].role != "system")) {
    turn("system", t.default_system);
  }
  for (const ChatMessage& m : msgs) turn(m.role, m.content);
  if (gen) out.append("<|im_start|>assistant\n");
}

void render_llama3(std::span<const ChatMessage> msgs, bool gen, std::string& out) {
  for (const ChatMessage& m : msgs) {
    out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n");
    out.append(trim(m.content)).append("<|eot_id|>");
  }
  if (gen) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void render_llama2(const ChatTemplate& t, std::span<const ChatMessage> msgs, std::string& out) {
  // The first [INST] follows the BOS the tokenizer adds; later turns open their own.
  bool in_turn = true;
  out.append("[INST] ");
  for (const ChatMessage& m : msgs) {
    const std::string_view content = t.llama2_strip ? trim(m.content) : m.content;
    if (!in_turn) {
      out.append(t.llama2_bos_in_history ? "<s>[INST] " : "[INST] ");
      in_turn = true;
    }
    if (m.role == "system") {
      if (t.llama2_system_tags) {
        out.append("<<SYS>>\n").append(content).append("\n<</SYS>>\n\n");
      } else {
        out.append(content).append("\n");
      }
    } else if (m.role == "user") {
      out.append(content).append(" [/INST]");
    } else if (m.role == "assistant") {
      out.append(content).append("</s>");
      in_turn = false;
    } else {
      fail(ErrorKind::InvalidArgument,
           "chat template llama2: role '{}' is not supported (system, user, assistant)", m.role);
    }
  }
}

}  // namespace

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  ChatTemplate t;
  if (name == "chatml") {
    t.family = ChatFamily::ChatMl;
  } else if (name == "llama2") {
    // Meta's Llama 2 chat template: <<SYS>> block, trimmed messages.
    t.family = ChatFamily::Llama2;
    t.llama2_strip = true;
  } else if (name == "llama3") {
    t.family = ChatFamily::Llama3;
  } else {
    fail(ErrorKind::InvalidArgument,
         "unknown chat template name '{}' (known: chatml, llama2, llama3)", name);
  }
  return t;
}

ChatTemplate ChatTemplate::detect(std::string_view jinja) {
  if (trim(jinja).empty()) fail(ErrorKind::InvalidArgument, "the chat template is empty");
  ChatTemplate t;
  if (contains(jinja, "<|im_start|>")) {
    t.family = ChatFamily::ChatMl;
    t.default_system = literal_default_system(jinja);
  } else if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>")) {
    t.family = ChatFamily::Llama3;
  } else if (contains(jinja, "[INST]")) {
    t.family = ChatFamily::Llama2;
    t.llama2_system_tags = contains(jinja, "<<SYS>>");
    t.llama2_strip = contains(jinja, "content.strip()");
    // Same precedence as llama.cpp: a stripping template never reopens with BOS.
    t.llama2_bos_in_history = !t.llama2_strip && contains(jinja, "bos_token + '[INST]");
    if (t.llama2_strip || t.llama2_bos_in_history) t.llama2_system_tags = true;
  } else {
    fail(ErrorKind::Unsupported,
         "unrecognised chat template (not ChatML, Llama 2 [INST] or Llama 3 header ids); "
         "pass --chat-template chatml|llama2|llama3. Template begins: '{}'",
         jinja.substr(0, 120));
  }
  return t;
}

ChatTemplate ChatTemplate::for_vocab(const Vocab& vocab, std::string_view override_name) {
  if (!override_name.empty()) return from_name(override_name);
  if (vocab.chat_template.empty()) {
    fail(ErrorKind::InvalidArgument,
         "the model has no tokenizer.chat_template; pass --chat-template chatml|llama2|llama3");
  }
  return detect(vocab.chat_template);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  std::string out;
  switch (family) {
    case ChatFamily::ChatMl:
      render_chatml(*this, messages, add_generation_prompt, out);
      break;
    case ChatFamily::Llama3:
      render_llama3(messages, add_generation_prompt, out);
      break;
    // [INST] ... [/INST] already asks for the assistant's answer.
    case ChatFamily::Llama2:
      render_llama2(*this, messages, out);
      break;
  }
  return out;
}

const char* ChatTemplate::name() const {
  switch (family) {
    case ChatFamily::ChatMl:
      return "chatml";
    case ChatFamily::Llama2:
      return "llama2";
    case ChatFamily::Llama3:
      return "llama3";
  }
  return "?";
}

}  // namespace minfer::tok
