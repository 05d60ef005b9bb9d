// minfer-test-libs: minfer_server
// A reasoning model's thinking (server/reasoning.h): syntax detection over the template corpus,
// whether real templates' prompts open the thinking, the splitter per syntax whole, in pieces of
// 1..13 bytes, cut and absent; then over HTTP with the scripted fake engine: reasoning_content
// whole and streamed, reasoning_format, tool calls after the thinking (a call inside it is no
// call), chat_template_kwargs from the request and the server, reasoning_content in history,
// /props, and markers that are control tokens. Grammars after the thinking:
// server_reasoning_gate_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/chat.h"
#include "server/reasoning.h"
#include "server_reasoning_test_util.h"
#include "server_test_util.h"
#include "tokenizer/chat_template.h"

namespace minfer::testing {
namespace {

namespace fs = std::filesystem;
using server::ReasoningFormat;
using server::ReasoningPiece;
using server::ReasoningSplitter;
using server::ReasoningSyntax;

TEST(Reasoning, DetectsTheSyntaxOfEachCorpusTemplate) {
  if (!have_corpus()) GTEST_SKIP() << "no template corpus in " << MINFER_SHARED_DIR;
  const std::map<std::string, std::string> want = {
      {"Qwen-Qwen3-0.6B", "think"},
      {"Qwen3.5-4B", "think"},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "think"},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "think"},
      {"llama-cpp-deepseek-r1", "think"},
      {"deepseek-ai-DeepSeek-V4", "think"},
      {"Kimi-K2-Thinking", "think"},
      {"GLM-4.7-Flash", "think"},
      {"HuggingFaceTB-SmolLM3-3B", "think"},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "think"},
      {"poolside-Laguna-XS-2.1", "think"},
      {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral"},
      {"MiniMax-M3", "minimax"},
      {"Cohere2MoE", "command"},
      {"google-gemma-4-31B-it-interleaved", "gemma4"},
      {"Apriel-1.6-15b-Thinker-fixed", "apriel"},
      {"unsloth-Apriel-1.5", "apriel"},
      // Thinking as a message of its own.
      {"openai-gpt-oss-120b", "harmony"},
      {"Kimi-K3", "kimi_k3"},
      {"upstage-Solar-Open-100B", "solar"},
      // No thinking syntax.
      {"Qwen-Qwen2.5-7B-Instruct", "none"},
      {"meta-llama-Llama-3.1-8B-Instruct", "none"},
      {"mistralai-Mistral-Nemo-Instruct-2407", "none"},
      {"google-gemma-2-2b-it", "none"},
  };
  for (const auto& [name, syntax] : want) {
    const std::string t = corpus_template(name);
    ASSERT_FALSE(t.empty()) << name;
    EXPECT_EQ(server::detect_reasoning_syntax(t).name, syntax) << name;
  }
}

// The prompt says whether the answer starts inside the thinking: rendered with the real
// templates, with and without chat_template_kwargs.
TEST(Reasoning, RealTemplatesPromptsOpenTheThinkingOrNot) {
  if (!have_corpus()) GTEST_SKIP() << "no template corpus";
  const std::vector<tok::ChatMessage> msgs = {{"user", "Hi", {}}};
  auto opens = [&](const std::string& name, nlohmann::ordered_json kwargs) {
    const std::string text = corpus_template(name);
    const tok::ChatTemplate t = tok::ChatTemplate::from_text(text, name);
    tok::ChatRenderOptions opt;
    opt.kwargs = std::move(kwargs);
    return server::prompt_opens_reasoning(server::detect_reasoning_syntax(text),
                                          t.render(msgs, opt));
  };
  const nlohmann::ordered_json off = {{"enable_thinking", false}};
  const nlohmann::ordered_json on = {{"enable_thinking", true}};
  // Qwen3 lets the model open <think> itself; enable_thinking false writes an empty one.
  EXPECT_FALSE(opens("Qwen-Qwen3-0.6B", nullptr));
  EXPECT_FALSE(opens("Qwen-Qwen3-0.6B", off));
  // Qwen3.5, GLM 4.7, Nemotron 3 open it in the prompt unless told not to.
  EXPECT_TRUE(opens("Qwen3.5-4B", nullptr));
  EXPECT_FALSE(opens("Qwen3.5-4B", off));
  EXPECT_TRUE(opens("GLM-4.7-Flash", nullptr));
  EXPECT_FALSE(opens("GLM-4.7-Flash", off));
  EXPECT_TRUE(opens("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", on));
  EXPECT_FALSE(opens("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", off));
  // DeepSeek R1 distills: always (llama.cpp's copy), or with enable_thinking (this variant).
  EXPECT_TRUE(opens("llama-cpp-deepseek-r1", nullptr));
  EXPECT_TRUE(opens("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", nullptr));
  EXPECT_TRUE(opens("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", on));
  EXPECT_FALSE(opens("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", off));
  // Apriel 1.6 starts the answer with "Here are my reasoning steps:".
  EXPECT_TRUE(opens("Apriel-1.6-15b-Thinker-fixed", nullptr));
  // SmolLM3's system prompt mentions <think> .. </think>; the answer is not opened.
  EXPECT_FALSE(opens("HuggingFaceTB-SmolLM3-3B", nullptr));
  // Kimi K3 opens its think tag unless `thinking` is false; Solar Open lets the model write
  // <|think|> (reasoning_effort low writes an empty one into the prompt).
  EXPECT_TRUE(opens("Kimi-K3", nullptr));
  EXPECT_FALSE(opens("Kimi-K3", {{"thinking", false}}));
  EXPECT_FALSE(opens("upstage-Solar-Open-100B", nullptr));
  EXPECT_FALSE(opens("upstage-Solar-Open-100B", {{"reasoning_effort", "low"}}));
}

