// minfer-test-libs: minfer_server
// Tool calls end to end over HTTP: a FakeSeqEngine with a script makes the "model" write a
// given text (byte tokens, or a control token and bytes), and the server's chat answers are
// checked as an OpenAI client reads them: message.tool_calls, content null, finish_reason
// "tool_calls", the SSE deltas (index, id and name first, then argument fragments), malformed
// calls as content, tool_choice "none", parallel_tool_calls, and the calls sent back.
#include <gtest/gtest.h>

#include <regex>
#include <tuple>

#include "grammar/matcher.h"
#include "server/constrain.h"
#include "server_test_util.h"

namespace minfer::testing {
namespace {

// A Hermes-style template (Qwen2.5's syntax) with its tools section and tool-call turns.
constexpr const char* kHermesTemplate =
    "{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools>\nCall with <tool_call>{\"name\": <name>, \"arguments\": <args>}</tool_call>"
    "<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content %}{{ m.content }}"
    "{% endif %}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n{\"name\": \""
    "{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// Mistral Nemo's syntax: [TOOL_CALLS] is a control token of the vocabulary.
constexpr const char* kMistralTemplate =
    "{%- for m in messages %}{% if m.role == 'user' %}{% if tools %}[AVAILABLE_TOOLS]"
    "{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ m.content }}[/INST]"
    "{% elif m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}</s>"
    "{% else %}{{ m.content }}</s>{% endif %}{% endfor %}";

constexpr const char* kTwoCalls =
    "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
    "</tool_call>";

// The fake model writes `text` byte by byte (byte tokens <0xXX> are ids 3 + byte), then EOS.
std::vector<int32_t> byte_script(std::string_view text, std::vector<int32_t> prefix = {}) {
  for (unsigned char c : text) prefix.push_back(3 + int32_t(c));
  return prefix;
}

tok::Vocab vocab_with(const char* chat_template, bool tool_calls_token = false) {
  tok::Vocab v = fake_vocab();
  v.chat_template = chat_template;
  if (tool_calls_token) {  // appended: fake_vocab()'s ids stay as the engine expects
    v.tokens.push_back("[TOOL_CALLS]");
    v.types.push_back(tok::TokenType::Control);
    v.scores.push_back(0);
  }
  return v;
}

FakeParams scripted(std::vector<int32_t> script) {
  FakeParams fp;
  fp.script = std::move(script);
  return fp;
}

json tools_json() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])");
}

json chat_body(bool stream, json extra = json::object()) {
  json b = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
            {"tools", tools_json()},
            {"temperature", 0},
            {"stream", stream}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

json post(const TestServer& s, const json& body, int* status) {
  auto c = s.client();
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  *status = r ? r->status : -1;
  return r ? json::parse(r->body, nullptr, false) : json();
}

std::vector<json> post_stream(const TestServer& s, const json& body, bool* done) {
  auto c = s.client();
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200);
  return r ? sse_payloads(r->body, done) : std::vector<json>{};
}

bool is_call_id(const json& id) {
  return id.is_string() &&
         std::regex_match(id.get<std::string>(), std::regex("call_[A-Za-z0-9]{24}"));
}

