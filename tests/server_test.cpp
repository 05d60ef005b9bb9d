// minfer-test-libs: minfer_server
// Server unit tests without HTTP: request parsing and validation, SSE framing, UTF-8 and
// stop-string hold-back, response bodies.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "server/api_error.h"
#include "server/chat.h"
#include "server/request.h"
#include "server/responses.h"
#include "server/text_stream.h"
#include "server_test_util.h"

namespace minfer::server {
namespace {

using minfer::testing::fake_vocab;

TEST(ServerStop, HoldsBackAPossibleStart) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("hello S"), "hello ");
  EXPECT_EQ(m.held_bytes(), 1u);
  EXPECT_EQ(m.push("T"), "");
  EXPECT_EQ(m.push("x"), "STx");  // not a stop after all: released
  EXPECT_EQ(m.push(" ST"), " ");
  EXPECT_EQ(m.push("OP and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.stop_word(), "STOP");
  EXPECT_EQ(m.push("later"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(ServerStop, EarliestStopWinsAndFlushReleasesTheTail) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(m.push("hello world"), "hel");
  EXPECT_EQ(m.stop_word(), "lo w");
  StopMatcher n({"abc"});
  EXPECT_EQ(n.push("xxab"), "xx");
  EXPECT_EQ(n.flush(), "ab");
  StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
  StopMatcher empty_stop({""});  // an empty stop string never matches
  EXPECT_EQ(empty_stop.push("abc"), "abc");
}

TEST(ServerStop, MultiByteStopStrings) {
  StopMatcher m({"\xC3\xA9t\xC3\xA9"});  // "été"
  EXPECT_EQ(m.push("un \xC3\xA9"), "un ");
  EXPECT_EQ(m.push("t"), "");
  EXPECT_EQ(m.push("\xC3\xA9!"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(ServerText, NeverSplitsACharacterAcrossChunks) {
  tok::Tokenizer tk(fake_vocab());
  TextStream ts(tk, {});
  // U+1F600 as four separate byte tokens.
  EXPECT_EQ(ts.push_bytes("\xF0"), "");
  EXPECT_EQ(ts.push_bytes("\x9F"), "");
  EXPECT_EQ(ts.push_bytes("\x98"), "");
  EXPECT_EQ(ts.push_bytes("\x80"), "\xF0\x9F\x98\x80");
  // A started character that never completes becomes U+FFFD at the end.
  EXPECT_EQ(ts.push_bytes("ok\xE2\x82"), "ok");
  EXPECT_EQ(ts.finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ServerText, StopStringAcrossTokensAndUtf8) {
  tok::Tokenizer tk(fake_vocab());
  TextStream ts(tk, {"caf\xC3\xA9"});
  std::string out;
  for (const char* b : {" a caf", "\xC3", "\xA9", " more"}) out += ts.push_bytes(b);
  out += ts.finish();
  EXPECT_EQ(out, " a ");
  EXPECT_TRUE(ts.stopped());
}

TEST(ServerText, Utf8CompletePrefixAndSse) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xC3"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xC3\xA9"), 4u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(sse_data("{\"a\":1}"), "data: {\"a\":1}\n\n");
}

GenParams defaults() {
  return GenParams{};
}

TEST(ServerRequest, ParsesCompletions) {
  const json b = parse_body(R"({"prompt":"hi","max_tokens":7,"temperature":0,"top_p":0.5,
      "top_k":3,"min_p":0.1,"seed":42,"stop":["a","b"],"stream":true,
      "stream_options":{"include_usage":true},"presence_penalty":0.5,"frequency_penalty":-1,
      "logprobs":2,"repetition_penalty":1.1})");
  const GenRequest r = parse_completions(b, defaults());
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_EQ(r.gen.n_predict, 7);
  EXPECT_EQ(r.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 3);
  EXPECT_EQ(r.gen.sampling.seed, 42u);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.gen.stream && r.gen.include_usage && r.gen.logprobs);
  EXPECT_EQ(r.gen.top_logprobs, 2);
  EXPECT_FLOAT_EQ(r.gen.sampling.repeat_penalty, 1.1f);
  const GenRequest t =
      parse_completions(parse_body(R"({"prompt":[1,5,9],"stop":"x"})"), defaults());
  EXPECT_TRUE(t.prompt_is_tokens);
  EXPECT_EQ(t.prompt_tokens, (std::vector<int32_t>{1, 5, 9}));
  EXPECT_EQ(t.gen.stop, (std::vector<std::string>{"x"}));
  EXPECT_EQ(t.gen.n_predict, 16);  // OpenAI's default
  const GenRequest lb = parse_completions(
      parse_body(R"({"prompt":"x","logit_bias":{"5":-100,"7":2.5}})"), defaults());
  EXPECT_EQ(lb.gen.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));
  const GenRequest lf =
      parse_completions(parse_body(R"({"prompt":"x","logit_bias":[[3,false]]})"), defaults());
  ASSERT_EQ(lf.gen.logit_bias.size(), 1u);
  EXPECT_EQ(lf.gen.logit_bias[0].first, 3);
  EXPECT_EQ(lf.gen.logit_bias[0].second, -INFINITY);
}

TEST(ServerRequest, ParsesChatAndNative) {
  const GenRequest c = parse_chat(parse_body(R"({"messages":[{"role":"system","content":"s"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
      "max_completion_tokens":5,"logprobs":true,"top_logprobs":3})"),
                                  defaults());
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[1].content, "ab");
  EXPECT_EQ(c.gen.n_predict, 5);
  EXPECT_EQ(c.gen.top_logprobs, 3);
  const GenRequest n = parse_native(parse_body(R"({"prompt":"x","n_predict":4,"n_probs":2,
      "cache_prompt":false})"),
                                    defaults());
  EXPECT_EQ(n.gen.n_predict, 4);
  EXPECT_FALSE(n.gen.cache_prompt);
  EXPECT_TRUE(n.gen.logprobs);
  GenParams capped;
  capped.n_predict = 10;  // -n 10 caps every request
  EXPECT_EQ(parse_native(parse_body(R"({"prompt":"x"})"), capped).gen.n_predict, 10);
  EXPECT_EQ(parse_native(parse_body(R"({"prompt":"x","n_predict":50})"), capped).gen.n_predict, 10);
}

