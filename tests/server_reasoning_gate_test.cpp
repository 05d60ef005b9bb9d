// minfer-test-libs: minfer_server
// Grammars after the thinking (server/constrain.h gate_grammar_on_thinking, Slot's thinking
// gate): the lazy tool grammar armed in the answer only, strict grammars (tool_choice
// "required", json_schema, response_format) free during the thinking and from the close marker
// on, the end of generation masked while they wait, and the cases that keep the grammar from the
// first token; over HTTP with the scripted fake engine through the real sampler mask.
#include <gtest/gtest.h>

#include "server_reasoning_test_util.h"
#include "server_test_util.h"

namespace minfer::testing {
namespace {

// DeepSeek R1's shape with Hermes tool calls: the generation prompt opens the thinking.
constexpr const char* kOpenToolsTemplate =
    "{%- if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\nCall with "
    "<tool_call>{\"name\": <name>, \"arguments\": <args>}</tool_call>{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}";

// Enums and an integer: a constrained answer that ends (the fake engine's own words are
// never allowed inside it).
json gate_tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
     "properties": {"zone": {"enum": ["utc", "local"]}}, "required": ["zone"]}}},
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"days": {"type": "integer"}}, "required": ["days"]}}}])");
}

constexpr const char* kTimeCall =
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"utc\"}}\n</tool_call>";