TEST(ServerTools, WholeAnswerHasToolCallsAndContent) {
  const std::string text = kTwoCalls;
  TestServer s(scripted(byte_script(text)), {}, vocab_with(kHermesTemplate));
  int st = 0;
  const json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const json& calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u) << r.dump();
  ASSERT_TRUE(is_call_id(calls[0]["id"]) && is_call_id(calls[1]["id"])) << calls.dump();
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  const json want = {
      {"role", "assistant"},
      {"content", "I'll check."},
      {"tool_calls",
       {{{"id", calls[0]["id"]},
         {"type", "function"},
         {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}},
        {{"id", calls[1]["id"]},
         {"type", "function"},
         {"function", {{"name", "get_time"}, {"arguments", "{}"}}}}}}};
  EXPECT_EQ(choice["message"].dump(), want.dump());
  EXPECT_EQ(r["usage"]["completion_tokens"], int(text.size()));

  // Only calls: content is null.
  TestServer only(scripted(byte_script("<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                                       "{}}\n</tool_call>")),
                  {}, vocab_with(kHermesTemplate));
  const json o = post(only, chat_body(false), &st);
  ASSERT_EQ(st, 200);
  EXPECT_TRUE(o["choices"][0]["message"]["content"].is_null()) << o.dump();
  EXPECT_EQ(o["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time");
}

TEST(ServerTools, StreamSendsCallDeltasAsOpenAiDoes) {
  TestServer s(scripted(byte_script(kTwoCalls)), {}, vocab_with(kHermesTemplate));
  bool done = false;
  const std::vector<json> p = post_stream(s, chat_body(true), &done);
  ASSERT_TRUE(done);
  ASSERT_GE(p.size(), 4u);
  EXPECT_EQ(p.front()["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  // The last chunk: empty delta, finish_reason "tool_calls"; all others: finish_reason null.
  EXPECT_EQ(p.back()["choices"][0]["delta"].dump(), "{}");
  EXPECT_EQ(p.back()["choices"][0]["finish_reason"], "tool_calls");
  std::string content;
  std::vector<std::string> names, ids, args(2);
  int arg_chunks = 0;
  for (size_t i = 1; i + 1 < p.size(); ++i) {
    const json& ch = p[i];
    EXPECT_EQ(ch["object"], "chat.completion.chunk");
    EXPECT_EQ(ch["id"], p[0]["id"]);
    EXPECT_TRUE(ch["choices"][0]["finish_reason"].is_null());
    const json& d = ch["choices"][0]["delta"];
    ASSERT_EQ(d.size(), 1u) << d.dump();
    if (d.contains("content")) {
      EXPECT_TRUE(names.empty()) << "content after a call: " << d.dump();
      content += d["content"].get<std::string>();
      continue;
    }
    const json& tc = d.at("tool_calls");
    ASSERT_EQ(tc.size(), 1u);
    const size_t index = tc[0]["index"].get<size_t>();
    if (tc[0].contains("id")) {  // a call's first delta: index, id, type, name, arguments ""
      EXPECT_EQ(index, names.size());
      ASSERT_TRUE(is_call_id(tc[0]["id"])) << tc.dump();
      const json want = {{"index", index},
                         {"id", tc[0]["id"]},
                         {"type", "function"},
                         {"function", {{"name", tc[0]["function"]["name"]}, {"arguments", ""}}}};
      EXPECT_EQ(tc[0].dump(), want.dump());
      names.push_back(tc[0]["function"]["name"]);
      ids.push_back(tc[0]["id"]);
    } else {  // then the arguments in pieces: {"index", "function": {"arguments"}} only
      ASSERT_EQ(index + 1, names.size()) << "arguments before their call's start";
      EXPECT_EQ(tc[0].size(), 2u);
      EXPECT_EQ(tc[0]["function"].size(), 1u);
      args[index] += tc[0]["function"]["arguments"].get<std::string>();
      ++arg_chunks;
    }
  }
  EXPECT_EQ(content, "I'll check.");
  EXPECT_EQ(names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_EQ(args[0], "{\"city\": \"Paris\"}");
  EXPECT_EQ(args[1], "{}");
  // One byte per token: the arguments went out as they were generated, not at the end.
  EXPECT_GE(arg_chunks, 10);
}

TEST(ServerTools, TextWithoutCallsIsUnchanged) {
  const std::string text = "The weather in Paris is <b>fine</b> [TOOL] <tool_ no.\n";
  TestServer s(scripted(byte_script(text)), {}, vocab_with(kHermesTemplate));
  int st = 0;
  const json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["choices"][0]["message"].dump(),
            json({{"role", "assistant"}, {"content", text}}).dump());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  bool done = false;
  std::string streamed;
  for (const json& ch : post_stream(s, chat_body(true), &done)) {
    const json& d = ch["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("tool_calls"));
    if (d.contains("content")) streamed += d["content"].get<std::string>();
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(streamed, text);
}

TEST(ServerTools, MalformedOrCutCallsAreContentNever500) {
  const std::string bad =
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {oops}}\n</tool_call>";
  TestServer s(scripted(byte_script(bad)), {}, vocab_with(kHermesTemplate));
  int st = 0;
  // The request's own grammar (any text) replaces the lazy call grammar of "auto", which
  // would not let the model write this call (AutoToolChoiceConstrainsCallsLazily).
  json r = post(s, chat_body(false, {{"grammar", "root ::= .*"}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], bad);
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // max_tokens ends the answer inside a call: the text as content, finish_reason "length".
  TestServer cut(scripted(byte_script(kTwoCalls)), {}, vocab_with(kHermesTemplate));
  r = post(cut, chat_body(false, {{"max_tokens", 40}}), &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], std::string(kTwoCalls).substr(0, 40));
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  // Streamed, the cut call was announced already: it stays, the rest is content, "length".
  bool done = false;
  const std::vector<json> p = post_stream(cut, chat_body(true, {{"max_tokens", 40}}), &done);
  ASSERT_TRUE(done);
  EXPECT_EQ(p.back()["choices"][0]["finish_reason"], "length");
}

TEST(ServerTools, ToolChoiceNoneOrNoToolsLeaveTheText) {
  TestServer s(scripted(byte_script(kTwoCalls)), {}, vocab_with(kHermesTemplate));
  int st = 0;
  json r = post(s, chat_body(false, {{"tool_choice", "none"}}), &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], kTwoCalls);
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  json no_tools = chat_body(false);
  no_tools.erase("tools");
  r = post(s, no_tools, &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], kTwoCalls);
}

TEST(ServerTools, ParallelToolCallsFalseReturnsTheFirst) {
  TestServer s(scripted(byte_script(kTwoCalls)), {}, vocab_with(kHermesTemplate));
  int st = 0;
  const json r = post(s, chat_body(false, {{"parallel_tool_calls", false}}), &st);
  ASSERT_EQ(st, 200);
  const json& calls = r["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u) << r.dump();
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  bool done = false;
  int begins = 0;
  for (const json& ch : post_stream(s, chat_body(true, {{"parallel_tool_calls", false}}), &done))
    if (ch["choices"].size() == 1 && ch["choices"][0]["delta"].contains("tool_calls"))
      begins += ch["choices"][0]["delta"]["tool_calls"][0].contains("id") ? 1 : 0;
  EXPECT_EQ(begins, 1);
  post(s, chat_body(false, {{"parallel_tool_calls", "no"}}), &st);
  EXPECT_EQ(st, 400);
}

TEST(ServerTools, ReturnedCallsGoBackThroughTheTemplate) {
  TestServer s(scripted(byte_script(kTwoCalls)), {}, vocab_with(kHermesTemplate));
  int st = 0;
  const json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200);
  json msgs = chat_body(false)["messages"];
  msgs.push_back(r["choices"][0]["message"]);  // content, tool_calls with string arguments
  msgs.push_back({{"role", "tool"},
                  {"tool_call_id", r["choices"][0]["message"]["tool_calls"][0]["id"]},
                  {"content", "{\"temp\": 21}"}});
  auto c = s.client();
  auto t = c.Post("/apply-template", json({{"messages", msgs}, {"tools", tools_json()}}).dump(),
                  "application/json");
  ASSERT_TRUE(t && t->status == 200) << (t ? t->body : "no answer");
  const std::string prompt = json::parse(t->body)["prompt"];
  EXPECT_NE(prompt.find("<|im_start|>assistant\nI'll check.<tool_call>\n{\"name\": "
                        "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<|im_start|>tool\n{\"temp\": 21}<|im_end|>"), std::string::npos) << prompt;
  json again = chat_body(false);
  again["messages"] = msgs;
  post(s, again, &st);
  EXPECT_EQ(st, 200);
}

TEST(ServerTools, MistralCallsBehindAControlToken) {
  // [TOOL_CALLS] is a control token: generation drops control tokens' text, so the server
  // keeps the markers of the request's format (GenParams::keep_special) or no call is seen.
  tok::Vocab v = vocab_with(kMistralTemplate, /*tool_calls_token=*/true);
  const int32_t marker = int32_t(v.tokens.size()) - 1;
  const std::string json_calls =
      "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]";
  TestServer s(scripted(byte_script(json_calls, {marker})), {}, v);
  auto props = s.client().Get("/props");
  ASSERT_TRUE(props);
  EXPECT_EQ(json::parse(props->body)["tool_call_format"], "mistral");
  int st = 0;
  json r = post(s, chat_body(false), &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& calls = r["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u) << r.dump();
  EXPECT_TRUE(std::regex_match(calls[0]["id"].get<std::string>(), std::regex("[A-Za-z0-9]{9}")));
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  // Without tools the control token's text is dropped, as before.
  json no_tools = chat_body(false);
  no_tools.erase("tools");
  r = post(s, no_tools, &st);
  EXPECT_EQ(r["choices"][0]["message"]["content"], json_calls);
}

// The official openai npm client reads the calls, whole and streamed (its stream helper
// assembles the deltas), and sends them back (tests/server/openai_tools.cjs).
TEST(ServerTools, OpenAiNpmClientReadsTheCalls) {
  std::string why;
  const std::string modules = openai_npm_modules(&why);
  if (modules.empty() && why.find("absent") != std::string::npos) GTEST_SKIP() << why;
  ASSERT_FALSE(modules.empty()) << why;
  TestServer s(scripted(byte_script(kTwoCalls)), {}, vocab_with(kHermesTemplate));
  const std::string cmd = "timeout 120 node '" + std::string(MINFER_SOURCE_DIR) +
                          "/tests/server/openai_tools.cjs' '" + modules +
                          "' http://127.0.0.1:" + std::to_string(s.port);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// ---- tool_choice "required" / a named function: a grammar of the format's call syntax ----

// Tools whose parameters leave a model no free text (enum, integer, all required), so the
// fake engine's greedy answer ends, and one whose schema the converter refuses ("pattern").
// ordered_json: the server keeps the schema's property order, and so does the grammar.
nlohmann::ordered_json constrained_tools() {
  return nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}},
     "required": ["unit", "days"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
     "properties": {"zone": {"enum": ["utc", "local"]}}, "required": ["zone"]}}},
    {"type": "function", "function": {"name": "odd", "parameters": {"type": "object",
     "properties": {"s": {"type": "string", "pattern": "^a+$"}}}}}])");
}