ReasoningSyntax syntax_named(std::string_view name) {
  for (const char* t : {"[THINK][/THINK]", "<mm:think></mm:think>",
                        "<|START_THINKING|><|END_THINKING|>", "<|channel>thought<channel|>",
                        "Here are my reasoning steps:[BEGIN FINAL RESPONSE]", "<think></think>"})
    if (server::detect_reasoning_syntax(t).name == name) return server::detect_reasoning_syntax(t);
  ADD_FAILURE() << name;
  return {};
}

// Pushed in pieces of `step` bytes (0: whole): the concatenated output.
ReasoningPiece split_in_pieces(const ReasoningSyntax& s, bool inside, std::string_view text,
                               size_t step) {
  ReasoningSplitter sp(s, inside);
  ReasoningPiece all;
  const size_t n = step == 0 ? std::max<size_t>(text.size(), 1) : step;
  for (size_t i = 0; i < text.size(); i += n) {
    ReasoningPiece p = sp.push(text.substr(i, n));
    all.reasoning += p.reasoning;
    all.content += p.content;
  }
  ReasoningPiece p = sp.finish();
  all.reasoning += p.reasoning;
  all.content += p.content;
  EXPECT_EQ(all.reasoning, sp.reasoning());
  EXPECT_EQ(all.content, sp.content());
  return all;
}

void expect_split(const ReasoningSyntax& s, bool inside, const std::string& text,
                  const std::string& reasoning, const std::string& content) {
  for (size_t step = 0; step <= 13; ++step) {
    const ReasoningPiece p = split_in_pieces(s, inside, text, step);
    EXPECT_EQ(p.reasoning, reasoning) << s.name << " step " << step << ": " << text;
    EXPECT_EQ(p.content, content) << s.name << " step " << step << ": " << text;
  }
  const ReasoningPiece whole = server::split_reasoning(s, inside, text);
  EXPECT_EQ(whole.reasoning, reasoning) << text;
  EXPECT_EQ(whole.content, content) << text;
}

TEST(Reasoning, SplitsEachSyntaxWholeAndInPieces) {
  for (std::string_view name : {"think", "mistral", "minimax", "command", "gemma4", "apriel"}) {
    const ReasoningSyntax s = syntax_named(name);
    const std::string open(s.open), close(s.close);
    // Whole: whitespace inside the markers and after the close one is dropped.
    expect_split(s, false, open + "\nFirst, 2 + 2.\n\nThen 4.\n" + close + "\n\nIt is 4.",
                 "First, 2 + 2.\n\nThen 4.", "It is 4.");
    // Leading whitespace before the open marker.
    expect_split(s, false, "\n " + open + "a" + close + "b", "a", "b");
    // An empty thinking: no reasoning.
    expect_split(s, false, open + "\n\n" + close + "\n\nHi", "", "Hi");
    // The prompt opened the thinking: the answer starts in it, with or without the marker.
    expect_split(s, true, "Hmm.\n" + close + "\nAnswer", "Hmm.", "Answer");
    expect_split(s, true, open + "\nHmm." + close + "Answer", "Hmm.", "Answer");
    // Cut inside the thinking (max_tokens): what was thought, no content.
    expect_split(s, false, open + "\nStill thinking " + close.substr(0, close.size() - 1),
                 "Still thinking " + close.substr(0, close.size() - 1), "");
    expect_split(s, true, "Only thoughts\n\n", "Only thoughts", "");
    // A second thinking block or a marker later is content.
    expect_split(s, false, open + "a" + close + "b " + open + "c" + close, "a",
                 "b " + open + "c" + close);
  }
}

