// minfer-test-libs: minfer_server
// The tool-call grammars' parameters (server/constrain.h tool_call_gbnf): the schema's
// properties in its order, each at most once, the required ones present, in every parameter
// format; MiniMax M3's, Gemma 4's and LFM2's values constrained by their property's schema in
// the format's own spelling.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "server/constrain.h"

namespace minfer::testing {
namespace {

bool gbnf_accepts(const std::string& gbnf, const std::string& text) {
  grammar::Matcher m(std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf)));
  return m.accept(text) && m.is_complete();
}

// The parameter formats' grammars keep the schema's properties in its order, each at most
// once, the required ones present, optional ones skippable (the order is the schema's: a free
// order with each at most once needs an automaton over subsets; docs/SERVER.md "Tools").
TEST(ServerToolGrammar, ParametersRequiredAndAtMostOnceInSchemaOrder) {
  using server::ToolCallFormat;
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
     "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"},
                    "d": {"type": "integer"}}, "required": ["a", "c"]}}}])");
  auto qwen = [](const std::string& keys) {
    std::string t = "<tool_call>\n<function=f>\n";
    for (char k : keys) t += std::string("<parameter=") + k + ">\n1\n</parameter>\n";
    return t + "</function>\n</tool_call>";
  };
  auto glm = [](const std::string& keys) {
    std::string t = "<tool_call>f";
    for (char k : keys) t += std::string("<arg_key>") + k + "</arg_key><arg_value>1</arg_value>";
    return t + "</tool_call>";
  };
  auto k3 = [](const std::string& keys) {
    std::string t = "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>";
    for (char k : keys)
      t += std::string("<|open|>argument key=\"") + k +
           "\" type=\"number\"<|sep|>1<|close|>argument<|sep|>";
    return t + "<|close|>call<|sep|><|close|>tools<|sep|>";
  };
  const std::string ns = "]<]minimax[>[";
  auto mm = [&](const std::string& keys) {
    std::string t = ns + "<tool_call>\n" + ns + "<invoke name=\"f\">";
    for (char k : keys) t += ns + "<" + k + ">1" + ns + "</" + k + ">";
    return t + ns + "</invoke>\n" + ns + "</tool_call>";
  };
  auto gemma = [](const std::string& keys) {
    std::string t = "<|tool_call>call:f{";
    for (char k : keys) t += (t.back() == '{' ? "" : ",") + std::string(1, k) + ":1";
    return t + "}<tool_call|>";
  };
  auto py = [](const std::string& keys) {
    std::string t = "<|tool_call_start|>[f(";
    for (char k : keys) t += (t.back() == '(' ? "" : ", ") + std::string(1, k) + "=1";
    return t + ")]<|tool_call_end|>";
  };
  const std::vector<std::pair<ToolCallFormat, std::function<std::string(const std::string&)>>>
      formats = {{ToolCallFormat::QwenXml, qwen}, {ToolCallFormat::Glm, glm},
                 {ToolCallFormat::KimiK3, k3},    {ToolCallFormat::MiniMaxXml, mm},
                 {ToolCallFormat::Gemma4, gemma}, {ToolCallFormat::Pythonic, py}};
  for (const auto& [f, write] : formats) {
    SCOPED_TRACE(server::tool_call_format_name(f));
    for (bool one_block : {false, true}) {
      const std::string g = server::tool_call_gbnf(f, tools, "", false, one_block);
      for (const char* ok : {"ac", "abc", "acd", "abcd"})
        EXPECT_TRUE(gbnf_accepts(g, write(ok))) << ok << "\n" << g;
      for (const char* bad : {"", "a", "c", "bc", "ca", "aac", "acc", "abbc", "acdd", "adc"})
        EXPECT_FALSE(gbnf_accepts(g, write(bad))) << bad;
    }
  }
}

