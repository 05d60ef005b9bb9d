// minfer-test-libs: minfer_server
// gpt-oss's harmony answers (server/harmony.h): the parser whole and in pieces of 1..13 bytes
// (analysis -> reasoning, final -> content, calls to functions.NAME in both header orders,
// several calls, cut, broken, plain text, the reasoning_format modes), detection from the
// corpus template, the calls and thinking the template renders read back; then over HTTP with
// the scripted fake engine: reasoning_content and tool_calls whole and streamed, control-token
// markers kept, reasoning_effort and history through the real template, /props.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "grammar/matcher.h"
#include "server/chat.h"
#include "server/constrain.h"
#include "server/harmony.h"
#include "server_test_util.h"
#include "tokenizer/chat_template.h"

namespace minfer::testing {
namespace {

namespace fs = std::filesystem;
using server::HarmonyDelta;
using server::HarmonyParser;
using server::HarmonyReasoning;
using server::ToolCall;

// What the deltas of a parse in pieces of `step` bytes (0: whole) describe.
struct Message {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  bool broken = false;
};

Message parse_in_pieces(std::string_view text, size_t step,
                        HarmonyReasoning mode = HarmonyReasoning::Split, bool tools = true,
                        bool parallel = true) {
  HarmonyParser p(mode, tools, parallel);
  Message m;
  auto take = [&](const std::vector<HarmonyDelta>& ds) {
    for (const HarmonyDelta& d : ds) {
      switch (d.kind) {
        case HarmonyDelta::Kind::Reasoning:
          m.reasoning += d.text;
          break;
        case HarmonyDelta::Kind::Content:
          m.content += d.text;
          break;
        case HarmonyDelta::Kind::Begin:
          EXPECT_EQ(d.index, m.calls.size());
          m.calls.push_back({d.id, d.text, {}});
          break;
        case HarmonyDelta::Kind::Arguments:
          EXPECT_LT(d.index, m.calls.size());
          if (d.index < m.calls.size()) m.calls[d.index].arguments += d.text;
          break;
      }
    }
  };
  const size_t n = step == 0 ? std::max<size_t>(text.size(), 1) : step;
  for (size_t i = 0; i < text.size(); i += n) take(p.push(text.substr(i, n)));
  take(p.finish());
  EXPECT_EQ(m.reasoning, p.reasoning());
  EXPECT_EQ(m.content, p.content());
  EXPECT_EQ(m.calls.size(), p.calls().size());
  m.broken = p.broken();
  return m;
}

using Calls = std::vector<std::pair<std::string, std::string>>;  // name, arguments

void expect_parse(const std::string& text, const std::string& reasoning, const std::string& content,
                  const Calls& calls = {}, HarmonyReasoning mode = HarmonyReasoning::Split,
                  bool parallel = true) {
  for (size_t step = 0; step <= 13; ++step) {
    SCOPED_TRACE("step " + std::to_string(step) + ": " + text);
    const Message m = parse_in_pieces(text, step, mode, true, parallel);
    EXPECT_EQ(m.reasoning, reasoning);
    EXPECT_EQ(m.content, content);
    EXPECT_FALSE(m.broken);
    ASSERT_EQ(m.calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(m.calls[i].name, calls[i].first);
      EXPECT_EQ(m.calls[i].arguments, calls[i].second);
      EXPECT_TRUE(m.calls[i].id.starts_with("call_")) << m.calls[i].id;
    }
  }
  const server::ParsedHarmony whole = server::parse_harmony(mode, true, parallel, text);
  EXPECT_EQ(whole.reasoning, reasoning);
  EXPECT_EQ(whole.content, content);
  EXPECT_EQ(whole.calls.size(), calls.size());
}

constexpr const char* kAnswer =
    "<|channel|>analysis<|message|>User says hi. Respond <b>briefly</b>.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?";

constexpr const char* kCall =
    "<|channel|>analysis<|message|>Need the weather for Paris.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    "<|message|>{\"city\": \"Paris <north>\", \"days\": 3}<|call|>";

TEST(Harmony, AnalysisIsReasoningFinalIsContent) {
  expect_parse(kAnswer, "User says hi. Respond <b>briefly</b>.", "Hello! How can I help?");
  // The final message's end marker, when generation keeps it, and whitespace between messages.
  expect_parse(std::string(kAnswer) + "<|return|>", "User says hi. Respond <b>briefly</b>.",
               "Hello! How can I help?");
  expect_parse(
      "<|channel|>analysis<|message|>a<|end|>\n<|start|>assistant<|channel|>final"
      "<|message|>b<|end|>",
      "a", "b");
  // No thinking: the final channel at once; a model that drops <|end|><|start|>assistant.
  expect_parse("<|channel|>final<|message|>Just this.", "", "Just this.");
  expect_parse("<|channel|>analysis<|message|>t<|channel|>final<|message|>c", "t", "c");
  // A preamble in commentary is content; two analysis messages add up.
  expect_parse(
      "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>analysis"
      "<|message|>y<|end|><|start|>assistant<|channel|>commentary<|message|>Checking."
      "<|end|><|start|>assistant<|channel|>final<|message|>Done.",
      "xy", "Checking.Done.");
}

TEST(Harmony, CallsInBothHeaderOrders) {
  const Calls want = {{"get_weather", "{\"city\": \"Paris <north>\", \"days\": 3}"}};
  expect_parse(kCall, "Need the weather for Paris.", "", want);
  // As the template writes calls back: the recipient first, the content type as " json".
  expect_parse(
      " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": "
      "\"Paris <north>\", \"days\": 3}<|call|>",
      "", "", want);
  // Several calls (parallel), and only the first when parallel_tool_calls is false.
  const std::string two = std::string(kCall) +
                          "<|start|>assistant<|channel|>commentary to=functions.now <|constrain|>"
                          "json<|message|>{}<|call|>";
  expect_parse(two, "Need the weather for Paris.", "", {want[0], {"now", "{}"}});
  expect_parse(two, "Need the weather for Paris.", "", want, HarmonyReasoning::Split, false);
  // <|constrain|> without a content type, as a constrained model may write it.
  expect_parse("<|channel|>commentary to=functions.now<|constrain|><|message|>{}<|call|>", "", "",
               {{"now", "{}"}});
  // An argument string holding an end marker's text is the JSON's, not the end.
  expect_parse(
      "<|channel|>commentary to=functions.say <|constrain|>json<|message|>{\"t\": "
      "\"<|end|>\"}<|call|>",
      "", "", {{"say", "{\"t\": \"<|end|>\"}"}});
}

TEST(Harmony, CutBrokenAndPlainText) {
  // max_tokens inside the analysis: what was thought; inside a header: nothing more.
  expect_parse("<|channel|>analysis<|message|>Still thinking <|en", "Still thinking <|en", "");
  expect_parse("<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|chan", "Done.", "");
  // Text that is no harmony is content byte for byte.
  for (const std::string& text :
       {std::string("Plain answer."), std::string("<b>x</b>"), std::string(" to be or not"),
        std::string(""), std::string("<|channel|> oops")}) {
    expect_parse(text, "", text);
  }
  // A call whose arguments are not an object is content from its header on.
  const std::string no_args =
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>not json<|call|>";
  expect_parse(no_args, "", no_args);
  // An announced call that breaks off: broken, its message is content.
  const std::string cut =
      "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1";
  for (size_t step : {size_t{0}, size_t{1}, size_t{5}}) {
    const Message m = parse_in_pieces(cut, step);
    EXPECT_TRUE(m.broken);
    EXPECT_EQ(m.reasoning, "x");
    EXPECT_EQ(m.content,
              "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
              "<|message|>{\"a\": 1");
  }
  const server::ParsedHarmony whole =
      server::parse_harmony(HarmonyReasoning::Split, true, true, cut);
  EXPECT_TRUE(whole.calls.empty());
  // Without tools a call's message stays content, as generated.
  const Message m = parse_in_pieces(kCall, 3, HarmonyReasoning::Split, false);
  EXPECT_TRUE(m.calls.empty());
  EXPECT_EQ(m.reasoning, "Need the weather for Paris.");
  EXPECT_EQ(m.content, std::string(kCall).substr(std::string(kCall).find("<|start|>")));
}

TEST(Harmony, PartialMarkersAreHeldBack) {
  HarmonyParser p(HarmonyReasoning::Split, true, true);
  EXPECT_TRUE(p.push("<|channel|>analy").empty());  // a header: nothing until <|message|>
  std::vector<HarmonyDelta> d = p.push("sis<|message|>Hmm <|e");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, HarmonyDelta::Kind::Reasoning);
  EXPECT_EQ(d[0].text, "Hmm ");
  EXPECT_TRUE(p.push("nd|><|start|>assistant<|channel|>final<|message").empty());
  d = p.push("|>Hi");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, HarmonyDelta::Kind::Content);
  EXPECT_EQ(d[0].text, "Hi");
  // A call is announced once its body starts as an object; its arguments stream.
  HarmonyParser c(HarmonyReasoning::Split, true, true);
  EXPECT_TRUE(c.push("<|channel|>commentary to=functions.f <|constrain|>json<|message|> ").empty());
  d = c.push("{\"a\": [1, ");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].kind, HarmonyDelta::Kind::Begin);
  EXPECT_EQ(d[0].text, "f");
  EXPECT_EQ(d[1].kind, HarmonyDelta::Kind::Arguments);
  EXPECT_EQ(d[1].text, "{\"a\": [1, ");
  d = c.push("2]}<|call|>");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "2]}");
}

