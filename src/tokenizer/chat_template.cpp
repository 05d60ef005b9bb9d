#include "tokenizer/chat_template.h"

#include <algorithm>
#include <vector>

#include "common/error.h"

namespace minfer::tok {

namespace {

// ChatML as Qwen / Hermes write it, without a default system message.
constexpr std::string_view kChatMl =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Meta's Llama 2 chat template (tokenizer_config.json of Llama-2-*-chat-hf).
constexpr std::string_view kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}";

// Meta's Llama 3 instruct template (tokenizer_config.json of Meta-Llama-3-8B-Instruct).
constexpr std::string_view kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";

// The marker of the system-role probe: text no template writes by itself.
constexpr std::string_view kSystemProbe = "<minfer system role probe 7f3a>";

// minja's polyfill (llama.cpp's Jinja chat path): system texts wait for the next user message
// and open it, joined by "\n"; before any other role (or at the end) they become a user message.
std::vector<ChatMessage> fold_system_messages(std::span<const ChatMessage> messages) {
  std::vector<ChatMessage> out;
  std::string pending;
  bool have_pending = false;
  const auto flush = [&] {
    if (have_pending) out.push_back({"user", std::move(pending)});
    pending.clear();
    have_pending = false;
  };
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      if (have_pending) pending += '\n';
      pending += m.content;
      have_pending = true;
    } else if (m.role == "user" && have_pending) {
      out.push_back({"user", m.content.empty() ? pending : pending + "\n" + m.content});
      pending.clear();
      have_pending = false;
    } else {
      flush();
      out.push_back(m);
    }
  }
  flush();
  return out;
}

std::string token_text(const Vocab& v, TokenId id) {
  if (id < 0 || id >= v.size()) return {};
  return v.tokens[static_cast<size_t>(id)];
}

}  // namespace

std::string_view ChatTemplate::builtin_text(std::string_view name) {
  if (name == "chatml") return kChatMl;
  if (name == "llama2") return kLlama2;
  if (name == "llama3") return kLlama3;
  fail(ErrorKind::InvalidArgument,
       "unknown chat template name '{}' (known: chatml, llama2, llama3)", name);
}

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  ChatTemplate t = from_text(builtin_text(name), std::string(name));
  return t;
}

ChatTemplate ChatTemplate::from_text(std::string_view jinja, std::string origin) {
  ChatTemplate t;
  t.template_ = tmpl::Template::parse(jinja);
  t.name_ = std::move(origin);
  const std::vector<ChatMessage> probe = {{"system", std::string(kSystemProbe)}, {"user", "Hello"}};
  try {
    nlohmann::ordered_json ctx;
    nlohmann::ordered_json& msgs = ctx["messages"] = nlohmann::ordered_json::array();
    for (const ChatMessage& m : probe) msgs.push_back({{"role", m.role}, {"content", m.content}});
    ctx["add_generation_prompt"] = false;
    t.supports_system_role_ = t.render(ctx).find(kSystemProbe) != std::string::npos;
  } catch (const std::exception&) {
    // "System role not supported" and its kin, but also a template that fails on any
    // conversation: then the real render says why.
    t.supports_system_role_ = false;
  }
  return t;
}

void ChatTemplate::use_special_tokens_of(const Vocab& vocab) {
  bos_token = token_text(vocab, vocab.bos);
  eos_token = token_text(vocab, vocab.eos);
}

ChatTemplate ChatTemplate::for_vocab(const Vocab& vocab, std::string_view override_name) {
  ChatTemplate t;
  if (!override_name.empty()) {
    t = from_name(override_name);
  } else if (vocab.chat_template.empty()) {
    fail(ErrorKind::InvalidArgument,
         "the model has no tokenizer.chat_template; pass --chat-template chatml|llama2|llama3 "
         "or --chat-template-file FILE");
  } else {
    t = from_text(vocab.chat_template, "gguf");
  }
  t.use_special_tokens_of(vocab);
  return t;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  ChatRenderOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  return render(messages, opt);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 const ChatRenderOptions& opt) const {
  std::vector<ChatMessage> folded;
  if (!supports_system_role_ &&
      std::any_of(messages.begin(), messages.end(),
                  [](const ChatMessage& m) { return m.role == "system"; })) {
    folded = fold_system_messages(messages);
    messages = folded;
  }
  // The extra variables cannot replace the ones a render sets itself (a request's tools, the
  // vocabulary's tokens): those names are dropped from them.
  nlohmann::ordered_json ctx =
      opt.kwargs.is_object() ? opt.kwargs : nlohmann::ordered_json::object();
  for (const char* own :
       {"messages", "add_generation_prompt", "tools", "tool_choice", "bos_token", "eos_token"})
    ctx.erase(own);
  nlohmann::ordered_json& msgs = ctx["messages"] = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json& j = msgs.emplace_back();
    j["role"] = m.role;
    j["content"] = m.content;
    if (m.fields.is_object())
      for (const auto& [k, v] : m.fields.items())
        if (k != "role" && k != "content") j[k] = v;
  }
  ctx["add_generation_prompt"] = opt.add_generation_prompt;
  // Undefined rather than null or [] when absent: templates test `tools is defined` / `if
  // tools` and would otherwise print an empty tools section.
  if (opt.tools.is_array() && !opt.tools.empty()) ctx["tools"] = opt.tools;
  if (!opt.tool_choice.is_null()) ctx["tool_choice"] = opt.tool_choice;
  return render(ctx);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.contains("bos_token") || !context.contains("eos_token")) {
    nlohmann::ordered_json ctx = context;
    if (!ctx.contains("bos_token")) ctx["bos_token"] = bos_token;
    if (!ctx.contains("eos_token")) ctx["eos_token"] = eos_token;
    return template_.render(ctx);
  }
  return template_.render(context);
}

std::string_view without_leading_bos(std::string_view prompt, const Vocab& vocab) {
  const std::string bos = token_text(vocab, vocab.bos);
  if (vocab.add_bos && !bos.empty() && prompt.starts_with(bos)) prompt.remove_prefix(bos.size());
  return prompt;
}

}  // namespace minfer::tok