json gate_body(json extra) {
  json b = chat_body(false, {{"tools", gate_tools()}, {"max_tokens", 200}});
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

// tool_choice "auto": an opener inside the thinking is thinking (the call grammar would have
// masked the rest of it: "{not json" is no call); the opener after it starts the grammar,
// which masks the malformed call the script writes ("get_wether" is no tool).
TEST(ServerReasoning, LazyToolGrammarIsArmedAfterTheThinkingOnly) {
  const std::string thinking = "I could write <tool_call>{not json} here, but no.";
  TestServer s(scripted(byte_script("<think>\n" + thinking + "\n</think>\n\nIt is sunny.")), {},
               vocab_with(kThinkTemplate));
  int st = 0;
  json r = post(s, gate_body({}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(
      r["choices"][0]["message"].dump(),
      json({{"role", "assistant"}, {"content", "It is sunny."}, {"reasoning_content", thinking}})
          .dump());
  // The prompt opened the thinking (R1's shape): the same, from the first token.
  TestServer open(scripted(byte_script(thinking + "\n</think>\n\nIt is sunny.")), {},
                  vocab_with(kOpenToolsTemplate));
  r = post(open, gate_body({}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], thinking) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "It is sunny.") << r.dump();

  const std::string bad =
      "<think>\nCall it.\n</think>\n\n<tool_call>\n{\"name\": \"get_wether\", \"arguments\": "
      "{days: 2}}\n</tool_call>";
  TestServer after(scripted(byte_script(bad)), {}, vocab_with(kThinkTemplate));
  r = post(after, gate_body({{"stop", "</tool_call>"}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Call it.") << r.dump();
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.dump();
  const std::string name = m["tool_calls"][0]["function"]["name"];
  EXPECT_TRUE(name == "get_time" || name == "get_weather") << r.dump();
}

// tool_choice "required" and json_schema on a thinking model: the thinking first, free (the
// grammar alone allows neither "<think>" nor the words), then the grammar from the close
// marker on, whitespace after it allowed. Without a thinking the grammar holds from the start.
TEST(ServerReasoning, StrictGrammarsFollowTheThinking) {
  const std::string thinking = "The user wants <tool_call> the time.";
  struct Case {
    const char* tmpl;
    std::string text;
  } cases[] = {
      {kThinkTemplate, "<think>\n" + thinking + "\n</think>\n\n" + kTimeCall},
      {kOpenToolsTemplate, thinking + "\n</think>\n\n" + kTimeCall},
  };
  for (const Case& c : cases) {
    TestServer s(scripted(byte_script(c.text)), {}, vocab_with(c.tmpl));
    for (bool stream : {false, true}) {
      SCOPED_TRACE(c.text + (stream ? " streamed" : ""));
      int st = 0;
      const json body = gate_body(
          {{"tool_choice", "required"}, {"parallel_tool_calls", false}, {"stream", stream}});
      if (stream) {
        const Streamed t = post_stream(s, body);
        EXPECT_EQ(t.reasoning, thinking);
        EXPECT_EQ(t.content, "");
        EXPECT_EQ(t.last["choices"][0]["finish_reason"], "tool_calls");
        continue;
      }
      const json r = post(s, body, &st);
      ASSERT_EQ(st, 200) << r.dump();
      const json& m = r["choices"][0]["message"];
      EXPECT_EQ(m["reasoning_content"], thinking) << r.dump();
      ASSERT_EQ(m["tool_calls"].size(), 1u) << r.dump();
      EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"zone\": \"utc\"}");
      EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
    }
  }
  // A model that answers at once: the start grammar read the call from its first token.
  TestServer direct(scripted(byte_script(std::string("\n") + kTimeCall)), {},
                    vocab_with(kThinkTemplate));
  int st = 0;
  json r =
      post(direct, gate_body({{"tool_choice", "required"}, {"parallel_tool_calls", false}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content")) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  // A token that holds the open marker and more ("<think>\n", a vocabulary's merge).
  tok::Vocab merged = vocab_with(kThinkTemplate);
  merged.tokens.push_back("<think>\n");
  merged.types.push_back(tok::TokenType::UserDefined);
  merged.scores.push_back(0);
  const int32_t think_nl = int32_t(merged.tokens.size()) - 1;
  TestServer m(scripted(byte_script(std::string("Hm.\n</think>\n\n") + kTimeCall, {think_nl})), {},
               merged);
  r = post(m, gate_body({{"tool_choice", "required"}, {"parallel_tool_calls", false}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Hm.") << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  // The model's own words after the close marker are masked: the grammar's answer comes.
  TestServer words(scripted(byte_script("<think>\nHm.\n</think>\n\nSure, the time")), {},
                   vocab_with(kThinkTemplate));
  r = post(words, gate_body({{"tool_choice", "required"}, {"parallel_tool_calls", false}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Hm.") << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();

  // json_schema (and response_format) the same way.
  const json schema = json::parse(
      R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  TestServer js(scripted(byte_script("<think>\nFour.\n</think>\n\n{\"n\": 4}")), {},
                vocab_with(kThinkTemplate));
  for (const json& extra :
       {json{{"json_schema", schema}},
        json{{"response_format",
              {{"type", "json_schema"}, {"json_schema", {{"schema", schema}}}}}}}) {
    r = post(js, chat_body(false, extra), &st);
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_EQ(
        r["choices"][0]["message"].dump(),
        json({{"role", "assistant"}, {"content", "{\"n\": 4}"}, {"reasoning_content", "Four."}})
            .dump());
  }
}

// Qwen3.5's own template (it opens the thinking; calls in qwen_xml): a forced call after the
// thinking, its string parameter "3" a string by the tool's schema, its integer an integer.
TEST(ServerReasoning, Qwen35ForcedXmlCallAfterTheThinking) {
  if (!have_corpus()) GTEST_SKIP() << "no template corpus";
  const std::string tmpl = corpus_template("Qwen3.5-4B");
  const std::string text =
      "Need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n3"
      "\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
  FakeParams fp = scripted(byte_script(text));
  fp.n_ctx_seq = 4096;  // the template's tools section, in byte tokens
  fp.n_ctx = 8192;
  TestServer s(fp, {}, vocab_with(tmpl.c_str()));
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
    "days": {"type": "integer"}}, "required": ["city", "days"]}}}])");
  int st = 0;
  const json r = post(s,
                      chat_body(false, {{"tools", tools},
                                        {"tool_choice", "required"},
                                        {"parallel_tool_calls", false},
                                        {"max_tokens", 300}}),
                      &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Need the weather.") << r.dump();
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\": \"3\", \"days\": 2}");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

// While a strict grammar waits, the end of generation is masked: the answer it requires must
// come (here max_tokens ends the free words the fake model writes instead).
TEST(ServerReasoning, StrictGrammarAnswerMustFollowTheThinking) {
  TestServer s(scripted(byte_script("<think>\nNo.")), {}, vocab_with(kThinkTemplate));
  int st = 0;
  const json r = post(s, gate_body({{"tool_choice", "required"}, {"max_tokens", 20}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 20);
  EXPECT_TRUE(r["choices"][0]["message"].value("reasoning_content", "").starts_with("No. "))
      << r.dump();
}

// reasoning_format none, thinking turned off, or the request's own GBNF: the grammar holds
// from the first token, as before (the script's "<think>" is masked: no thinking, a call).
TEST(ServerReasoning, GrammarFromTheFirstTokenWithoutThinking) {
  TestServer s(scripted(byte_script(std::string("<think>\nHm.\n</think>\n\n") + kTimeCall)), {},
               vocab_with(kThinkTemplate));
  for (const json& extra : {json{{"reasoning_format", "none"}},
                            json{{"chat_template_kwargs", {{"enable_thinking", false}}}}}) {
    SCOPED_TRACE(extra.dump());
    int st = 0;
    json body = gate_body({{"tool_choice", "required"}, {"parallel_tool_calls", false}});
    for (auto& [k, v] : extra.items()) body[k] = v;
    const json r = post(s, body, &st);
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content")) << r.dump();
    EXPECT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  }
  int st = 0;
  const json r = post(s, chat_body(false, {{"grammar", "root ::= \"ok\""}}), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"].dump(),
            json({{"role", "assistant"}, {"content", "ok"}}).dump());
}

}  // namespace
}  // namespace minfer::testing