TEST(Harmony, ReasoningFormatModes) {
  // none: the text as generated (calls still taken out); deepseek-legacy: and the reasoning.
  expect_parse(kAnswer, "", kAnswer, {}, HarmonyReasoning::Inline);
  expect_parse(kAnswer, "User says hi. Respond <b>briefly</b>.", kAnswer, {},
               HarmonyReasoning::Both);
  expect_parse(kCall, "", "<|channel|>analysis<|message|>Need the weather for Paris.<|end|>",
               {{"get_weather", "{\"city\": \"Paris <north>\", \"days\": 3}"}},
               HarmonyReasoning::Inline);
}

// ---- the corpus template ----

std::string corpus_template(const std::string& name) {
  std::ifstream f(fs::path(MINFER_SHARED_DIR) / "chat-templates" / "templates" / (name + ".jinja"));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

constexpr const char* kGptOss = "openai-gpt-oss-120b";

TEST(Harmony, DetectedFromTheGptOssTemplateOnly) {
  const std::string t = corpus_template(kGptOss);
  if (t.empty()) GTEST_SKIP() << "no template corpus";
  EXPECT_EQ(server::detect_reasoning_syntax(t).name, "harmony");
  EXPECT_EQ(server::detect_tool_call_format(t), server::ToolCallFormat::Harmony);
  EXPECT_STREQ(server::tool_call_format_name(server::ToolCallFormat::Harmony), "harmony");
  const fs::path dir = fs::path(MINFER_SHARED_DIR) / "chat-templates" / "templates";
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().stem() == kGptOss) continue;
    std::ifstream in(e.path());
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    EXPECT_NE(server::detect_reasoning_syntax(text).name, "harmony") << e.path();
    EXPECT_NE(server::detect_tool_call_format(text), server::ToolCallFormat::Harmony) << e.path();
  }
}