bool gbnf_accepts(const std::string& gbnf, const std::string& text) {
  grammar::Matcher m(std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf)));
  return m.accept(text) && m.is_complete();
}

TEST(ServerToolGrammar, EachFormatAcceptsItsCallsOnly) {
  using server::ToolCallFormat;
  const auto tools = constrained_tools();
  const std::string w = R"({"name": "get_weather", "arguments": {"unit": "celsius", "days": 3}})";
  const std::string t = R"({"name": "get_time", "arguments": {"zone": "utc"}})";
  const std::string odd = R"({"name": "odd", "arguments": {"any": [1, "x"]}})";
  const std::string wrong_name = R"({"name": "get_wether", "arguments": {"zone": "utc"}})";
  const std::string bad_enum = R"({"name": "get_time", "arguments": {"zone": "mars"}})";
  const std::string bad_int = R"({"name": "get_weather", "arguments": {"unit": "celsius", )"
                              R"("days": 1.5}})";
  auto hermes = [](const std::string& c) { return "<tool_call>\n" + c + "\n</tool_call>"; };
  const std::string h = server::tool_call_gbnf(ToolCallFormat::Hermes, tools, "", true);
  EXPECT_TRUE(gbnf_accepts(h, hermes(w))) << h;
  EXPECT_TRUE(gbnf_accepts(h, hermes(t) + "\n" + hermes(w)));
  EXPECT_TRUE(gbnf_accepts(h, hermes(odd)));  // unsupported schema: any object
  EXPECT_FALSE(gbnf_accepts(h, hermes(wrong_name)));
  EXPECT_FALSE(gbnf_accepts(h, hermes(bad_enum)));
  EXPECT_FALSE(gbnf_accepts(h, hermes(bad_int)));
  EXPECT_FALSE(gbnf_accepts(h, "I'll check. " + hermes(w)));
  EXPECT_FALSE(gbnf_accepts(h, ""));
  const std::string one = server::tool_call_gbnf(ToolCallFormat::Hermes, tools, "get_time", false);
  EXPECT_TRUE(gbnf_accepts(one, hermes(t)));
  EXPECT_FALSE(gbnf_accepts(one, hermes(w)));              // not the named function
  EXPECT_FALSE(gbnf_accepts(one, hermes(t) + hermes(t)));  // parallel_tool_calls false

  auto params = [](std::string c) { return c.replace(c.find("arguments"), 9, "parameters"); };
  const std::string l = server::tool_call_gbnf(ToolCallFormat::Llama3, tools, "", true);
  EXPECT_TRUE(gbnf_accepts(l, params(w)));
  EXPECT_TRUE(gbnf_accepts(l, params(w) + "; " + params(t)));
  EXPECT_FALSE(gbnf_accepts(l, w));  // "arguments" is not Llama's key
  EXPECT_FALSE(gbnf_accepts(l, params(wrong_name)));

  const std::string m = server::tool_call_gbnf(ToolCallFormat::Mistral, tools, "", true);
  EXPECT_TRUE(gbnf_accepts(m, "[TOOL_CALLS][" + w + "]"));
  EXPECT_TRUE(gbnf_accepts(m, "[TOOL_CALLS][" + w + ", " + t + "]"));
  EXPECT_FALSE(gbnf_accepts(m, "[TOOL_CALLS][" + wrong_name + "]"));
  EXPECT_FALSE(gbnf_accepts(m, "[" + w + "]"));
}