TEST(ServerRequest, RejectsBadBodiesNamingTheField) {
  struct Case {
    const char* body;
    const char* mentions;
  };
  const Case cases[] = {
      {"{", "JSON"},
      {"[1,2]", "object"},
      {"\"str\"", "object"},
      {"{}", "prompt"},
      {R"({"prompt":5})", "prompt"},
      {R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {R"({"prompt":"x","temperature":9})", "temperature"},
      {R"({"prompt":"x","top_p":-0.1})", "top_p"},
      {R"({"prompt":"x","top_k":1.5})", "top_k"},
      {R"({"prompt":"x","max_tokens":-3})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":"ten"})", "max_tokens"},
      {R"({"prompt":"x","n":2})", "'n'"},
      {R"({"prompt":"x","stop":5})", "stop"},
      {R"({"prompt":"x","stop":["a",1]})", "stop"},
      {R"({"prompt":"x","stream":"yes"})", "stream"},
      {R"({"prompt":"x","presence_penalty":3})", "presence_penalty"},
      {R"({"prompt":"x","seed":"s"})", "seed"},
      {R"({"prompt":[1,-2]})", "prompt"},
      {R"({"prompt":"x","stream_options":5})", "stream_options"},
      {R"({"prompt":"x","logprobs":30})", "logprobs"},
      {R"({"prompt":"x","logit_bias":{"1":500}})", "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"-1":5}})", "logit_bias"},
      {R"({"prompt":"x","logit_bias":[[1]]})", "logit_bias"},
      {R"({"prompt":"x","logit_bias":[[1,true]]})", "logit_bias"},
  };
  for (const Case& c : cases) {
    try {
      parse_completions(parse_body(c.body), defaults());
      ADD_FAILURE() << c.body << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << c.body;
      EXPECT_NE(std::string(e.what()).find(c.mentions), std::string::npos)
          << c.body << ": " << e.what();
    }
  }
  for (const char* chat : {R"({})", R"({"messages":"hi"})", R"({"messages":[]})",
                           R"({"messages":[5]})", R"({"messages":[{"content":"x"}]})",
                           R"({"messages":[{"role":"user","content":[{"type":"image"}]}]})",
                           R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})"}) {
    EXPECT_THROW(parse_chat(parse_body(chat), defaults()), ApiError) << chat;
  }
}