// MiniMax M3, Gemma 4 and LFM2 values follow their property's schema in the format's own
// spelling (a string its string, a number / integer JSON's, booleans and null its words).
TEST(ServerToolGrammar, MoreFormatsValuesFollowTheSchema) {
  using server::ToolCallFormat;
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
     "properties": {"v": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "g", "parameters": {"type": "object",
     "properties": {"v": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "h", "parameters": {"type": "object",
     "properties": {"v": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "e", "parameters": {"type": "object",
     "properties": {"v": {"enum": ["utc", "local"]}}}}}])");
  const std::string ns = "]<]minimax[>[";
  const std::string mm = server::tool_call_gbnf(ToolCallFormat::MiniMaxXml, tools, "", false);
  const std::string gm = server::tool_call_gbnf(ToolCallFormat::Gemma4, tools, "", false);
  const std::string py = server::tool_call_gbnf(ToolCallFormat::Pythonic, tools, "", false);
  auto m = [&](const std::string& fn, const std::string& v) {
    return ns + "<tool_call>\n" + ns + "<invoke name=\"" + fn + "\">" + ns + "<v>" + v + ns +
           "</v>" + ns + "</invoke>\n" + ns + "</tool_call>";
  };
  auto g = [](const std::string& fn, const std::string& v) {
    return "<|tool_call>call:" + fn + "{v:" + v + "}<tool_call|>";
  };
  auto p = [](const std::string& fn, const std::string& v) {
    return "<|tool_call_start|>[" + fn + "(v=" + v + ")]<|tool_call_end|>";
  };
  for (const auto& [fn, mv, gv, pv, ok] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string, bool>>{
           {"f", "12", "12", "12", true},
           {"f", "x", "<|\"|>12<|\"|>", "'12'", false},
           {"f", "1.5", "1.5", "1.5", false},
           {"g", "any text", "<|\"|>any text<|\"|>", "'any text'", true},
           {"g", "x]", "12", "12", false},
           {"h", "true", "true", "True", true},
           {"h", "yes", "<|\"|>true<|\"|>", "true", false},
           {"e", "utc", "<|\"|>utc<|\"|>", "'utc'", true},
           {"e", "mars", "<|\"|>mars<|\"|>", "'mars'", false}}) {
    SCOPED_TRACE(fn + ": " + mv + " / " + gv + " / " + pv);
    EXPECT_EQ(gbnf_accepts(mm, m(fn, mv)), ok) << mm;
    EXPECT_EQ(gbnf_accepts(gm, g(fn, gv)), ok) << gm;
    EXPECT_EQ(gbnf_accepts(py, p(fn, pv)), ok) << py;
  }
}

// The ordered-member grammar stays linear in the number of properties (an any-order grammar
// with each at most once would grow as 2^n): 64 properties, half of them required, give a
// grammar under 10 times that of 8, which compiles and takes a call with the required ones.
TEST(ServerToolGrammar, ParameterGrammarIsLinearInTheProperties) {
  using server::ToolCallFormat;
  auto tools = [](int n) {
    nlohmann::ordered_json props = nlohmann::ordered_json::object();
    nlohmann::ordered_json required = nlohmann::ordered_json::array();
    for (int j = 0; j < n; ++j) {
      props["p" + std::to_string(j)] = {{"type", "integer"}};
      if (j % 2 == 1) required.push_back("p" + std::to_string(j));
    }
    return nlohmann::ordered_json::array(
        {{{"type", "function"},
          {"function",
           {{"name", "f"},
            {"parameters",
             {{"type", "object"}, {"properties", props}, {"required", required}}}}}}});
  };
  for (ToolCallFormat f : {ToolCallFormat::QwenXml, ToolCallFormat::Gemma4}) {
    SCOPED_TRACE(server::tool_call_format_name(f));
    const std::string small = server::tool_call_gbnf(f, tools(8), "", false);
    const std::string big = server::tool_call_gbnf(f, tools(64), "", false);
    std::printf("%s: %zu bytes of grammar for 8 properties, %zu for 64\n",
                server::tool_call_format_name(f), small.size(), big.size());
    EXPECT_LT(big.size(), 10 * small.size());
    std::string call =
        f == ToolCallFormat::QwenXml ? "<tool_call>\n<function=f>\n" : "<|tool_call>call:f{";
    for (int j = 1; j < 64; j += 2) {
      const std::string k = "p" + std::to_string(j);
      call += f == ToolCallFormat::QwenXml ? "<parameter=" + k + ">\n1\n</parameter>\n"
                                           : (j > 1 ? "," : "") + k + ":1";
    }
    call += f == ToolCallFormat::QwenXml ? "</function>\n</tool_call>" : "}<tool_call|>";
    EXPECT_TRUE(gbnf_accepts(big, call));
  }
}

}  // namespace
}  // namespace minfer::testing