json required_body(json choice, json extra = json::object()) {
  json b = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
            {"tools", json::parse(constrained_tools().dump())},
            {"tool_choice", std::move(choice)},
            {"temperature", 0},
            {"max_tokens", 300}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

// Format `f`'s grammars (required, and the lazy one-block grammar of "auto") accept `text`, a
// call as its template writes it, and refuse it with its tools' names changed; the lazy trigger
// opens it. Returns the calls the parser reads in it (content must be none).
std::vector<server::ToolCall> grammar_and_parser_read(server::ToolCallFormat f,
                                                      const nlohmann::ordered_json& tools,
                                                      const std::string& text) {
  for (bool one_block : {false, true}) {
    const std::string g = server::tool_call_gbnf(f, tools, "", true, one_block);
    EXPECT_TRUE(gbnf_accepts(g, text)) << g;
    std::string wrong = text;
    for (size_t at = wrong.find("get_"); at != std::string::npos; at = wrong.find("get_"))
      wrong.replace(at, 4, "got_");
    EXPECT_FALSE(gbnf_accepts(g, wrong));
  }
  EXPECT_FALSE(server::lazy_trigger(f).empty());
  EXPECT_EQ(text.rfind(server::lazy_trigger(f), 0), 0u);  // the trigger opens the block
  const server::ParsedToolCalls p = server::parse_tool_calls(f, text, true);
  EXPECT_EQ(p.content, "");
  return p.calls;
}

// The tagged formats' grammars accept the calls as their templates write them.
TEST(ServerToolGrammar, TaggedFormatsAcceptTheirCalls) {
  using server::ToolCallFormat;
  const auto tools = constrained_tools();
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::QwenXml,
       "<tool_call>\n<function=get_weather>\n<parameter=unit>\ncelsius\n</parameter>\n"
       "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"},
      {ToolCallFormat::Glm,
       "<tool_call>get_weather<arg_key>unit</arg_key><arg_value>celsius</arg_value>"
       "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"},
      {ToolCallFormat::DeepSeekDsml,
       "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_time\">\n<｜DSML｜parameter name=\"zone\" "
       "string=\"true\">utc</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"},
      {ToolCallFormat::Functionary, "<function=get_time>{\"zone\": \"utc\"}</function>"},
      {ToolCallFormat::DeepSeekR1,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
       "{\"zone\": \"local\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolCallFormat::KimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
       "<|tool_call_argument_begin|>"
       "{\"zone\": \"utc\"}<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolCallFormat::Solar,
       "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_time<|tool_call:args|>"
       "{\"zone\": \"utc\"}<|tool_call:end|><|calls|>"},
      {ToolCallFormat::KimiK3,
       "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument "
       "key=\"unit\" type=\"string\"<|sep|>celsius<|close|>argument<|sep|><|open|>argument "
       "key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>"
       "<|close|>tools<|sep|>"},
  };
  for (const auto& [f, text] : cases) {
    SCOPED_TRACE(text);
    EXPECT_EQ(grammar_and_parser_read(f, tools, text).size(), 1u);
  }
  // Kimi K3's "required" answer may first close the response message the prompt opened (or
  // write it empty); the type attribute follows the schema.
  const std::string k3 = server::tool_call_gbnf(ToolCallFormat::KimiK3, tools, "", true);
  const std::string call =
      "<|open|>tools<|sep|><|open|>call tool=\"get_time\" index=\"1\"<|sep|><|open|>argument "
      "key=\"zone\" type=\"string\"<|sep|>utc<|close|>argument<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|>";
  EXPECT_TRUE(gbnf_accepts(k3, "<|close|>response<|sep|>" + call)) << k3;
  EXPECT_TRUE(gbnf_accepts(k3, "<|open|>response<|sep|><|close|>response<|sep|>" + call));
  std::string typed = call;
  typed.replace(typed.find("string"), 6, "number");
  EXPECT_FALSE(gbnf_accepts(k3, typed));
  EXPECT_FALSE(gbnf_accepts(k3, "<|open|>response<|sep|>Hi<|close|>response<|sep|>" + call));
}