// Solar Open and Kimi K3 write the thinking as a message of its own, then the answer's header:
// dropped, as are the markup that closes the answer.
TEST(Reasoning, SplitsThinkingMessagesWholeAndInPieces) {
  const ReasoningSyntax solar = server::detect_reasoning_syntax("<|begin|>assistant<|think|>");
  ASSERT_EQ(solar.name, "solar");
  expect_split(solar, false,
               "<|think|>Let me add.\n<|end|><|begin|>assistant<|content|>It is 4.<|end|>",
               "Let me add.", "It is 4.");
  expect_split(solar, false, "<|content|>No thinking.", "", "No thinking.");
  expect_split(solar, false, "<|think|>Still adding", "Still adding", "");
  expect_split(solar, false, "Plain <b>text</b>", "", "Plain <b>text</b>");
  // A call after the thinking: its block reaches the tool-call parser as content.
  expect_split(solar, false,
               "<|think|>Call it.<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>x",
               "Call it.", "<|tool_calls|><|tool_call:begin|>x");
  const ReasoningSyntax kimi = server::detect_reasoning_syntax("{{ open_tag('think') }}");
  ASSERT_EQ(kimi.name, "kimi_k3");
  expect_split(kimi, true,
               "Hmm.\n<|close|>think<|sep|><|open|>response<|sep|>Answer.<|close|>response"
               "<|sep|><|close|>message<|sep|><|end_of_msg|>",
               "Hmm.", "Answer.");
  // Thinking off: the prompt opened the response.
  expect_split(kimi, false, "Answer.<|close|>response<|sep|>", "", "Answer.");
  expect_split(kimi, true, "Cut <|close|>thi", "Cut <|close|>thi", "");
  const std::vector<std::string_view> markers = server::reasoning_markers(kimi);
  EXPECT_EQ(markers.size(), 6u);
}

// What the real templates write back as history reads back as the same thinking and answer.
TEST(Reasoning, ThinkingMessagesRenderedByTheTemplatesReadBack) {
  if (!have_corpus()) GTEST_SKIP() << "no template corpus";
  const nlohmann::ordered_json calls = nlohmann::ordered_json::parse(
      R"([{"id": "a1b2c3d4e5", "type": "function", "function": {"name": "get_time",
          "arguments": {}}}])");
  struct Case {
    const char* name;
    std::vector<tok::ChatMessage> msgs;
    std::string prompt_end;  // the generation prompt, where the answer starts
    bool inside;
    std::string content;
  } cases[] = {
      {"upstage-Solar-Open-100B",
       {{"user", "Time?", {}},
        {"assistant", "", {{"reasoning_content", "Need the clock."}, {"tool_calls", calls}}},
        {"tool", "12:00", {{"tool_call_id", "a1b2c3d4e5"}}}},
       "<|begin|>assistant",
       false,
       "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_time<|tool_call:args|>{}"
       "<|tool_call:end|><|calls|>"},
      {"Kimi-K3",
       {{"user", "Time?", {}}, {"assistant", "Noon.", {{"reasoning_content", "Need the clock."}}}},
       "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>",
       true,
       "Noon."},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const server::ChatFormatter f(fake_vocab(), corpus_template(c.name));
    tok::ChatRenderOptions opt;
    opt.add_generation_prompt = false;
    const std::string p = f.format(c.msgs, opt);
    const size_t at = p.find(c.prompt_end, p.find("Time?"));
    ASSERT_NE(at, std::string::npos) << p;
    std::string answer = p.substr(at + c.prompt_end.size());
    if (const size_t tool = answer.find("<|begin|>tool"); tool != std::string::npos)
      answer.resize(tool);
    const ReasoningPiece r = server::split_reasoning(f.reasoning_syntax(), c.inside, answer);
    EXPECT_EQ(r.reasoning, "Need the clock.") << answer;
    EXPECT_EQ(r.content, c.content) << answer;
  }
}

