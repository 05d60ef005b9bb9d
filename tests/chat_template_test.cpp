// minfer-test-libs: minfer_tokenizer minfer_template minfer_gguf minfer_common
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace minfer::tok {
namespace {

// Meta's published Llama 2 and Llama 3 chat templates (tokenizer_config.json).
constexpr std::string_view kLlama2Jinja =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 "
    "and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% "
    "endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' "
    "[/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";
constexpr std::string_view kLlama3Jinja =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif "
    "%}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."},
    {"user", "Hi there "},
    {"assistant", "Hello."},
    {"user", "2+2?"},
};

TEST(ChatTemplate, ChatMlByName) {
  const ChatTemplate t = ChatTemplate::from_name("chatml");
  EXPECT_EQ(t.name(), "chatml");
  EXPECT_EQ(t.render(kConversation, true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi there <|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t.render(std::vector<ChatMessage>{{"user", "x"}}, false),
            "<|im_start|>user\nx<|im_end|>\n");
}

// The built-in llama2 / llama3 texts are Meta's own templates, so by name and from the Jinja
// text the renderings are the same.
TEST(ChatTemplate, Llama2ByNameIsMetasTemplate) {
  ChatTemplate t = ChatTemplate::from_name("llama2");
  t.bos_token = "<s>";
  t.eos_token = "</s>";
  const std::string want =
      "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello. </s>"
      "<s>[INST] 2+2? [/INST]";
  EXPECT_EQ(t.render(kConversation, true), want);
  ChatTemplate meta = ChatTemplate::from_text(kLlama2Jinja, "meta");
  meta.bos_token = "<s>";
  meta.eos_token = "</s>";
  EXPECT_EQ(meta.render(kConversation, true), want);
}

TEST(ChatTemplate, Llama3ByNameIsMetasTemplate) {
  ChatTemplate t = ChatTemplate::from_name("llama3");
  t.bos_token = "<|begin_of_text|>";
  const std::string want =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(t.render(kConversation, true), want);
  ChatTemplate meta = ChatTemplate::from_text(kLlama3Jinja, "meta");
  meta.bos_token = t.bos_token;
  EXPECT_EQ(meta.render(kConversation, true), want);
}

TEST(ChatTemplate, UnknownNamesMissingTemplatesAndRefusalsAreClearErrors) {
  EXPECT_THROW(ChatTemplate::from_name("vicuna"), Error);
  Vocab no_template;
  try {
    ChatTemplate::for_vocab(no_template);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos);
  }
  EXPECT_EQ(ChatTemplate::for_vocab(no_template, "llama3").name(), "llama3");
  EXPECT_THROW(ChatTemplate::from_text("{% if %}", "bad.jinja"), tmpl::TemplateError);
  // Meta's Llama 2 template refuses a conversation that does not alternate.
  try {
    ChatTemplate::from_name("llama2").render(std::vector<ChatMessage>{{"user", "a"}, {"user", "b"}},
                                             true);
    FAIL() << "expected a refusal";
  } catch (const tmpl::TemplateError& e) {
    EXPECT_EQ(e.template_kind(), tmpl::TemplateErrorKind::Raised);
    EXPECT_EQ(e.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

// A template without a system role (Gemma's raises "System role not supported") gets the system
// text folded into the next user message, as llama.cpp's Jinja path (minja's polyfill) does:
// `chat -sys` and a server request with a system message worked on llama.cpp and failed here.
TEST(ChatTemplate, SystemMessageFoldsIntoUserWhenTheTemplateHasNoSystemRole) {
  const ChatTemplate no_sys = ChatTemplate::from_text(
      "{% for m in messages %}{% if m['role'] == 'system' %}"
      "{{ raise_exception('System role not supported') }}{% endif %}"
      "<{{ m['role'] }}>{{ m['content'] }}{% endfor %}",
      "no-system.jinja");
  EXPECT_FALSE(no_sys.supports_system_role());
  EXPECT_EQ(no_sys.render(kConversation, true),
            "<user>You are terse.\nHi there <assistant>Hello.<user>2+2?");
  // Two system messages join; a system message after the last user turn becomes a user turn.
  EXPECT_EQ(no_sys.render(std::vector<ChatMessage>{{"system", "a"},
                                                   {"system", "b"},
                                                   {"user", "u"},
                                                   {"assistant", "r"},
                                                   {"system", "late"}},
                          true),
            "<user>a\nb\nu<assistant>r<user>late");
  EXPECT_EQ(no_sys.render(std::vector<ChatMessage>{{"system", "only"}}, true), "<user>only");
  // The raw context is rendered as given: the template's own refusal.
  nlohmann::ordered_json ctx;
  ctx["messages"] = {{{"role", "system"}, {"content", "s"}}};
  EXPECT_THROW(no_sys.render(ctx), tmpl::TemplateError);
  // A template that drops system messages silently has none either.
  const ChatTemplate drops = ChatTemplate::from_text(
      "{% for m in messages %}{% if m['role'] != 'system' %}{{ m['content'] }};{% endif %}"
      "{% endfor %}",
      "drops.jinja");
  EXPECT_FALSE(drops.supports_system_role());
  EXPECT_EQ(drops.render(kConversation, false), "You are terse.\nHi there ;Hello.;2+2?;");
  // Templates with a system role render as before.
  for (const char* name : {"chatml", "llama2", "llama3"})
    EXPECT_TRUE(ChatTemplate::from_name(name).supports_system_role()) << name;
  const std::filesystem::path gemma = std::filesystem::path(MINFER_SHARED_DIR) /
                                      "chat-templates/templates/google-gemma-2-2b-it.jinja";
  if (!std::filesystem::exists(gemma)) GTEST_SKIP() << gemma << " is absent";
  std::ifstream in(gemma, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ChatTemplate g = ChatTemplate::from_text(text, gemma.string());
  g.bos_token = "<bos>";
  EXPECT_FALSE(g.supports_system_role());
  EXPECT_EQ(g.render(kConversation, true),
            "<bos><start_of_turn>user\nYou are terse.\nHi there<end_of_turn>\n"
            "<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>user\n2+2?<end_of_turn>\n"
            "<start_of_turn>model\n");
}

// A chat session re-renders the conversation each turn; the built-in templates extend the
// previous prompt, so only the new suffix needs prefilling.
TEST(ChatTemplate, EarlierPromptIsAPrefixOfTheNextTurn) {
  for (const char* name : {"chatml", "llama2", "llama3"}) {
    const ChatTemplate t = ChatTemplate::from_name(name);
    const std::vector<ChatMessage> first(kConversation.begin(), kConversation.begin() + 2);
    const std::string before = t.render(first, true);
    const std::string after = t.render(kConversation, true);
    EXPECT_EQ(after.substr(0, before.size()), before) << name;
  }
}

TEST(ChatTemplate, LeadingBosIsLeftToTheTokenizer) {
  Vocab v;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  EXPECT_EQ(without_leading_bos("<s>[INST] hi", v), "[INST] hi");
  EXPECT_EQ(without_leading_bos("[INST] hi", v), "[INST] hi");
  v.add_bos = false;
  EXPECT_EQ(without_leading_bos("<s>[INST] hi", v), "<s>[INST] hi");
  const ChatTemplate t = ChatTemplate::for_vocab(v, "llama2");
  EXPECT_EQ(t.bos_token, "<s>");
  EXPECT_EQ(t.eos_token, "</s>");
}

TEST(ChatTemplate, QwenVocabularyCarriesChatMlWithDefaultSystem) {
  const auto path = std::filesystem::path(MINFER_SHARED_DIR) / "vocab/ggml-vocab-qwen2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (MINFER_SHARED_DIR)";
  const auto file = gguf::File::open(path.string());
  const Tokenizer tk = Tokenizer::from_gguf(file);
  // Qwen2's own Jinja template, rendered by the interpreter, inserts its default system prompt.
  const ChatTemplate t = ChatTemplate::for_vocab(tk.vocab());
  EXPECT_EQ(t.name(), "gguf");
  const std::string prompt = t.render(std::vector<ChatMessage>{{"user", "Hi"}}, true);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A system message of the user's own replaces the default.
  EXPECT_EQ(t.render(kConversation, false).find("helpful"), std::string::npos);

  const auto ids = tk.tokenize(without_leading_bos(prompt, tk.vocab()),
                               {.add_special = true, .parse_special = true});
  const TokenId im_start = tk.find_token("<|im_start|>"), im_end = tk.find_token("<|im_end|>");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), im_start);  // Qwen adds no BOS
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 2);
  EXPECT_TRUE(tk.is_eog(im_end));
  EXPECT_TRUE(tk.is_eog(tk.find_token("<|endoftext|>")));
  EXPECT_FALSE(tk.is_eog(im_start));
}

}  // namespace
}  // namespace minfer::tok