// XML parameter values by their schema: a string any text up to the closing tag ('<' too), a
// string enum its values, other types their JSON grammar; names the schema's.
TEST(ServerToolGrammar, XmlParameterValuesFollowTheSchema) {
  using server::ToolCallFormat;
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
     "properties": {"s": {"type": "string"}, "i": {"type": "integer"},
                    "e": {"enum": ["utc", "local"]}, "m": {"type": ["string", "integer"]},
                    "o": {"type": "object", "properties": {"a": {"type": "integer"}},
                          "required": ["a"]}}}}}])");
  auto qwen = [](const std::string& k, const std::string& v) {
    return "<tool_call>\n<function=f>\n<parameter=" + k + ">\n" + v +
           "\n</parameter>\n</function>\n</tool_call>";
  };
  auto glm = [](const std::string& k, const std::string& v) {
    return "<tool_call>f<arg_key>" + k + "</arg_key><arg_value>" + v + "</arg_value></tool_call>";
  };
  auto dsml = [](const std::string& k, const std::string& v, const std::string& str) {
    return "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"" + k +
           "\" string=\"" + str + "\">" + v + "</｜DSML｜parameter>\n</｜DSML｜invoke>\n" +
           "</｜DSML｜tool_calls>";
  };
  for (bool one_block : {false, true}) {
    const std::string q =
        server::tool_call_gbnf(ToolCallFormat::QwenXml, tools, "", true, one_block);
    const std::string g = server::tool_call_gbnf(ToolCallFormat::Glm, tools, "", true, one_block);
    const std::string d =
        server::tool_call_gbnf(ToolCallFormat::DeepSeekDsml, tools, "", true, one_block);
    for (const auto& [k, v, ok] : std::vector<std::tuple<std::string, std::string, bool>>{
             {"s", "a < b </p> \"3\"\nline", true},
             {"s", "x</parameter>y", false},
             {"i", "3", true},
             {"i", "-12", true},
             {"i", "three", false},
             {"i", "2.5", false},
             {"e", "utc", true},
             {"e", "mars", false},
             {"m", "anything <at> all", true},
             {"o", "{\"a\": 1}", true},
             {"o", "{\"a\": \"x\"}", false},
             {"zz", "1", false}}) {
      SCOPED_TRACE(k + " = " + v);
      EXPECT_EQ(gbnf_accepts(q, qwen(k, v)), ok) << q;
      if (v.find("</parameter>") == std::string::npos) {
        EXPECT_EQ(gbnf_accepts(g, glm(k, v)), ok);
        const std::string str = k == "s" || k == "e" ? "true" : "false";
        EXPECT_EQ(gbnf_accepts(d, dsml(k, v, str)), ok) << d;
      }
    }
    // DSML: a string is string="true", another type string="false"; either for a union.
    EXPECT_FALSE(gbnf_accepts(d, dsml("s", "x", "false")));
    EXPECT_FALSE(gbnf_accepts(d, dsml("i", "3", "true")));
    EXPECT_TRUE(gbnf_accepts(d, dsml("m", "3", "true")) &&
                gbnf_accepts(d, dsml("m", "3", "false")));
  }
}

