#include "server/chat.h"

#include "common/error.h"
#include "server/api_error.h"

namespace minfer::server {

ChatFormatter::ChatFormatter(const tok::Vocab& vocab, const std::string& template_override) {
  try {
    if (template_override.find("{%") != std::string::npos ||
        template_override.find("{{") != std::string::npos) {
      // A template's text (--chat-template-file): rendered by the Jinja interpreter with the
      // vocabulary's BOS / EOS.
      tmpl_ = tok::ChatTemplate::from_text(template_override, "--chat-template-file");
      tmpl_->use_special_tokens_of(vocab);
      tool_format_ = detect_tool_call_format(template_override);
      reasoning_ = detect_reasoning_syntax(template_override);
    } else {
      tmpl_ = tok::ChatTemplate::for_vocab(vocab, template_override);
      const std::string_view text = template_override.empty()
                                        ? std::string_view(vocab.chat_template)
                                        : tok::ChatTemplate::builtin_text(template_override);
      tool_format_ = detect_tool_call_format(text);
      reasoning_ = detect_reasoning_syntax(text);
    }
  } catch (const Error& e) {
    why_ = e.what();
  }
}

std::string ChatFormatter::name() const {
  return tmpl_ ? tmpl_->name() : "none";
}

std::string ChatFormatter::format(std::span<const tok::ChatMessage> messages,
                                  bool add_generation_prompt) const {
  tok::ChatRenderOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  return format(messages, opt);
}

namespace {

// The key under which a template reads an assistant turn's thinking, when it is not
// `reasoning_content` (as this server returns it): gpt-oss's `thinking`, Solar Open's
// `reasoning`.
const char* thinking_key(const ReasoningSyntax& s) {
  if (s.name == "harmony") return "thinking";
  if (s.name == "solar") return "reasoning";
  return nullptr;
}

}  // namespace

std::string ChatFormatter::format(std::span<const tok::ChatMessage> messages,
                                  const tok::ChatRenderOptions& options) const {
  if (!tmpl_)
    throw bad_request("this model has no usable chat template (" + why_ +
                      "); start the server with --chat-template chatml|llama2|llama3");
  std::vector<tok::ChatMessage> renamed;
  if (const char* key = thinking_key(reasoning_)) {
    renamed.assign(messages.begin(), messages.end());
    for (tok::ChatMessage& m : renamed)
      if (m.fields.is_object() && m.fields.contains("reasoning_content") && !m.fields.contains(key))
        m.fields[key] = m.fields["reasoning_content"];
    messages = renamed;
  }
  try {
    return tmpl_->render(messages, options);
  } catch (const tmpl::TemplateError& e) {
    // raise_exception: the template's own words ("Conversation roles must alternate ...").
    throw bad_request(e.template_kind() == tmpl::TemplateErrorKind::Raised ? e.message()
                                                                           : e.what());
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
}

}  // namespace minfer::server