TEST(Reasoning, TextWithoutThinkingIsContentByteForByte) {
  const ReasoningSyntax think = syntax_named("think");
  for (const std::string& text :
       {std::string("Plain answer.\n"), std::string("  <thin"), std::string("<b>bold</b>"),
        std::string("The tag <think> is mid-text </think>."), std::string(" \n "), std::string("")})
    expect_split(think, false, text, "", text);
  // No syntax (reasoning_format none, or a template without one): everything is content.
  const ReasoningSyntax none = server::choose_reasoning_syntax(ReasoningFormat::None, think);
  EXPECT_TRUE(none.empty());
  expect_split(none, false, "<think>a</think>b", "", "<think>a</think>b");
  expect_split(none, true, "<think>a</think>b", "", "<think>a</think>b");
}

TEST(Reasoning, PartialMarkersAreHeldBackNotSent) {
  const ReasoningSyntax s = syntax_named("think");
  ReasoningSplitter sp(s, false);
  EXPECT_EQ(sp.push("<thi").content, "");  // may still open the thinking
  ReasoningPiece p = sp.push("nk>Let me see. </th");
  EXPECT_EQ(p.reasoning, "Let me see.");  // the space and "</th" wait
  p = sp.push("ink>  ");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "");
  p = sp.push(" Yes.");
  EXPECT_EQ(p.content, "Yes.");
  // A false alarm: the held text goes out when it cannot be the marker.
  ReasoningSplitter q(s, true);
  EXPECT_EQ(q.push("a </t").reasoning, "a");
  EXPECT_EQ(q.push("able>").reasoning, " </table>");
}

TEST(Reasoning, FormatNamesAndChoice) {
  EXPECT_EQ(server::parse_reasoning_format("none"), ReasoningFormat::None);
  EXPECT_EQ(server::parse_reasoning_format("deepseek"), ReasoningFormat::DeepSeek);
  EXPECT_EQ(server::parse_reasoning_format("auto"), ReasoningFormat::Auto);
  EXPECT_EQ(server::parse_reasoning_format("deepseek-legacy"), ReasoningFormat::DeepSeekLegacy);
  EXPECT_STREQ(server::reasoning_format_name(ReasoningFormat::DeepSeekLegacy), "deepseek-legacy");
  EXPECT_FALSE(server::parse_reasoning_format("legacy"));
  const ReasoningSyntax none = server::detect_reasoning_syntax("{{ messages }}");
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(server::choose_reasoning_syntax(ReasoningFormat::Auto, none).empty());
  EXPECT_EQ(server::choose_reasoning_syntax(ReasoningFormat::DeepSeek, none).open, "<think>");
  const ReasoningSyntax mistral = syntax_named("mistral");
  EXPECT_EQ(server::choose_reasoning_syntax(ReasoningFormat::DeepSeek, mistral).open, "[THINK]");
}

// ---- over HTTP, with the scripted fake engine ----

// DeepSeek R1's shape: the generation prompt opens the thinking.
constexpr const char* kOpenTemplate =
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}";

// Ministral 3 Reasoning's markers, control tokens in the vocabulary.
constexpr const char* kMistralThinkTemplate =
    "{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}"
    "{# the model thinks in [THINK] .. [/THINK] #}";

constexpr const char* kThought =
    "<think>\nThe user greets me. <tool_call> is not a call here.\n"
    "</think>\n\nHello there!";

TEST(ServerReasoning, WholeAnswerHasReasoningContent) {
  TestServer s(scripted(byte_script(kThought)), {}, vocab_with(kThinkTemplate));
  int st = 0;
  const json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json want = {{"role", "assistant"},
                     {"content", "Hello there!"},
                     {"reasoning_content", "The user greets me. <tool_call> is not a call here."}};
  EXPECT_EQ(r["choices"][0]["message"].dump(), want.dump());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  auto props = s.client().Get("/props");
  ASSERT_TRUE(props);
  EXPECT_EQ(json::parse(props->body)["reasoning_syntax"], "think");
  EXPECT_EQ(json::parse(props->body)["reasoning_format"], "auto");
}