// Qwen3.5's syntax (format qwen_xml), the tools section left out.
constexpr const char* kQwenXmlTemplate =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{# <tool_call><function=NAME><parameter=P>V</parameter></function></tool_call> #}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// The response reads XML parameters with the request's tools: the string "3" of a string
// parameter stays a string (without the schema it came back as the number 3), whole and
// streamed.
TEST(ServerTools, XmlParameterValuesTypedByTheToolSchema) {
  const std::string text =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n3\n</parameter>\n"
      "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
  TestServer s(scripted(byte_script(text)), {}, vocab_with(kQwenXmlTemplate));
  json tools = tools_json();
  tools[0]["function"]["parameters"]["properties"]["days"] = {{"type", "integer"}};
  int st = 0;
  const json r = post(s, chat_body(false, {{"tools", tools}, {"stop", "</tool_call>"}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"3\", \"days\": 2}");
  bool done = false;
  std::string args;
  for (const json& ch :
       post_stream(s, chat_body(true, {{"tools", tools}, {"stop", "</tool_call>"}}), &done))
    if (!ch["choices"].empty() && ch["choices"][0]["delta"].contains("tool_calls"))
      args += ch["choices"][0]["delta"]["tool_calls"][0]["function"].value("arguments", "");
  EXPECT_TRUE(done);
  EXPECT_EQ(args, "{\"city\": \"3\", \"days\": 2}");
}

// The formats of tool_call_formats_more.cpp likewise; their parameter values (MiniMax M3,
// Gemma 4, LFM2) are not typed by the schema, their keys are the schema's.
TEST(ServerToolGrammar, MoreFormatsAcceptTheirCalls) {
  using server::ToolCallFormat;
  const auto tools = constrained_tools();
  const std::string t = R"({"name": "get_time", "arguments": {"zone": "utc"}})";
  const std::string ns = "]<]minimax[>[";
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::Firefunction, "functools[" + t + "]"},
      {ToolCallFormat::Granite, "<|tool_call|>[" + t + "]"},
      {ToolCallFormat::CommandR,
       "Action:\n```json\n[\n    {\n        \"tool_name\": \"get_time\",\n        "
       "\"parameters\": {\"zone\": \"utc\"}\n    }\n]```"},
      {ToolCallFormat::CommandR7b,
       "<|START_ACTION|>[\n    {\"tool_name\": \"get_time\", \"parameters\": {\"zone\": "
       "\"utc\"}}\n]<|END_ACTION|>"},
      {ToolCallFormat::CommandR7b,
       "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_time\", "
       "\"parameters\": {\"zone\": \"utc\"}}\n]<|END_ACTION|>"},
      {ToolCallFormat::GigaChat, "function call<|role_sep|>\n" + t},
      {ToolCallFormat::GigaChat, "function call\n" + t},  // the control token left out
      {ToolCallFormat::MiniMaxXml, ns + "<tool_call>\n" + ns + "<invoke name=\"get_time\">" + ns +
                                       "<zone>utc" + ns + "</zone>" + ns + "</invoke>\n" + ns +
                                       "</tool_call>"},
      {ToolCallFormat::Gemma4, "<|tool_call>call:get_time{zone:<|\"|>utc<|\"|>}<tool_call|>"},
      {ToolCallFormat::Pythonic, "<|tool_call_start|>[get_time(zone='utc')]<|tool_call_end|>"},
      {ToolCallFormat::Atem,
       "to=get_time<|message|><atem:function_calls>\n<atem:invoke name=\"get_time\">\n"
       "<atem:parameter name=\"zone\">utc</atem:parameter>\n</atem:invoke>\n"
       "</atem:function_calls>"},
  };
  for (const auto& [f, text] : cases) {
    SCOPED_TRACE(text);
    const std::vector<server::ToolCall> calls = grammar_and_parser_read(f, tools, text);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].name, "get_time");
    EXPECT_EQ(json::parse(calls[0].arguments), json::parse(R"({"zone": "utc"})"));
  }
}