// ---- grammars: tool_choice "required" / named, and the lazy "auto" from to=functions. ----

bool gbnf_accepts(const std::string& gbnf, const std::string& text) {
  grammar::Matcher m(std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf)));
  return m.accept(text) && m.is_complete();
}

const nlohmann::ordered_json kGrammarTools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
     "parameters": {"type": "object",
     "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["unit"]}}},
    {"type": "function", "function": {"name": "now", "description": "Time"}}])");

TEST(HarmonyGrammar, RequiredAndLazyAcceptTheCallsOnly) {
  using server::ToolCallFormat;
  const std::string req = server::tool_call_gbnf(ToolCallFormat::Harmony, kGrammarTools, "", true);
  const std::string w = "get_weather <|constrain|>json<|message|>{\"unit\": \"celsius\"}";
  EXPECT_TRUE(gbnf_accepts(req, "<|channel|>commentary to=functions." + w)) << req;
  EXPECT_TRUE(gbnf_accepts(req,
                           "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant"
                           "<|channel|>commentary to=functions." +
                               w));
  EXPECT_TRUE(gbnf_accepts(req,
                           " to=functions.get_weather<|channel|>commentary json<|message|>"
                           "{\"unit\": \"fahrenheit\"}"));
  EXPECT_TRUE(
      gbnf_accepts(req, " to=functions.now<|channel|>commentary json<|message|>{\"a\": 1}"));
  EXPECT_FALSE(gbnf_accepts(req, "<|channel|>commentary to=functions.get_wether" + w.substr(11)));
  EXPECT_FALSE(gbnf_accepts(req,
                            " to=functions.get_weather<|channel|>commentary json<|message|>"
                            "{\"unit\": \"kelvin\"}"));
  EXPECT_FALSE(gbnf_accepts(req, "<|channel|>final<|message|>No call."));
  const std::string named =
      server::tool_call_gbnf(ToolCallFormat::Harmony, kGrammarTools, "now", false);
  EXPECT_FALSE(gbnf_accepts(named, "<|channel|>commentary to=functions." + w));
  const std::string lazy =
      server::tool_call_gbnf(ToolCallFormat::Harmony, kGrammarTools, "", true, true);
  EXPECT_EQ(server::lazy_trigger(ToolCallFormat::Harmony), "to=functions.");
  EXPECT_TRUE(gbnf_accepts(lazy, "to=functions." + w));
  EXPECT_TRUE(gbnf_accepts(lazy, "to=functions.now<|channel|>commentary json<|message|>{}"));
  EXPECT_FALSE(
      gbnf_accepts(lazy, "to=functions.get_wether<|channel|>commentary json<|message|>{}"));
}