TEST(ServerReasoning, StreamSendsReasoningDeltasBeforeContent) {
  TestServer s(scripted(byte_script(kThought)), {}, vocab_with(kThinkTemplate));
  const Streamed r = post_stream(s, chat_body(true));
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.reasoning, "The user greets me. <tool_call> is not a call here.");
  EXPECT_EQ(r.content, "Hello there!");
  EXPECT_FALSE(r.reasoning_after_content);
  EXPECT_EQ(r.last["choices"][0]["finish_reason"], "stop");
  // Logprobs: one entry per generated token, also for the tokens of held-back or dropped text.
  auto raw = s.client().Post("/v1/chat/completions", chat_body(true, {{"logprobs", true}}).dump(),
                             "application/json");
  ASSERT_TRUE(raw && raw->status == 200);
  size_t n_logprobs = 0;
  for (const json& ch : sse_payloads(raw->body))
    if (!ch["choices"].empty() && ch["choices"][0]["logprobs"].is_object())
      n_logprobs += ch["choices"][0]["logprobs"]["content"].size();
  EXPECT_EQ(n_logprobs, std::string(kThought).size());
}

TEST(ServerReasoning, CutInsideTheThinkingReturnsWhatWasThought) {
  TestServer s(scripted(byte_script(kThought)), {}, vocab_with(kThinkTemplate));
  int st = 0;
  const json r = post(s, chat_body(false, {{"max_tokens", 30}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  // 30 bytes: "<think>\n" and "The user greets me. <t" (not the start of "</think>").
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "The user greets me. <t");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  const Streamed t = post_stream(s, chat_body(true, {{"max_tokens", 30}}));
  EXPECT_EQ(t.reasoning, "The user greets me. <t");
  EXPECT_EQ(t.content, "");
  EXPECT_EQ(t.last["choices"][0]["finish_reason"], "length");
}

TEST(ServerReasoning, ReasoningFormatNoneLeavesTheText) {
  TestServer s(scripted(byte_script(kThought)), {}, vocab_with(kThinkTemplate));
  int st = 0;
  json r = post(s, chat_body(false, {{"reasoning_format", "none"}}), &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], kThought);
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content"));
  const Streamed t = post_stream(s, chat_body(true, {{"reasoning_format", "none"}}));
  EXPECT_EQ(t.content, kThought);
  EXPECT_EQ(t.reasoning, "");
  r = post(s, chat_body(false, {{"reasoning_format", "hidden"}}), &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(r.dump().find("'reasoning_format'"), std::string::npos) << r.dump();
  EXPECT_NE(r.dump().find("hidden"), std::string::npos) << r.dump();
  post(s, chat_body(false, {{"reasoning_format", 1}}), &st);
  EXPECT_EQ(st, 400);
  // The server's default (--reasoning-format none); a request may still ask for the split.
  server::ServerParams sp;
  sp.reasoning_format = ReasoningFormat::None;
  TestServer n(scripted(byte_script(kThought)), sp, vocab_with(kThinkTemplate));
  r = post(n, chat_body(false), &st);
  EXPECT_EQ(r["choices"][0]["message"]["content"], kThought);
  r = post(n, chat_body(false, {{"reasoning_format", "deepseek"}}), &st);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello there!");
}

// deepseek-legacy: reasoning_content, and the text as generated in content.
TEST(ServerReasoning, DeepseekLegacyKeepsTheThinkingInContentToo) {
  TestServer s(scripted(byte_script(kThought)), {}, vocab_with(kThinkTemplate));
  int st = 0;
  const json r = post(s, chat_body(false, {{"reasoning_format", "deepseek-legacy"}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], kThought);
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"],
            "The user greets me. <tool_call> is not a call here.");
  const Streamed t = post_stream(s, chat_body(true, {{"reasoning_format", "deepseek-legacy"}}));
  EXPECT_EQ(t.content, kThought);
  EXPECT_EQ(t.reasoning, "The user greets me. <tool_call> is not a call here.");
  EXPECT_TRUE(t.done);
}

TEST(ServerReasoning, DeepseekSplitsThinkWithoutATemplateSyntax) {
  constexpr const char* kPlain =
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant: ";
  TestServer s(scripted(byte_script(kThought)), {}, vocab_with(kPlain));
  int st = 0;
  json r = post(s, chat_body(false), &st);  // auto: no syntax, no split
  EXPECT_EQ(r["choices"][0]["message"]["content"], kThought);
  r = post(s, chat_body(false, {{"reasoning_format", "deepseek"}}), &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello there!");
  EXPECT_TRUE(r["choices"][0]["message"].contains("reasoning_content"));
}

TEST(ServerReasoning, PromptThatOpensTheThinkingStartsInIt) {
  const std::string text = "Greeting.\nSo I greet back.\n</think>\n\nHi!";
  TestServer s(scripted(byte_script(text)), {}, vocab_with(kOpenTemplate));
  int st = 0;
  const json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Greeting.\nSo I greet back.");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hi!");
  const Streamed t = post_stream(s, chat_body(true));
  EXPECT_EQ(t.reasoning, "Greeting.\nSo I greet back.");
  EXPECT_EQ(t.content, "Hi!");
}

TEST(ServerReasoning, ToolCallsAfterTheThinkingParseAndNotInsideIt) {
  const std::string text =
      "<think>\nI should call <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"
      " maybe.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  TestServer s(scripted(byte_script(text)), {}, vocab_with(kThinkTemplate));
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])");
  int st = 0;
  const json r = post(s, chat_body(false, {{"tools", tools}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& m = r["choices"][0]["message"];
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"],
            "I should call <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call> "
            "maybe.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");

  auto c = s.client();
  auto raw = c.Post("/v1/chat/completions", chat_body(true, {{"tools", tools}}).dump(),
                    "application/json");
  ASSERT_TRUE(raw && raw->status == 200);
  bool done = false;
  std::vector<std::string> names;
  std::string reasoning;
  for (const json& ch : sse_payloads(raw->body, &done)) {
    if (ch["choices"].empty()) continue;
    const json& d = ch["choices"][0]["delta"];
    if (d.contains("reasoning_content")) {
      EXPECT_TRUE(names.empty()) << "reasoning after a call";
      reasoning += d["reasoning_content"].get<std::string>();
    }
    if (d.contains("tool_calls") && d["tool_calls"][0].contains("id"))
      names.push_back(d["tool_calls"][0]["function"]["name"]);
    if (d.contains("content") && !d.contains("role")) ADD_FAILURE() << "content: " << d.dump();
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(names, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(reasoning, m["reasoning_content"]);
}

// A server over a corpus template whose scripted model writes `text` a byte per token, asked
// with one get_time tool: its whole answer (status 200 asserted), its streamed one, /props.
struct ThinkThenCall {
  json whole;
  Streamed streamed;
  json props;
};

ThinkThenCall think_then_call(const char* template_name, const std::string& text) {
  const std::string tmpl = corpus_template(template_name);
  FakeParams fp = scripted(byte_script(text));
  fp.n_ctx_seq = 4096;  // its system prompt, a byte per token
  fp.n_ctx = 4 * 4096;
  TestServer s(fp, {}, vocab_with(tmpl.c_str()));
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object"}}}])");
  ThinkThenCall out;
  int st = 0;
  out.whole = post(s, chat_body(false, {{"tools", tools}}), &st);
  EXPECT_EQ(st, 200) << out.whole.dump();
  out.streamed = post_stream(s, chat_body(true, {{"tools", tools}}));
  auto props = s.client().Get("/props");
  EXPECT_TRUE(props);
  if (props) out.props = json::parse(props->body);
  return out;
}

// Solar Open's real template: the thinking message, then a call message, over HTTP.
TEST(ServerReasoning, SolarOpenThinksThenCalls) {
  if (!have_corpus()) GTEST_SKIP() << "no template corpus";
  const ThinkThenCall c = think_then_call(
      "upstage-Solar-Open-100B",
      "<|think|>Need the clock.<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>"
      "a1b2c3d4e5<|tool_call:name|>get_time<|tool_call:args|>{\"zone\": \"utc\"}"
      "<|tool_call:end|><|calls|>");
  const json& m = c.whole["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Need the clock.");
  EXPECT_TRUE(m["content"].is_null()) << c.whole.dump();
  ASSERT_EQ(m["tool_calls"].size(), 1u) << c.whole.dump();
  EXPECT_EQ(m["tool_calls"][0]["id"], "a1b2c3d4e5");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"zone\": \"utc\"}");
  EXPECT_EQ(c.whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(c.streamed.reasoning, "Need the clock.");
  EXPECT_EQ(c.streamed.content, "");
  EXPECT_EQ(c.props["reasoning_syntax"], "solar");
  EXPECT_EQ(c.props["tool_call_format"], "solar");
}

// Kimi K3's real template: the thinking its prompt opened, the empty response message, then a
// tools section with a typed argument, over HTTP; /props names both syntaxes.
TEST(ServerReasoning, KimiK3ThinksThenCalls) {
  if (!have_corpus()) GTEST_SKIP() << "no template corpus";
  const ThinkThenCall c = think_then_call(
      "Kimi-K3",
      "Need the clock.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
      "<|open|>tools<|sep|><|open|>call tool=\"get_time\" index=\"1\"<|sep|><|open|>argument "
      "key=\"zone\" type=\"string\"<|sep|>utc<|close|>argument<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>");
  const json& m = c.whole["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Need the clock.");
  EXPECT_TRUE(m["content"].is_null()) << c.whole.dump();
  ASSERT_EQ(m["tool_calls"].size(), 1u) << c.whole.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"zone\": \"utc\"}");
  EXPECT_EQ(c.whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(c.streamed.reasoning, "Need the clock.");
  EXPECT_EQ(c.streamed.content, "");
  EXPECT_EQ(c.props["reasoning_syntax"], "kimi_k3");
  EXPECT_EQ(c.props["tool_call_format"], "kimi_k3");
}

TEST(ServerReasoning, ChatTemplateKwargsReachTheTemplate) {
  server::ServerParams sp;
  sp.chat_template_kwargs = {{"enable_thinking", false}};
  TestServer flag(scripted(byte_script("Hi")), sp, vocab_with(kThinkTemplate));
  TestServer plain(scripted(byte_script("Hi")), {}, vocab_with(kThinkTemplate));
  auto prompt_of = [](const TestServer& s, const json& body) {
    int st = 0;
    const json r = post(s, body, &st, "/apply-template");
    EXPECT_EQ(st, 200) << r.dump();
    return r.value("prompt", std::string());
  };
  const std::string empty_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  const json off = {{"enable_thinking", false}}, on = {{"enable_thinking", true}};
  EXPECT_FALSE(prompt_of(plain, chat_body(false)).ends_with(empty_think));
  EXPECT_TRUE(
      prompt_of(plain, chat_body(false, {{"chat_template_kwargs", off}})).ends_with(empty_think));
  // The server's --chat-template-kwargs, and a request's keys over it.
  EXPECT_TRUE(prompt_of(flag, chat_body(false)).ends_with(empty_think));
  EXPECT_FALSE(
      prompt_of(flag, chat_body(false, {{"chat_template_kwargs", on}})).ends_with(empty_think));
  EXPECT_TRUE(prompt_of(flag, chat_body(false, {{"chat_template_kwargs", {{"x", 1}}}}))
                  .ends_with(empty_think));
  // Not an object: 400 naming the field and what it got.
  int st = 0;
  const json bad = post(plain, chat_body(false, {{"chat_template_kwargs", "{}"}}), &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(bad.dump().find("'chat_template_kwargs' must be an object, got string \\\"{}\\\""),
            std::string::npos)
      << bad.dump();
  // A kwarg cannot replace the request's own variables.
  const std::string p =
      prompt_of(plain, chat_body(false, {{"chat_template_kwargs", {{"messages", json::array()}}}}));
  EXPECT_NE(p.find("<|im_start|>user\nHi"), std::string::npos) << p;
  // And a generation with thinking off: the answer is content.
  const json r = post(flag, chat_body(false), &st);
  EXPECT_EQ(r["choices"][0]["message"].dump(),
            json({{"role", "assistant"}, {"content", "Hi"}}).dump());
}

TEST(ServerReasoning, HistoryReasoningContentReachesTheTemplate) {
  TestServer s(scripted(byte_script(kThought)), {}, vocab_with(kThinkTemplate));
  int st = 0;
  const json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200);
  json msgs = chat_body(false)["messages"];
  msgs.push_back(r["choices"][0]["message"]);  // content and reasoning_content as returned
  msgs.push_back({{"role", "user"}, {"content", "Again"}});
  const json t = post(s, {{"messages", msgs}}, &st, "/apply-template");
  ASSERT_EQ(st, 200) << t.dump();
  EXPECT_NE(t["prompt"].get<std::string>().find(
                "<|im_start|>assistant\n<think>\nThe user greets me. <tool_call> is not a call "
                "here.\n</think>\n\nHello there!<|im_end|>"),
            std::string::npos)
      << t.dump();
  json bad = msgs;
  bad[1]["reasoning_content"] = 5;
  post(s, {{"messages", bad}}, &st, "/apply-template");
  EXPECT_EQ(st, 400);

  // Qwen3's own template keeps the thinking of the turns after the last user message.
  if (!have_corpus()) GTEST_SKIP() << "no template corpus";
  const tok::ChatTemplate q =
      tok::ChatTemplate::from_text(corpus_template("Qwen-Qwen3-0.6B"), "qwen3");
  const std::vector<tok::ChatMessage> turns = {
      {"user", "What time is it?", {}},
      {"assistant",
       "",
       {{"reasoning_content", "I need the clock."},
        {"tool_calls", json::parse(R"([{"type": "function", "function":
                          {"name": "get_time", "arguments": {}}}])")}}},
      {"tool", "12:00", {}}};
  const std::string prompt = q.render(turns, true);
  EXPECT_NE(prompt.find("<|im_start|>assistant\n<think>\nI need the clock.\n</think>\n\n"),
            std::string::npos)
      << prompt;
}

// The official openai npm client reads reasoning_content whole and streamed and sends it back
// (tests/server/openai_reasoning.cjs).
TEST(ServerReasoning, OpenAiNpmClientReadsReasoningContent) {
  std::string why;
  const std::string modules = openai_npm_modules(&why);
  if (modules.empty() && why.find("absent") != std::string::npos) GTEST_SKIP() << why;
  ASSERT_FALSE(modules.empty()) << why;
  TestServer s(scripted(byte_script(kThought)), {}, vocab_with(kThinkTemplate));
  const std::string cmd = "timeout 120 node '" + std::string(MINFER_SOURCE_DIR) +
                          "/tests/server/openai_reasoning.cjs' '" + modules +
                          "' http://127.0.0.1:" + std::to_string(s.port);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(ServerReasoning, ControlTokenMarkersAreKeptForTheSplitter) {
  // Ministral's [THINK] .. [/THINK], each one control token; Gemma 4's "<|channel>thought" ..
  // "<channel|>", a control token and text, then a control token.
  const struct {
    const char* tmpl;
    const char* open_token;
    const char* open_text;  // written after the open token
    const char* close_token;
  } cases[] = {
      {kMistralThinkTemplate, "[THINK]", "", "[/THINK]"},
      {"{% for m in messages %}{{ m.content }}{% endfor %}{# <|channel>thought <channel|> #}",
       "<|channel>", "thought\n", "<channel|>"},
  };
  for (const auto& c : cases) {
    tok::Vocab v = vocab_with(c.tmpl);
    for (const char* m : {c.open_token, c.close_token}) {  // appended: fake ids stay as they are
      v.tokens.push_back(m);
      v.types.push_back(tok::TokenType::Control);
      v.scores.push_back(0);
    }
    const int32_t open = int32_t(v.tokens.size()) - 2, close = open + 1;
    std::vector<int32_t> script = byte_script(std::string(c.open_text) + "Quick thought.", {open});
    script.push_back(close);
    script = byte_script("Answer.", script);
    TestServer s(scripted(script), {}, v);
    int st = 0;
    json r = post(s, chat_body(false), &st);
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Quick thought.") << c.open_token;
    EXPECT_EQ(r["choices"][0]["message"]["content"], "Answer.") << c.open_token;
    const Streamed t = post_stream(s, chat_body(true));
    EXPECT_EQ(t.reasoning, "Quick thought.") << c.open_token;
    EXPECT_EQ(t.content, "Answer.") << c.open_token;
    // reasoning_format none: the control tokens' text is dropped, as before.
    r = post(s, chat_body(false, {{"reasoning_format", "none"}}), &st);
    EXPECT_EQ(r["choices"][0]["message"]["content"],
              std::string(c.open_text) + "Quick thought.Answer.")
        << c.open_token;
  }
}

}  // namespace
}  // namespace minfer::testing