// The fake engine's greedy text is words (they outscore bytes): every byte of the call below
// came through the grammar's mask. Without the grammar the answer has no call at all.
TEST(ServerTools, RequiredToolChoiceConstrainsTheAnswerToACall) {
  TestServer s({}, {}, vocab_with(kHermesTemplate));
  int st = 0;
  for (const json& choice :
       {json("required"), json::parse(R"({"type": "function", "function": {"name": "get_time"}})"),
        json::parse(R"({"type": "function", "function": {"name": "get_weather"}})")}) {
    const json r = post(s, required_body(choice, {{"parallel_tool_calls", false}}), &st);
    ASSERT_EQ(st, 200) << r.dump();
    const json& c = r["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.dump();
    const json& fn = c["message"]["tool_calls"][0]["function"];
    if (choice.is_object()) {
      EXPECT_EQ(fn["name"], choice["function"]["name"]);
    }
    const json args = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
    if (fn["name"] == "get_weather") {
      EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
      EXPECT_TRUE(args["days"].is_number_integer()) << args;
    } else if (fn["name"] == "odd") {  // its schema is not supported: any object
      EXPECT_TRUE(args.is_object()) << args;
    } else {
      ASSERT_EQ(fn["name"], "get_time") << r.dump();
      EXPECT_TRUE(args["zone"] == "utc" || args["zone"] == "local") << args;
    }
  }
  // "auto" leaves the model free: the fake engine writes words, no call.
  const json a = post(s, required_body("auto"), &st);
  ASSERT_EQ(st, 200);
  EXPECT_FALSE(a["choices"][0]["message"].contains("tool_calls")) << a.dump();
}

// tool_choice "auto" (also when absent): the words before <tool_call> are the model's own; from
// the opener on, the call grammar masks what the script writes ({city: Paris} is no JSON, and
// "get_wether" no tool), so the answer carries a valid call instead of that text as content;
// without the lazy grammar the call is malformed and the whole text comes back as content.
TEST(ServerTools, AutoToolChoiceConstrainsCallsLazily) {
  const std::string text =
      "Let me see. <tool_call>\n{\"name\": \"get_wether\", \"arguments\": {city: Paris}}\n"
      "</tool_call>";
  TestServer s(scripted(byte_script(text)), {}, vocab_with(kHermesTemplate));
  for (const json& choice : {json("auto"), json()}) {
    int st = 0;
    // The fake model would start its script again after the call: the stop string ends it.
    json body = required_body(choice, {{"stop", "</tool_call>"}});
    if (choice.is_null()) body.erase("tool_choice");
    const json r = post(s, body, &st);
    ASSERT_EQ(st, 200) << r.dump();
    const json& c = r["choices"][0];
    EXPECT_EQ(c["message"]["content"], "Let me see.") << r.dump();
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.dump();
    const json& fn = c["message"]["tool_calls"][0]["function"];
    const json args = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(fn["name"] == "get_weather" || fn["name"] == "get_time" || fn["name"] == "odd")
        << r.dump();
    EXPECT_TRUE(args.is_object()) << r.dump();
    EXPECT_EQ(c["finish_reason"], "tool_calls");
  }
  // Text without the opener is untouched by it.
  TestServer plain(scripted(byte_script("No call <tool here.")), {}, vocab_with(kHermesTemplate));
  int st = 0;
  const json r = post(plain, required_body("auto"), &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "No call <tool here.") << r.dump();
}

TEST(ServerTools, ToolChoiceErrorsNameTheProblem) {
  TestServer s({}, {}, vocab_with(kHermesTemplate));
  int st = 0;
  json r = post(
      s, required_body(json::parse(R"({"type": "function", "function": {"name": "nope"}})")), &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(r.dump().find("\\\"nope\\\", which is not in 'tools'"), std::string::npos) << r.dump();
  r = post(s, required_body("required", {{"response_format", {{"type", "json_object"}}}}), &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(r.dump().find("send one"), std::string::npos) << r.dump();
  r = post(s, required_body("required", {{"grammar", "root ::= \"x\""}}), &st);
  EXPECT_EQ(st, 400);
  // Without tools a named function names nothing either; "none" / "auto" take a grammar.
  json no_tools = required_body(json::parse(R"({"type":"function","function":{"name":"x"}})"));
  no_tools.erase("tools");
  post(s, no_tools, &st);
  EXPECT_EQ(st, 400);
  post(s, required_body("auto", {{"grammar", "root ::= \"x\""}, {"max_tokens", 5}}), &st);
  EXPECT_EQ(st, 200);
}

// Mistral: the grammar spells [TOOL_CALLS] as text (the control token's piece is empty to the
// grammar, so masked), and the parser reads the text as it reads the control token's.
TEST(ServerTools, RequiredMistralCallIsSpelledAsText) {
  TestServer s({}, {}, vocab_with(kMistralTemplate, /*tool_calls_token=*/true));
  int st = 0;
  const json r = post(s, required_body("required", {{"parallel_tool_calls", false}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
}

// A template whose calls this server does not read (format none): "required" goes to the
// template only, and the answer is free text.
TEST(ServerTools, RequiredWithFormatNoneIsTemplateOnly) {
  TestServer s(scripted(byte_script("plain")));  // fake_vocab()'s template has no tools
  int st = 0;
  const json r = post(s, required_body("required"), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "plain");
}

}  // namespace
}  // namespace minfer::testing