// grammar / json_schema / response_format: compiled at parse time; a bad one is a 400 naming
// the field and the problem (GBNF line and column, or the schema keyword and its path).
TEST(ServerRequest, GrammarFieldsCompileOrAre400) {
  auto grammar_of = [](const char* body) {
    return parse_completions(parse_body(body), defaults()).gen.grammar;
  };
  EXPECT_EQ(grammar_of(R"({"prompt":"x"})"), nullptr);
  EXPECT_EQ(grammar_of(R"({"prompt":"x","response_format":{"type":"text"}})"), nullptr);
  EXPECT_EQ(grammar_of(R"({"prompt":"x","grammar":""})"), nullptr);
  EXPECT_NE(grammar_of(R"({"prompt":"x","grammar":"root ::= \"yes\" | \"no\""})"), nullptr);
  EXPECT_NE(grammar_of(R"({"prompt":"x","json_schema":{"type":"integer"}})"), nullptr);
  EXPECT_NE(grammar_of(R"({"prompt":"x","response_format":{"type":"json_object"}})"), nullptr);
  EXPECT_NE(grammar_of(R"({"prompt":"x","response_format":{"type":"json_schema",
      "json_schema":{"name":"n","strict":true,"schema":{"type":"object"}}}})"),
            nullptr);
  const GenRequest chat = parse_chat(parse_body(R"({"messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_object"}})"),
                                     defaults());
  EXPECT_NE(chat.gen.grammar, nullptr);
  const GenRequest native =
      parse_native(parse_body(R"({"prompt":"x","grammar":"root ::= [0-9]+"})"), defaults());
  EXPECT_NE(native.gen.grammar, nullptr);
  struct Case {
    const char* body;
    const char* mentions;
  };
  const Case bad[] = {
      {R"({"prompt":"x","grammar":"root ::= \"a"})",
       "'grammar' is invalid: grammar:1:10: unterminated string literal"},
      {R"({"prompt":"x","grammar":"root ::= b"})", "rule 'b' is used but never defined"},
      {R"({"prompt":"x","grammar":5})", "'grammar' must be a string"},
      {R"({"prompt":"x","json_schema":{"type":"string","pattern":"a"}})",
       "'json_schema' is not supported: json_schema: keyword 'pattern' is not supported at #"},
      {R"({"prompt":"x","json_schema":"{}"})", "'json_schema' must be a JSON schema object"},
      {R"({"prompt":"x","response_format":{"type":"xml"}})", "'response_format.type' must be"},
      {R"({"prompt":"x","response_format":"json"})", "'response_format' must be an object"},
      {R"({"prompt":"x","response_format":{"type":"json_schema"}})",
       "needs 'json_schema': {\"schema\""},
      {R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":
          {"type":"integer","minimum":1}}}})",
       "'response_format.json_schema.schema' is not supported: json_schema: keyword 'minimum'"},
      {R"({"prompt":"x","grammar":"root ::= \"a\"","response_format":{"type":"json_object"}})",
       "'grammar' and 'response_format' both constrain the output"},
  };
  auto error_of = [](const char* body) -> std::string {
    try {
      parse_completions(parse_body(body), defaults());
    } catch (const ApiError& e) {
      return e.status() == 400 ? e.what() : "(status " + std::to_string(e.status()) + ")";
    }
    return "(accepted)";
  };
  for (const Case& c : bad)
    EXPECT_NE(error_of(c.body).find(c.mentions), std::string::npos)
        << c.body << ": " << error_of(c.body);
}