// ---- over HTTP, with the scripted fake engine and the real template ----

std::vector<int32_t> byte_script(std::string_view text, std::vector<int32_t> prefix = {}) {
  for (unsigned char c : text) prefix.push_back(3 + int32_t(c));
  return prefix;
}

FakeParams scripted(std::vector<int32_t> script) {
  FakeParams fp;
  fp.script = std::move(script);
  return fp;
}

tok::Vocab gpt_oss_vocab() {
  tok::Vocab v = fake_vocab();
  v.chat_template = corpus_template(kGptOss);
  return v;
}

json chat_body(bool stream, json extra = json::object()) {
  json b = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
            {"temperature", 0},
            {"stream", stream}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

json post(const TestServer& s, const json& body, int* status,
          const char* route = "/v1/chat/completions") {
  auto r = s.client().Post(route, body.dump(), "application/json");
  *status = r ? r->status : -1;
  return r ? json::parse(r->body, nullptr, false) : json();
}

struct Streamed {
  std::string reasoning, content;
  json calls = json::array();  // assembled as a client does
  bool reasoning_after_content = false;
  std::string finish_reason;
};

Streamed post_stream(const TestServer& s, const json& body) {
  auto r = s.client().Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200);
  Streamed out;
  if (!r) return out;
  bool done = false;
  for (const json& ch : sse_payloads(r->body, &done)) {
    if (ch["choices"].empty()) continue;
    const json& c = ch["choices"][0];
    if (c["finish_reason"].is_string()) out.finish_reason = c["finish_reason"];
    const json& d = c["delta"];
    if (d.contains("reasoning_content")) {
      out.reasoning += d["reasoning_content"].get<std::string>();
      out.reasoning_after_content |= !out.content.empty();
    }
    if (d.contains("content") && d["content"].is_string())
      out.content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      const json& tc = d["tool_calls"][0];
      const size_t i = tc["index"];
      if (tc.contains("id")) {
        EXPECT_EQ(i, out.calls.size());
        out.calls.push_back({{"name", tc["function"]["name"]}, {"arguments", ""}});
      }
      if (i < out.calls.size())
        out.calls[i]["arguments"] = out.calls[i]["arguments"].get<std::string>() +
                                    tc["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_TRUE(done);
  return out;
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather", "parameters": {"type": "object", "properties":
    {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");

TEST(ServerHarmony, ReasoningAndContentWholeAndStreamed) {
  if (corpus_template(kGptOss).empty()) GTEST_SKIP() << "no template corpus";
  TestServer s(scripted(byte_script(kAnswer)), {}, gpt_oss_vocab());
  int st = 0;
  const json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json want = {{"role", "assistant"},
                     {"content", "Hello! How can I help?"},
                     {"reasoning_content", "User says hi. Respond <b>briefly</b>."}};
  EXPECT_EQ(r["choices"][0]["message"].dump(), want.dump());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const Streamed t = post_stream(s, chat_body(true));
  EXPECT_EQ(t.reasoning, "User says hi. Respond <b>briefly</b>.");
  EXPECT_EQ(t.content, "Hello! How can I help?");
  EXPECT_FALSE(t.reasoning_after_content);
  EXPECT_EQ(t.finish_reason, "stop");
  // Cut inside the analysis: what was thought.
  const json c = post(s, chat_body(false, {{"max_tokens", 54}}), &st);
  EXPECT_EQ(c["choices"][0]["message"]["reasoning_content"], "User says hi. Respond <b");
  EXPECT_EQ(c["choices"][0]["message"]["content"], "");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  // reasoning_format none: the text; deepseek-legacy: the text and the reasoning.
  json n = post(s, chat_body(false, {{"reasoning_format", "none"}}), &st);
  EXPECT_EQ(n["choices"][0]["message"]["content"], kAnswer);
  EXPECT_FALSE(n["choices"][0]["message"].contains("reasoning_content"));
  n = post(s, chat_body(false, {{"reasoning_format", "deepseek-legacy"}}), &st);
  EXPECT_EQ(n["choices"][0]["message"]["content"], kAnswer);
  EXPECT_EQ(n["choices"][0]["message"]["reasoning_content"],
            "User says hi. Respond <b>briefly</b>.");
  auto props = s.client().Get("/props");
  ASSERT_TRUE(props);
  EXPECT_EQ(json::parse(props->body)["reasoning_syntax"], "harmony");
  EXPECT_EQ(json::parse(props->body)["tool_call_format"], "harmony");
}

TEST(ServerHarmony, ToolCallsWholeAndStreamed) {
  if (corpus_template(kGptOss).empty()) GTEST_SKIP() << "no template corpus";
  TestServer s(scripted(byte_script(kCall)), {}, gpt_oss_vocab());
  int st = 0;
  const json r = post(s, chat_body(false, {{"tools", kTools}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& m = r["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null()) << m.dump();
  EXPECT_EQ(m["reasoning_content"], "Need the weather for Paris.");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << m.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"Paris <north>\", \"days\": 3}");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  const Streamed t = post_stream(s, chat_body(true, {{"tools", kTools}}));
  EXPECT_EQ(t.reasoning, "Need the weather for Paris.");
  EXPECT_EQ(t.content, "");
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0]["name"], "get_weather");
  EXPECT_EQ(t.calls[0]["arguments"], "{\"city\": \"Paris <north>\", \"days\": 3}");
  EXPECT_EQ(t.finish_reason, "tool_calls");
  // tool_choice none: no call is read; the call's message is content.
  const json n = post(s, chat_body(false, {{"tools", kTools}, {"tool_choice", "none"}}), &st);
  EXPECT_FALSE(n["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(n["choices"][0]["finish_reason"], "stop");
}

// "auto": from the recipient on, the lazy grammar masks what the script writes (an unknown
// tool, arguments that are no JSON), so a valid call comes back instead of content; "required":
// the answer is a call.
TEST(ServerHarmony, ToolChoiceGrammars) {
  if (corpus_template(kGptOss).empty()) GTEST_SKIP() << "no template corpus";
  const std::string text =
      "<|channel|>analysis<|message|>Call it.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_wether <|constrain|>json<|message|>{unit: kelvin}";
  TestServer s(scripted(byte_script(text)), {}, gpt_oss_vocab());
  json body = chat_body(false, {{"tools", json::parse(kGrammarTools.dump())}, {"max_tokens", 200}});
  int st = 0;
  const json r = post(s, body, &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Call it.") << r.dump();
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.dump();
  const std::string name = m["tool_calls"][0]["function"]["name"];
  EXPECT_TRUE(name == "get_weather" || name == "now") << r.dump();
  EXPECT_TRUE(
      json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()).is_object());
  // Named: that call, whatever the script says.
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const json n = post(s, body, &st);
  ASSERT_EQ(st, 200) << n.dump();
  ASSERT_EQ(n["choices"][0]["message"]["tool_calls"].size(), 1u) << n.dump();
  EXPECT_EQ(n["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  const json args = json::parse(
      n["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << n.dump();
}

// The answer's markers are control tokens in gpt-oss's vocabulary: kept for the parser.
TEST(ServerHarmony, ControlTokenMarkersAreKept) {
  if (corpus_template(kGptOss).empty()) GTEST_SKIP() << "no template corpus";
  tok::Vocab v = gpt_oss_vocab();
  const std::vector<std::string_view> markers = server::harmony_markers();
  const int32_t first = int32_t(v.tokens.size());
  for (std::string_view m : markers) {
    v.tokens.emplace_back(m);
    v.types.push_back(tok::TokenType::Control);
    v.scores.push_back(0);
  }
  auto id = [&](std::string_view m) {
    return first + int32_t(std::find(markers.begin(), markers.end(), m) - markers.begin());
  };
  std::vector<int32_t> script = {id("<|channel|>")};
  script = byte_script("analysis", script);
  script.push_back(id("<|message|>"));
  script = byte_script("Think.", script);
  script.push_back(id("<|end|>"));
  script.push_back(id("<|start|>"));
  script = byte_script("assistant", script);
  script.push_back(id("<|channel|>"));
  script = byte_script("final", script);
  script.push_back(id("<|message|>"));
  script = byte_script("Answer.", script);
  TestServer s(scripted(script), {}, v);
  int st = 0;
  const json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Think.");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Answer.");
}

TEST(ServerHarmony, ReasoningEffortAndHistoryReachTheTemplate) {
  if (corpus_template(kGptOss).empty()) GTEST_SKIP() << "no template corpus";
  TestServer s(scripted(byte_script(kCall)), {}, gpt_oss_vocab());
  int st = 0;
  auto prompt_of = [&](const json& body) {
    const json r = post(s, body, &st, "/apply-template");
    EXPECT_EQ(st, 200) << r.dump();
    return r.value("prompt", std::string());
  };
  EXPECT_NE(prompt_of(chat_body(false)).find("Reasoning: medium"), std::string::npos);
  EXPECT_NE(prompt_of(chat_body(false, {{"reasoning_effort", "high"}})).find("Reasoning: high"),
            std::string::npos);
  // chat_template_kwargs' key wins over the field.
  EXPECT_NE(prompt_of(chat_body(false, {{"reasoning_effort", "high"},
                                        {"chat_template_kwargs", {{"reasoning_effort", "low"}}}}))
                .find("Reasoning: low"),
            std::string::npos);
  post(s, chat_body(false, {{"reasoning_effort", 3}}), &st);
  EXPECT_EQ(st, 400);

  // The answer as returned goes back as history: the template writes the thinking and the
  // call, and what it writes reads back as the same message.
  const json r = post(s, chat_body(false, {{"tools", kTools}}), &st);
  ASSERT_EQ(st, 200);
  json msgs = chat_body(false)["messages"];
  msgs.push_back(r["choices"][0]["message"]);
  msgs.push_back({{"role", "tool"},
                  {"tool_call_id", r["choices"][0]["message"]["tool_calls"][0]["id"]},
                  {"content", "Sunny"}});
  const std::string p = prompt_of({{"messages", msgs}, {"tools", kTools}});
  const std::string user_end = "<|start|>user<|message|>Hi<|end|>";
  const size_t at = p.find(user_end);
  ASSERT_NE(at, std::string::npos) << p;
  const size_t tool_at = p.find("<|start|>functions.get_weather");
  ASSERT_NE(tool_at, std::string::npos) << p;
  // Past the user turn and the assistant's own "<|start|>assistant", which the prompt writes.
  std::string turn = p.substr(at + user_end.size(), tool_at - at - user_end.size());
  ASSERT_TRUE(turn.starts_with("<|start|>assistant")) << turn;
  turn.erase(0, std::string_view("<|start|>assistant").size());
  const server::ParsedHarmony back =
      server::parse_harmony(HarmonyReasoning::Split, true, true, turn);
  EXPECT_EQ(back.reasoning, "Need the weather for Paris.") << turn;
  EXPECT_EQ(back.content, "");
  ASSERT_EQ(back.calls.size(), 1u) << turn;
  EXPECT_EQ(back.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(back.calls[0].arguments),
            json::parse("{\"city\": \"Paris <north>\", \"days\": 3}"));
}

// reasoning_format none keeps the text as generated: markup cut at the end of the answer too
// (it was dropped when it arrived in its own piece; fuzz_harmony found it).
TEST(Harmony, InlineKeepsMarkupCutAtTheEnd) {
  const std::string text = "to=f<|message|>{}c><|start|>ass";
  for (size_t step : {size_t{1}, size_t{7}, size_t{32}, text.size()}) {
    const Message m = parse_in_pieces(text, step, HarmonyReasoning::Inline, false);
    EXPECT_EQ(m.content, text) << step;
    EXPECT_EQ(m.reasoning, "") << step;
  }
}

}  // namespace
}  // namespace minfer::testing