// llama-server's rules: a message needs 'content' or 'tool_calls' (null content is empty
// text); a prompt that is an empty list is no prompt, the empty string is BOS alone.
TEST(ServerRequest, MissingContentOrPromptIsNamed) {
  for (const char* chat : {R"({"messages":[{"role":"user"}]})",
                           R"({"messages":[{"role":"user","content":"a"},{"role":"user"}]})",
                           R"({"messages":[{"role":"user","text":"misspelt"}]})"}) {
    try {
      parse_chat(parse_body(chat), defaults());
      ADD_FAILURE() << chat << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << chat;
      EXPECT_NE(std::string(e.what()).find("'content'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("messages["), std::string::npos) << e.what();
    }
  }
  const GenRequest ok = parse_chat(parse_body(R"({"messages":[{"role":"user","content":null},
      {"role":"assistant","tool_calls":[{"type":"function","id":"c1",
       "function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"42"}]})"),
                                   defaults());
  ASSERT_EQ(ok.messages.size(), 3u);
  EXPECT_EQ(ok.messages[0].content, "");
  EXPECT_EQ(ok.messages[1].content, "");
  for (const char* body : {R"({"prompt":[]})", R"({"prompt":null})", R"({})"}) {
    try {
      parse_completions(parse_body(body), defaults());
      ADD_FAILURE() << body << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << body;
      EXPECT_NE(std::string(e.what()).find("'prompt'"), std::string::npos) << e.what();
    }
  }
  try {
    parse_completions(parse_body(R"({"prompt":[]})"), defaults());
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("must not be empty"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_completions(parse_body(R"({"prompt":""})"), defaults()).prompt_text, "");
}

TEST(ServerResponses, StreamFramingForChatWithUsage) {
  tok::Tokenizer tk(fake_vocab());
  ResponseContext ctx;
  ctx.endpoint = Endpoint::ChatCompletions;
  ctx.id = "chatcmpl-1";
  ctx.model = "m";
  ctx.gen.include_usage = true;
  ctx.tk = &tk;
  ResponseBuilder b(ctx);
  TaskEvent e1;
  e1.text = "Hel";
  TaskEvent e2;
  e2.text = "lo";
  e2.final = true;
  e2.finish_reason = "stop";
  e2.usage = {5, 2, 3};
  bool done = false;
  const auto p = minfer::testing::sse_payloads(b.sse({e1, e2}), &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(p.size(), 5u);  // role, "Hel", "lo", finish, usage
  EXPECT_EQ(p[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(p[1]["choices"][0]["delta"]["content"], "Hel");
  EXPECT_EQ(p[2]["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(p[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(p[4]["choices"].empty());
  EXPECT_EQ(p[4]["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(p[4]["usage"]["total_tokens"], 7);
  EXPECT_TRUE(b.done());
}

TEST(ServerResponses, ErrorsMidStreamAreOneErrorFrame) {
  tok::Tokenizer tk(fake_vocab());
  ResponseContext ctx;
  ctx.tk = &tk;
  ResponseBuilder b(ctx);
  TaskEvent e;
  e.final = true;
  e.error = unavailable("out of KV cache blocks");
  bool done = true;
  const auto p = minfer::testing::sse_payloads(b.sse({e}), &done);
  EXPECT_FALSE(done);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["error"]["code"], 503);
}

}  // namespace
}  // namespace minfer::server

// ChatFormatter renders Jinja through the interpreter: the vocabulary's own template, a file's
// text with the vocabulary's BOS, a built-in name; a refusal is a 400 with the template's words.
namespace minfer::server {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A chat request with tools, and a tool-call round trip as an OpenAI client sends it (the
// call's arguments as JSON text), rendered through parse_chat and ChatFormatter with real
// templates: byte for byte what Python Jinja2 renders for the corpus' `tools` and
// `tool_round_trip` cases (../shared/chat-templates/expected, made as transformers does).
TEST(ServerChat, ToolsReachTheTemplateAsPythonJinjaRendersThem) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(MINFER_SHARED_DIR) / "chat-templates";
  if (!fs::exists(dir / "cases.json")) GTEST_SKIP() << dir << " is absent";
  const json cases = json::parse(read_file(dir / "cases.json"));
  const tok::Vocab vocab = testing::fake_vocab();  // BOS <s>, EOS </s>: the cases' own
  int compared = 0;
  for (const char* name :
       {"Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "mistralai-Mistral-Nemo-Instruct-2407"}) {
    const ChatFormatter chat(vocab, read_file(dir / "templates" / (std::string(name) + ".jinja")));
    ASSERT_TRUE(chat.available()) << name << ": " << chat.why_unavailable();
    for (const json& c : cases) {
      const json& ctx = c["context"];
      if (!ctx.contains("tools")) continue;
      const fs::path want = dir / "expected" / name / (c["name"].get<std::string>() + ".expected");
      json body = {{"messages", ctx["messages"]}, {"tools", ctx["tools"]}, {"tool_choice", "auto"}};
      for (json& m : body["messages"])
        if (m.contains("tool_calls"))
          for (json& call : m["tool_calls"])
            call["function"]["arguments"] = call["function"]["arguments"].dump();
      const GenRequest r = parse_chat(body, defaults());
      ++compared;
      if (!fs::exists(want)) {  // Python refuses it (an .error file): so must we, with a 400
        EXPECT_THROW(chat.format(r.messages, r.chat_options), ApiError) << name << c["name"];
        continue;
      }
      EXPECT_EQ(chat.format(r.messages, r.chat_options), read_file(want))
          << name << " / " << c["name"];
    }
  }
  EXPECT_EQ(compared, 8);
  // Bad tools are a 400 naming the field.
  for (const char* bad : {R"({"messages":[{"role":"user","content":"x"}],"tools":{}})",
                          R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"x"}]})",
                          R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"any"})",
                          R"({"messages":[{"role":"assistant","tool_calls":[{}]}]})"}) {
    try {
      parse_chat(parse_body(bad), defaults());
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_NE(std::string(e.what()).find("tool"), std::string::npos) << e.what();
    }
  }
}

TEST(ServerChat, FormatterRendersJinjaTemplates) {
  const tok::Vocab vocab = testing::fake_vocab();
  const std::vector<tok::ChatMessage> msgs = {{"user", "q"}};
  const ChatFormatter own(vocab, "");
  ASSERT_TRUE(own.available()) << own.why_unavailable();
  EXPECT_EQ(own.format(msgs), "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
  const ChatFormatter file(vocab, "{{ bos_token }}[{{ messages[0].content }}]");
  EXPECT_EQ(file.format(msgs), vocab.tokens[static_cast<size_t>(vocab.bos)] + "[q]");
  const ChatFormatter named(vocab, "llama2");
  EXPECT_EQ(named.name(), "llama2");
  try {
    named.format(std::vector<tok::ChatMessage>{{"user", "a"}, {"user", "b"}});
    FAIL() << "expected a refusal";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_STREQ(e.what(), "Conversation roles must alternate user/assistant/user/assistant/...");
  }
  const ChatFormatter broken(vocab, "{% if %}");
  EXPECT_FALSE(broken.available());
  EXPECT_NE(broken.why_unavailable().find("line 1"), std::string::npos) << broken.why_unavailable();
}

}  // namespace
}  // namespace minfer::server
