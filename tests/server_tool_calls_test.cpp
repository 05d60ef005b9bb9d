// minfer-test-libs: minfer_server
// Tool calls in model output (server/tool_calls.h): format detection over the template corpus,
// each format whole and streamed in pieces of every size, malformed text as content, several
// calls, content + calls, parallel_tool_calls; the chat response bodies and SSE deltas
// (server/responses.h) built from them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>

#include "server/json_scan.h"
#include "server/responses.h"
#include "server/text_stream.h"
#include "server/tool_calls.h"
#include "server_test_util.h"
#include "tokenizer/chat_template.h"

namespace minfer::server {
namespace {

using Kind = ToolCallDelta::Kind;

struct Call {
  std::string name, arguments;
};

struct Message {
  std::string content;
  std::vector<ToolCall> calls;
  bool broken = false;
};

// The message a stream of deltas describes, pushing `text` in pieces of `step` bytes (0: all at
// once). Checks the deltas' order: a call's Begin (with its id) comes before its arguments,
// indices count up from 0, and the deltas agree with the parser's own message.
Message stream(ToolCallFormat f, std::string_view text, size_t step, bool parallel = true,
               const ParamTypes& types = {}) {
  ToolCallParser p(f, parallel, types);
  Message m;
  auto take = [&](const std::vector<ToolCallDelta>& ds) {
    for (const ToolCallDelta& d : ds) {
      switch (d.kind) {
        case Kind::Content:
          EXPECT_FALSE(d.text.empty());
          m.content += d.text;
          break;
        case Kind::Begin:
          EXPECT_EQ(d.index, m.calls.size());
          EXPECT_FALSE(d.id.empty());
          m.calls.push_back({d.id, d.text, ""});
          break;
        case Kind::Arguments:
          EXPECT_LT(d.index, m.calls.size());
          if (d.index < m.calls.size()) m.calls[d.index].arguments += d.text;
          break;
      }
    }
  };
  if (step == 0) step = std::max<size_t>(text.size(), 1);
  for (size_t i = 0; i < text.size(); i += step) take(p.push(text.substr(i, step)));
  take(p.finish());
  EXPECT_EQ(m.content, p.content());
  EXPECT_EQ(m.calls.size(), p.calls().size());
  for (size_t i = 0; i < std::min(m.calls.size(), p.calls().size()); ++i) {
    EXPECT_EQ(m.calls[i].id, p.calls()[i].id);
    EXPECT_EQ(m.calls[i].arguments, p.calls()[i].arguments);
  }
  m.broken = p.broken();
  return m;
}

const std::vector<size_t> kSteps = {0, 1, 2, 3, 5, 8, 13};

// `text` gives `content` and `calls` whether it arrives whole or in pieces of any size.
void expect_parse(ToolCallFormat f, std::string_view text, const std::string& content,
                  const std::vector<Call>& calls, bool parallel = true,
                  const std::vector<size_t>& steps = kSteps, const ParamTypes& types = {}) {
  for (size_t step : steps) {
    SCOPED_TRACE("pieces of " + std::to_string(step) + " bytes: " + std::string(text));
    const Message m = stream(f, text, step, parallel, types);
    EXPECT_EQ(m.content, content);
    EXPECT_FALSE(m.broken);
    ASSERT_EQ(m.calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(m.calls[i].name, calls[i].name);
      EXPECT_EQ(m.calls[i].arguments, calls[i].arguments);
      EXPECT_TRUE(nlohmann::json::parse(m.calls[i].arguments, nullptr, false).is_object());
    }
  }
}

// Text that holds no call comes out as it went in, whatever the pieces.
void expect_content(ToolCallFormat f, std::string_view text,
                    const std::vector<size_t>& steps = kSteps) {
  expect_parse(f, text, std::string(text), {}, true, steps);
}

// The resumable JSON scanner gives the same verdict and end fed byte by byte as whole, and
// nlohmann-json's verdict on the value (what the scan cannot see aside: lone surrogates).
TEST(JsonScan, ResumedByteByByteAsWhole) {
  const std::vector<std::pair<std::string, Scan>> cases = {
      {R"({"a": [1, -2.5e+3, true, null, {}], "b": "x\"}\u00e9"} tail)", Scan::Done},
      {"[]", Scan::Done},
      {"0 ", Scan::Done},
      {"-0.5e", Scan::More},
      {"12", Scan::More},  // a number at the end may go on
      {"{\"a\" 1}", Scan::Bad},
      {"[01]", Scan::Bad},
      {"[1,]", Scan::Bad},
      {"\"a\nb\"", Scan::Bad},
      {"\"\\x\"", Scan::Bad},
      {"{\"k\": tru", Scan::More},
      {"{\"k\": trux}", Scan::Bad},
      {"[1.]", Scan::Bad},
      {"\"\\u12g4\"", Scan::Bad},
  };
  for (const auto& [text, want] : cases) {
    SCOPED_TRACE(text);
    size_t end_whole = 0;
    EXPECT_EQ(scan_json_value(text, 0, &end_whole), want);
    JsonScanner sc(0);
    Scan got = Scan::More;
    for (size_t n = 1; n <= text.size() && got == Scan::More; ++n)
      got = sc.feed(std::string_view(text).substr(0, n));
    EXPECT_EQ(got, want);
    if (want == Scan::Done) {
      EXPECT_EQ(sc.end(), end_whole);
      EXPECT_TRUE(nlohmann::json::accept(text.substr(0, end_whole)));
    }
  }
}

TEST(ToolCallFormat, DetectedFromTheCorpusTemplates) {
  const std::map<std::string, ToolCallFormat> want = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::Hermes},
      {"Qwen-Qwen3-0.6B", ToolCallFormat::Hermes},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", ToolCallFormat::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFormat::Hermes},
      {"ibm-granite-granite-4.1", ToolCallFormat::Hermes},
      {"MiMo-VL", ToolCallFormat::Hermes},
      {"unsloth-Apriel-1.5", ToolCallFormat::Hermes},
      {"Apriel-1.6-15b-Thinker-fixed", ToolCallFormat::Hermes},
      {"MiniMax-M1", ToolCallFormat::Hermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::Llama3},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::Llama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::Mistral},
      {"unsloth-mistral-Devstral-Small-2507", ToolCallFormat::Mistral},
      {"mistralai-Ministral-3-14B-Reasoning-2512", ToolCallFormat::Mistral},
      {"Qwen3.5-4B", ToolCallFormat::QwenXml},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", ToolCallFormat::QwenXml},
      {"meetkai-functionary-medium-v3.1", ToolCallFormat::Functionary},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", ToolCallFormat::DeepSeekR1},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolCallFormat::DeepSeekR1},
      {"llama-cpp-deepseek-r1", ToolCallFormat::DeepSeekR1},
      {"deepseek-ai-DeepSeek-V4", ToolCallFormat::DeepSeekDsml},
      {"deepseek-ai-DeepSeek-V4-Flash-0731", ToolCallFormat::DeepSeekDsml},
      {"GLM-4.7-Flash", ToolCallFormat::Glm},
      {"poolside-Laguna-XS.2", ToolCallFormat::Glm},
      {"poolside-Laguna-XS-2.1", ToolCallFormat::Glm},
      {"moonshotai-Kimi-K2", ToolCallFormat::KimiK2},
      {"Kimi-K2-Thinking", ToolCallFormat::KimiK2},
      {"fireworks-ai-llama-3-firefunction-v2", ToolCallFormat::Firefunction},
      {"ibm-granite-granite-3.3-2B-Instruct", ToolCallFormat::Granite},
      {"CohereForAI-c4ai-command-r-plus-tool_use", ToolCallFormat::CommandR},
      {"Cohere2MoE", ToolCallFormat::CommandR7b},
      {"GigaChat3-10B-A1.8B", ToolCallFormat::GigaChat},
      {"MiniMax-M3", ToolCallFormat::MiniMaxXml},
      {"google-gemma-4-31B-it-interleaved", ToolCallFormat::Gemma4},
      {"LFM2-8B-A1B", ToolCallFormat::Pythonic},
      {"LFM2.5-8B-A1B", ToolCallFormat::Pythonic},
      {"muse-glimmer", ToolCallFormat::Atem},
      {"openai-gpt-oss-120b", ToolCallFormat::Harmony},
      {"upstage-Solar-Open-100B", ToolCallFormat::Solar},
      {"Kimi-K3", ToolCallFormat::KimiK3},
  };
  const std::filesystem::path dir =
      std::filesystem::path(MINFER_SHARED_DIR) / "chat-templates" / "templates";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path());
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    const std::string name = e.path().stem().string();
    const auto it = want.find(name);
    // Every other template (no tools, or a syntax not read) is None: its
    // answers stay text.
    EXPECT_EQ(
        tool_call_format_name(detect_tool_call_format(text)),
        std::string(tool_call_format_name(it == want.end() ? ToolCallFormat::None : it->second)))
        << name;
    ++n;
  }
  EXPECT_GE(n, 40);
  for (const char* builtin : {"chatml", "llama2", "llama3"})
    EXPECT_EQ(detect_tool_call_format(tok::ChatTemplate::builtin_text(builtin)),
              ToolCallFormat::None);
}

size_t count(std::string_view text, std::string_view word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

// Every template with a format writes calls the parser reads back: an assistant message with
// two calls rendered by the template itself (the text after the prompt the same conversation
// gets without it), read whole and in pieces, gives the same names and arguments (as JSON
// values: XML parameters come back as numbers / objects where the template wrote them so).
TEST(ToolCallParse, CallsRenderedByEachCorpusTemplateReadBack) {
  const std::filesystem::path dir =
      std::filesystem::path(MINFER_SHARED_DIR) / "chat-templates" / "templates";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const nlohmann::ordered_json tool = {
      {"type", "function"},
      {"function",
       {{"name", "get_weather"},
        {"description", "Weather"},
        {"parameters",
         {{"type", "object"},
          {"properties",
           {{"city", {{"type", "string"}, {"description", "City"}}},
            {"days", {{"type", "integer"}, {"description", "Days"}}}}},
          {"required", {"city"}}}}}}};
  const nlohmann::ordered_json calls = nlohmann::ordered_json::parse(R"([
    {"id": "abcdefgh1", "type": "function", "function": {"name": "get_weather",
     "arguments": {"city": "Paris <north>", "days": 3}}},
    {"id": "abcdefgh2", "type": "function", "function": {"name": "get_weather",
     "arguments": {"city": "Line one\nline two", "opts": {"units": "C", "hourly": [1, 2]}}}}])");
  const nlohmann::ordered_json user = {{"role", "user"}, {"content", "Weather in Paris?"}};
  const nlohmann::ordered_json assistant = {
      {"role", "assistant"}, {"content", ""}, {"tool_calls", calls}};
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path());
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    const ToolCallFormat f = detect_tool_call_format(text);
    // Harmony's calls are read by HarmonyParser (server_harmony_test.cpp reads gpt-oss's back).
    if (f == ToolCallFormat::None || f == ToolCallFormat::Harmony) continue;
    const std::string name = e.path().stem().string();
    SCOPED_TRACE(name);
    const tok::ChatTemplate t = tok::ChatTemplate::from_text(text, name);
    nlohmann::ordered_json ctx = {{"tools", nlohmann::ordered_json::array({tool})},
                                  {"add_generation_prompt", true},
                                  {"messages", nlohmann::ordered_json::array({user})}};
    // firefunction v2 reads the tools as text named `functions`, and a date.
    ctx["functions"] = ctx["tools"].dump();
    ctx["datetime"] = "Dec 03 2026";
    std::string prompt;
    try {
      prompt = t.render(ctx);
    } catch (const Error& err) {
      std::printf("skipped %s: %s\n", name.c_str(), err.what());
      continue;
    }
    ctx["add_generation_prompt"] = false;
    // The message as the server gives it (content "", arguments objects); a template that
    // renders calls only for content null (DeepSeek R1 Distill Llama) gets that, and one that
    // concatenates arguments as text gets them as JSON text.
    std::string whole;
    // Llama 3.x refuses two calls in one message: it gets one.
    size_t n_calls = 2;
    for (int variant = 0; variant < 6; ++variant) {
      nlohmann::ordered_json a = assistant;
      if (variant >= 3) {
        n_calls = 1;
        a["tool_calls"].erase(1);
      }
      if (variant % 3 > 0) a["content"] = nullptr;
      if (variant % 3 > 1)
        for (auto& c : a["tool_calls"])
          c["function"]["arguments"] = c["function"]["arguments"].dump();
      ctx["messages"] = nlohmann::ordered_json::array({user, a});
      try {
        whole = t.render(ctx);
      } catch (const Error&) {
        whole.clear();  // this variant is refused
        continue;
      }
      // Rendered calls name the function more often than the prompt (Command R's prompt ends
      // in a long instruction, so the calls are not past its length).
      if (count(whole, "get_weather") > count(prompt, "get_weather")) break;
    }
    // Kimi K2 Thinking appends to a list, which the sandbox refuses (as transformers' does).
    if (whole.empty()) {
      std::printf("skipped %s: it refuses the calls\n", name.c_str());
      continue;
    }
    size_t common = 0;
    while (common < std::min(prompt.size(), whole.size()) && prompt[common] == whole[common])
      ++common;
    // Not from inside a tag both share the start of (<｜Assistant｜><think> vs <｜tool...).
    const size_t lt = whole.rfind('<', common == 0 ? 0 : common - 1);
    const size_t gt = whole.rfind('>', common == 0 ? 0 : common - 1);
    if (lt != std::string::npos && (gt == std::string::npos || gt < lt)) common = lt;
    const std::string answer = whole.substr(common);
    // GigaChat 3 renders only a message's first call.
    const size_t named = count(answer, "get_weather");
    if (named == 0) {  // LFM2, Granite 3.3: the syntax is only in the system prompt
      std::printf("skipped %s: it renders no calls\n", name.c_str());
      continue;
    }
    n_calls = std::min(n_calls, named);
    std::printf("read %s: %zu calls\n", name.c_str(), n_calls);
    // Read untyped, and typed by the tool's schema (city a string, days an integer).
    const ParamTypes typed(nlohmann::ordered_json::array({tool}));
    for (size_t step : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{101}, size_t{107}}) {
      SCOPED_TRACE("pieces of " + std::to_string(step % 100) + ": " + answer);
      const Message m = stream(f, answer, step % 100, true, step >= 100 ? typed : ParamTypes());
      EXPECT_FALSE(m.broken);
      ASSERT_EQ(m.calls.size(), n_calls);
      for (size_t i = 0; i < n_calls; ++i) {
        EXPECT_EQ(m.calls[i].name, "get_weather");
        EXPECT_EQ(nlohmann::json::parse(m.calls[i].arguments),
                  nlohmann::json::parse(calls[i]["function"]["arguments"].dump()));
      }
    }
    ++n;
  }
  EXPECT_GE(n, 31);
}

TEST(ToolCallParse, XmlParameterFormats) {
  // Qwen3.5 / Nemotron: one newline around a value is the format's; values that are JSON
  // numbers, objects, ... are those, any other text a string.
  expect_parse(ToolCallFormat::QwenXml,
               "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan "
               "Jose\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=o>\n{\"a\": "
               "[1]}\n</parameter>\n</function>\n</tool_call>\n",
               "Let me check.",
               {{"get_weather", "{\"city\": \"San Jose\", \"days\": 3, \"o\": {\"a\":[1]}}"}});
  expect_parse(ToolCallFormat::QwenXml, "<tool_call>\n<function=now>\n</function>\n</tool_call>",
               "", {{"now", "{}"}});
  // GLM 4.x: name, then arg_key / arg_value pairs.
  expect_parse(ToolCallFormat::Glm,
               "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
               "<arg_key>n</arg_key><arg_value>2.5</arg_value></tool_call>"
               "<tool_call>now</tool_call>",
               "", {{"get_weather", "{\"city\": \"Paris\", \"n\": 2.5}"}, {"now", "{}"}});
  // DeepSeek V4's DSML says which values are strings.
  expect_parse(ToolCallFormat::DeepSeekDsml,
               "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
               "string=\"true\">12</｜DSML｜parameter>\n<｜DSML｜parameter name=\"b\" "
               "string=\"false\">12</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
               "", {{"f", "{\"a\": \"12\", \"b\": 12}"}});
  // Text that only looks like a call start is content.
  expect_parse(ToolCallFormat::QwenXml, "a <tool_call> b", "a <tool_call> b", {});
  expect_parse(ToolCallFormat::Glm, "<tool_call>\n<b>", "<tool_call>\n<b>", {});
}

// The tool's schema types each XML parameter: a string stays a string whatever its text, other
// types parse as JSON (text that is no value of them stays a string), a union takes the type
// its text has; parameters and tools the schema does not know are read as without it.
TEST(ToolCallParse, XmlParametersTypedByTheSchema) {
  const ParamTypes types(nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
     "properties": {"s": {"type": "string"}, "i": {"type": "integer"}, "b": {"type": "boolean"},
                    "o": {"type": "object"}, "a": {"type": "array", "items": {"type": "number"}},
                    "n": {"type": ["integer", "null"]}, "u": {"anyOf": [{"type": "string"},
                    {"type": "integer"}]}, "e": {"enum": ["x", 1]}, "r": {"$ref": "#/x"}}}}}])"));
  EXPECT_EQ(types.of("f", "s"), ParamTypes::kString);
  EXPECT_EQ(types.of("f", "u"), ParamTypes::kString | ParamTypes::kInteger);
  EXPECT_EQ(types.of("f", "e"), ParamTypes::kString | ParamTypes::kInteger | ParamTypes::kNumber);
  EXPECT_EQ(types.of("f", "r"), 0);
  EXPECT_EQ(types.of("g", "s"), 0);
  // name, value text -> the JSON value
  const std::vector<std::pair<std::string, std::string>> params = {
      {"s", "3"},   {"s", "true"}, {"s", "{\"a\": 1}"}, {"i", "3"},        {"i", "three"},
      {"i", "2.5"}, {"b", "true"}, {"o", "{\"a\": 1}"}, {"a", "[1, 2.5]"}, {"n", "null"},
      {"n", "4"},   {"u", "7"},    {"u", "seven"},      {"e", "1"},        {"r", "5"},
      {"x", "5"},   {"x", "five"}};
  const std::string want =
      R"({"s": "3", "s": "true", "s": "{\"a\": 1}", "i": 3, "i": "three", "i": "2.5", "b": true, )"
      R"("o": {"a":1}, "a": [1,2.5], "n": null, "n": 4, "u": 7, "u": "seven", "e": 1, "r": 5, )"
      R"("x": 5, "x": "five"})";
  std::string qwen = "<tool_call>\n<function=f>\n", glm = "<tool_call>f\n";
  for (const auto& [k, v] : params) {
    qwen += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
    glm += "<arg_key>" + k + "</arg_key><arg_value>" + v + "</arg_value>\n";
  }
  qwen += "</function>\n</tool_call>";
  glm += "</tool_call>";
  expect_parse(ToolCallFormat::QwenXml, qwen, "", {{"f", want}}, true, kSteps, types);
  expect_parse(ToolCallFormat::Glm, glm, "", {{"f", want}}, true, kSteps, types);
  // Without the schema: typed from the text, as before.
  expect_parse(ToolCallFormat::QwenXml,
               "<tool_call>\n<function=f>\n<parameter=s>\n3\n</parameter>\n</function>\n"
               "</tool_call>",
               "", {{"f", "{\"s\": 3}"}});
  // DSML: the schema first, then the model's string="..." (a JSON string for a string).
  expect_parse(ToolCallFormat::DeepSeekDsml,
               "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"s\" "
               "string=\"false\">\"q\"</｜DSML｜parameter>\n<｜DSML｜parameter name=\"s\" "
               "string=\"false\">12</｜DSML｜parameter>\n<｜DSML｜parameter name=\"i\" "
               "string=\"true\">12</｜DSML｜parameter>\n<｜DSML｜parameter name=\"x\" "
               "string=\"true\">12</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
               "", {{"f", R"({"s": "q", "s": "12", "i": 12, "x": "12"})"}}, true, kSteps, types);
}

// The formats of tool_call_formats_more.cpp, whole and in pieces: JSON calls after an opener,
// and the syntaxes converted to JSON (MiniMax M3's nested elements, Gemma 4's values, LFM2's
// Python literals, muse's ATEM after its header).
TEST(ToolCallParse, MoreFormatsWholeAndInPieces) {
  expect_parse(ToolCallFormat::Granite,
               "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]", "",
               {{"f", "{\"a\": 1}"}});
  expect_parse(ToolCallFormat::Firefunction,
               "Sure. functools[{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", "
               "\"arguments\": \"{\\\"x\\\": 2}\"}]",
               "Sure.", {{"f", "{}"}, {"g", "{\"x\": 2}"}});
  expect_parse(ToolCallFormat::CommandR,
               "Action:\n```json\n[{\"tool_name\": \"f\", \"parameters\": {\"q\": \"a\"}}]", "",
               {{"f", "{\"q\": \"a\"}"}});  // no closing ```
  expect_parse(ToolCallFormat::CommandR7b,
               "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"f\", "
               "\"parameters\": {}}\n]<|END_ACTION|>",
               "", {{"f", "{}"}});
  expect_parse(ToolCallFormat::GigaChat,
               "function call{\"name\": \"f\", \"arguments\": {\"a\": [1]}}", "",
               {{"f", "{\"a\": [1]}"}});
  const std::string ns = "]<]minimax[>[";
  expect_parse(
      ToolCallFormat::MiniMaxXml,
      "Checking." + ns + "<tool_call>\n" + ns + "<invoke name=\"f\">" + ns + "<a>1" + ns + "</a>" +
          ns + "<o>" + ns + "<item>x" + ns + "</item>" + ns + "<item>2" + ns + "</item>" + ns +
          "</o>" + ns + "<s>Paris <north>" + ns + "</s>" + ns + "</invoke>\n" + ns +
          "<invoke name=\"g\">" + ns + "</invoke>\n" + ns + "</tool_call>",
      "Checking.", {{"f", "{\"a\":1,\"o\":[\"x\",2],\"s\":\"Paris <north>\"}"}, {"g", "{}"}});
  expect_parse(
      ToolCallFormat::Gemma4,
      "<|tool_call>call:f{a:<|\"|>x, y<|\"|>,b:[1,{c:true}],n:-2.5e3,z:null}<tool_call|>"
      "<|tool_call>call:g{}<tool_call|>",
      "", {{"f", "{\"a\":\"x, y\",\"b\":[1,{\"c\":true}],\"n\":-2500.0,\"z\":null}"}, {"g", "{}"}});
  expect_parse(ToolCallFormat::Pythonic,
               "<|tool_call_start|>[f(a='x\\'y', b=[1, 2], c={\"k\": None}, d=True), g()]"
               "<|tool_call_end|>",
               "",
               {{"f", "{\"a\":\"x'y\",\"b\":[1,2],\"c\":{\"k\":null},\"d\":true}"}, {"g", "{}"}});
  expect_parse(ToolCallFormat::Atem,
               " to=f<|message|><atem:function_calls>\n<atem:invoke name=\"f\">\n<atem:parameter "
               "name=\"a\">1</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>"
               "<|start|>assistant to=g<|message|><atem:function_calls>\n<atem:invoke "
               "name=\"g\">\n</atem:invoke>\n</atem:function_calls>",
               "", {{"f", "{\"a\": 1}"}, {"g", "{}"}});
}

// Kimi K3: a tools section of calls, each with typed arguments (the type attribute says which
// are strings; the schema comes first) or one JSON block; keys escape '&' and '"'.
TEST(ToolCallParse, KimiK3CallsWholeAndInPieces) {
  const std::string text =
      "I will check.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" "
      "index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>12 <b>"
      "<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>3"
      "<|close|>argument<|sep|><|open|>argument key=\"a&quot;b&amp;\" type=\"object\"<|sep|>"
      "{\"k\": [1]}<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"now\" "
      "index=\"2\"<|sep|><|close|>call<|sep|><|open|>call tool=\"g\" index=\"3\"<|sep|>"
      "<|open|>json type=\"object\"<|sep|>{\"x\": 1}<|close|>json<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|>";
  expect_parse(ToolCallFormat::KimiK3, text, "I will check.<|close|>response<|sep|>",
               {{"get_weather", R"({"city": "12 <b>", "days": 3, "a\"b&": {"k":[1]}})"},
                {"now", "{}"},
                {"g", "{\"x\": 1}"}});
  // Typed by the schema: a string parameter's 3 stays "3" whatever the attribute says.
  const ParamTypes types(nlohmann::ordered_json::parse(R"([{"type": "function", "function":
    {"name": "f", "parameters": {"type": "object", "properties": {"s": {"type": "string"}}}}}])"));
  expect_parse(ToolCallFormat::KimiK3,
               "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument "
               "key=\"s\" type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>"
               "<|close|>tools<|sep|>",
               "", {{"f", R"({"s": "3"})"}}, true, kSteps, types);
  // Not a call: content (a tag in the head, a body that is neither arguments nor JSON).
  expect_content(ToolCallFormat::KimiK3, "<|open|>tools<|sep|><|open|>call tool=\"f\" <b><|sep|>");
  expect_content(ToolCallFormat::KimiK3,
                 "<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|>x<|close|>call<|sep|>");
  expect_content(ToolCallFormat::KimiK3, "<|open|>response<|sep|>text");
  EXPECT_STREQ(tool_call_format_name(ToolCallFormat::KimiK3), "kimi_k3");
}

// MiniMax M3, Gemma 4 and LFM2 values are typed by the tool's schema as XML parameters are: a
// string parameter's 3 is "3", an integer written as a string is the integer, a union takes
// what parses, text of no allowed type stays as written.
TEST(ToolCallParse, MoreFormatsValuesTypedByTheSchema) {
  const ParamTypes types(nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
     "properties": {"s": {"type": "string"}, "i": {"type": "integer"}, "b": {"type": "boolean"},
                    "u": {"type": ["string", "number"]}, "t": {"type": "string"}}}}}])"));
  const std::string ns = "]<]minimax[>[";
  auto mm = [&](const std::string& k, const std::string& v) {
    return ns + "<" + k + ">" + v + ns + "</" + k + ">";
  };
  expect_parse(ToolCallFormat::MiniMaxXml,
               ns + "<tool_call>\n" + ns + "<invoke name=\"f\">" + mm("s", "3.10") + mm("i", "7") +
                   mm("b", "true") + mm("u", "2") + mm("t", "true") + mm("x", "4") + ns +
                   "</invoke>\n" + ns + "</tool_call>",
               "", {{"f", R"({"s":"3.10","i":7,"b":true,"u":2,"t":"true","x":4})"}}, true, kSteps,
               types);
  expect_parse(ToolCallFormat::Gemma4,
               "<|tool_call>call:f{s:3.10,i:<|\"|>7<|\"|>,b:true,u:<|\"|>2<|\"|>,t:[1, 2],"
               "x:5}<tool_call|>",
               "", {{"f", R"({"s":"3.10","i":7,"b":true,"u":"2","t":"[1, 2]","x":5})"}}, true,
               kSteps, types);
  expect_parse(ToolCallFormat::Pythonic,
               "<|tool_call_start|>[f(s=3.10, i='7', b=True, u=2, t=None, x='y')]"
               "<|tool_call_end|>",
               "", {{"f", R"({"s":"3.10","i":7,"b":true,"u":2,"t":"None","x":"y"})"}}, true, kSteps,
               types);
  // Without the schema: as written.
  expect_parse(ToolCallFormat::Gemma4, "<|tool_call>call:f{s:3.10}<tool_call|>", "",
               {{"f", R"({"s":3.1})"}});
}

// Llama 3.1's built-in tools: <|python_tag|>NAME.call(key="value", ..); code is content.
TEST(ToolCallParse, Llama3BuiltinToolCall) {
  expect_parse(ToolCallFormat::Llama3,
               "<|python_tag|>brave_search.call(query=\"a (b) 'c' \\\" d\", n=2)", "",
               {{"brave_search", "{\"query\":\"a (b) 'c' \\\" d\",\"n\":2}"}});
  expect_content(ToolCallFormat::Llama3, "<|python_tag|>import math\nprint(math.pi)");
  expect_content(ToolCallFormat::Llama3, "<|python_tag|>print(1)");
  expect_content(ToolCallFormat::Llama3, "<|python_tag|>f.call(a=\"x\"]");
}

TEST(ToolCallParse, MoreFormatsMalformedAreContent) {
  const std::string ns = "]<]minimax[>[";
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::Gemma4, "<|tool_call>hello<tool_call|>"},
      {ToolCallFormat::Gemma4, "<|tool_call>call:f{a:b c}<tool_call|>"},
      {ToolCallFormat::Pythonic, "<|tool_call_start|>[f(a=b)]<|tool_call_end|>"},
      {ToolCallFormat::Pythonic, "<|tool_call_start|>[f(a='x')"},
      {ToolCallFormat::MiniMaxXml, ns + "<tool_call>\n" + ns + "<invoke name=\"f\">" + ns + "<a>1" +
                                       ns + "</b>" + ns + "</invoke>\n" + ns + "</tool_call>"},
      {ToolCallFormat::Atem, "to=self<|message|>Thinking about it."},
      {ToolCallFormat::GigaChat, "A function call is a request."},
      {ToolCallFormat::CommandR, "Action: none needed."},
      {ToolCallFormat::Firefunction, "functools are nice"},
  };
  for (const auto& [f, text] : cases) {
    SCOPED_TRACE(text);
    expect_content(f, text);
  }
}

// A block whose closing marker never came and whose second call is cut after its opener is
// broken (the text as it came), not a second call with no arguments (fuzz_tool_calls found it).
TEST(ToolCallParse, CutCallAfterACompleteOneBreaksTheBlock) {
  const std::string text =
      "<tool_call>\n<function=a>\n<parameter=a>\n1\n</parameter>\n</function>\n<function=l>";
  for (size_t step : {size_t{1}, size_t{3}, text.size()}) {
    ToolCallParser p(ToolCallFormat::QwenXml, true);
    for (size_t i = 0; i < text.size(); i += step) p.push(text.substr(i, step));
    p.finish();
    EXPECT_TRUE(p.broken()) << step;
  }
  EXPECT_TRUE(parse_tool_calls(ToolCallFormat::QwenXml, text, true).broken);
}

TEST(ToolCallParse, JsonArgumentTagFormats) {
  expect_parse(ToolCallFormat::Functionary,
               "Sure. <function=get_weather>{\"city\": \"Paris\"}</function>"
               "<function=now>{}</function>",
               "Sure.", {{"get_weather", "{\"city\": \"Paris\"}"}, {"now", "{}"}});
  expect_parse(ToolCallFormat::DeepSeekR1,
               "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
               "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>"
               "function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               "", {{"get_weather", "{\"city\": \"Paris\"}"}, {"now", "{}"}});
  const Message m = stream(ToolCallFormat::KimiK2,
                           "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                           "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
                           "<|tool_calls_section_end|>",
                           3);
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].name, "get_weather");
  EXPECT_EQ(m.calls[0].id, "functions.get_weather:0");  // Kimi's own id, which its template reads
  EXPECT_EQ(m.calls[0].arguments, "{\"city\": \"Paris\"}");
  expect_parse(ToolCallFormat::Functionary, "<function=f>[1]</function>",
               "<function=f>[1]</function>", {});
}

// Solar Open: the model writes each call's id before its name; the id is kept (its template
// matches tool results to calls by it).
TEST(ToolCallParse, SolarCallsKeepTheirIds) {
  const std::string text =
      "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather"
      "<|tool_call:args|>{\"city\": \"Paris\"}<|tool_call:end|><|tool_call:begin|>f6g7h8i9j0"
      "<|tool_call:name|>now<|tool_call:args|>{}<|tool_call:end|><|calls|>";
  expect_parse(ToolCallFormat::Solar, text, "", {{"get_weather", "{\"city\": \"Paris\"}"}, {"now", "{}"}});
  for (size_t step : {size_t{1}, size_t{4}}) {
    const Message m = stream(ToolCallFormat::Solar, "I will check. " + text, step);
    EXPECT_EQ(m.content, "I will check.");
    ASSERT_EQ(m.calls.size(), 2u);
    EXPECT_EQ(m.calls[0].id, "a1b2c3d4e5");
    EXPECT_EQ(m.calls[1].id, "f6g7h8i9j0");
  }
  EXPECT_STREQ(tool_call_format_name(ToolCallFormat::Solar), "solar");
}

TEST(ToolCallParse, HermesCallsContentAndSeveralCalls) {
  const auto H = ToolCallFormat::Hermes;
  expect_parse(H,
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
               "</tool_call>",
               "", {{"get_weather", "{\"city\": \"Paris\"}"}});
  // Content before the calls is kept (the whitespace before a call is not); two calls; the
  // arguments text is the model's, byte for byte, braces and tags inside strings included.
  expect_parse(
      H,
      "Let me look.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"x}<"
      "/tool_call>\\\"\", \"n\": [1, -2.5e3, true, null, {}]}}\n</tool_call>\n"
      "<tool_call>\n{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>\n",
      "Let me look.",
      {{"a", "{\"q\": \"x}</tool_call>\\\"\", \"n\": [1, -2.5e3, true, null, {}]}"}, {"b", "{}"}});
  // Arguments as a string holding JSON, or none at all; a list inside one block (Apriel);
  // the closing tag missing at the end; text after the calls is content.
  expect_parse(H, "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "",
               {{"s", "{\"a\": 1}"}});
  expect_parse(H, "<tool_call>{\"name\": \"now\"}</tool_call>", "", {{"now", "{}"}});
  expect_parse(H,
               "<tool_call>[{\"name\": \"x\", \"arguments\": {}}, {\"name\": \"y\", "
               "\"arguments\": {\"k\": 1}}]</tool_call>",
               "", {{"x", "{}"}, {"y", "{\"k\": 1}"}});
  expect_parse(H,
               "<tool_calls>\n{\"name\": \"x\", \"arguments\": {}}\n{\"name\": \"y\", "
               "\"arguments\": {\"k\": 1}}\n</tool_calls>",
               "", {{"x", "{}"}, {"y", "{\"k\": 1}"}});
  expect_parse(H, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n", "",
               {{"f", "{\"a\": 1}"}});
  expect_parse(H, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nDone.", "Done.",
               {{"f", "{}"}});
}

TEST(ToolCallParse, TextWithoutCallsIsUnchanged) {
  for (auto f : {ToolCallFormat::Hermes, ToolCallFormat::Llama3, ToolCallFormat::Mistral,
                 ToolCallFormat::None}) {
    SCOPED_TRACE(tool_call_format_name(f));
    expect_content(f, "Hello! The weather is nice.\n\n");
    expect_content(f, "  leading and trailing  \n");
    expect_content(f, "a < b and <tool or [TOOL and <|python_t");
    expect_content(f, "caf\xC3\xA9 \xF0\x9F\x98\x80");
    expect_content(f, "");
  }
}

TEST(ToolCallParse, MalformedCallsAreContent) {
  const auto H = ToolCallFormat::Hermes;
  for (const char* bad : {
           "<tool_call>not json</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>",                  // no name
           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",     // name not a string
           "<tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call>",  // arguments a number
           "<tool_call>{\"name\": \"f\", \"arguments\": \"nope\"}</tool_call>",
           "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
           "<tool_call>[]</tool_call>",
           "text <tool_call>",
       })
    expect_content(H, bad);
  // Beyond what a double holds: JSON's grammar allows it, nlohmann-json (and so the calls sent
  // back) does not. Seen whole, it is content (streamed, the call was announced: broken).
  expect_content(H, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1e999}}</tool_call>", {0});
  EXPECT_TRUE(stream(H, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1e999}}", 1).broken);
  // A malformed block, then a good one: the first is content, the second a call.
  expect_parse(H, "<tool_call>oops</tool_call> <tool_call>{\"name\": \"f\"}</tool_call>",
               "<tool_call>oops</tool_call>", {{"f", "{}"}});
}

TEST(ToolCallParse, ACallThatBreaksOffAfterItsStartIsBroken) {
  // The call was announced (name complete, arguments begun), then the text ends or goes wrong:
  // the call's text and everything after it is content, and broken() tells the response
  // builder. Pushed whole, the second is seen to be malformed before anything is announced.
  const char* bad_json = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": x}}</tool_call>";
  expect_content(ToolCallFormat::Hermes, bad_json, {0});
  for (const char* text : {"Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ", bad_json}) {
    SCOPED_TRACE(text);
    for (size_t step : {1, 4}) {
      const Message m = stream(ToolCallFormat::Hermes, text, step);
      EXPECT_TRUE(m.broken);
      ASSERT_EQ(m.calls.size(), 1u);
      EXPECT_EQ(m.calls[0].name, "f");
      EXPECT_EQ(m.content, text);
    }
  }
  // A call that was complete stays a call when a later one breaks off.
  const Message m = stream(ToolCallFormat::Hermes,
                           "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\", "
                           "\"arguments\": {\"x",
                           1);
  EXPECT_TRUE(m.broken);
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[0].arguments, "{}");
  EXPECT_EQ(m.content, "<tool_call>{\"name\": \"b\", \"arguments\": {\"x");
}

TEST(ToolCallParse, Llama3JsonAndPythonTag) {
  const auto L = ToolCallFormat::Llama3;
  expect_parse(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
               {{"get_weather", "{\"city\": \"Paris\"}"}});
  expect_parse(L, "\n<|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"parameters\": {}}",
               "", {{"f", "{}"}});
  expect_parse(L,
               "{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": "
               "{\"y\": [2]}}",
               "", {{"a", "{\"x\": 1}"}, {"b", "{\"y\": [2]}"}});
  // A JSON answer is no call: another first key, or a "name" without parameters.
  expect_content(L, "{\"answer\": 42}");
  expect_content(L, "{\"name\": \"Bob\", \"age\": 3}");
  expect_content(L, "The answer: {\"name\": \"f\", \"parameters\": {}}");  // calls open answers
  expect_content(L, "<|python_tag|>print(1)");
}

TEST(ToolCallParse, MistralListAndNameArgs) {
  const auto M = ToolCallFormat::Mistral;
  // Nemo writes its own id after the arguments: used when the call is seen whole; a stream has
  // announced the call by then, with an id of the length Mistral's template requires back.
  const char* nemo =
      "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abc123XYZ\"}, "
      "{\"name\": \"g\", \"arguments\": {}}]";
  const Message whole = stream(M, nemo, 0);
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.calls[0].id, "abc123XYZ");
  const Message m = stream(M, nemo, 1);
  ASSERT_EQ(m.calls.size(), 2u);
  for (const ToolCall& c : m.calls)
    EXPECT_TRUE(std::regex_match(c.id, std::regex("[A-Za-z0-9]{9}"))) << c.id;
  expect_parse(M, "Sure.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}]", "Sure.",
               {{"f", "{\"a\": 1}"}});
  // Devstral / Ministral 3: [TOOL_CALLS]name[ARGS]{...} per call, [CALL_ID] optional.
  expect_parse(M, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]t[ARGS]{}", "",
               {{"get_weather", "{\"city\": \"Paris\"}"}, {"t", "{}"}});
  const Message id = stream(M, "[TOOL_CALLS]f[CALL_ID]Q1w2E3r4T[ARGS]{}", 1);
  ASSERT_EQ(id.calls.size(), 1u);
  EXPECT_EQ(id.calls[0].id, "Q1w2E3r4T");
  expect_content(M, "[TOOL_CALLS] nonsense");
  expect_content(M, "[TOOL_CALLS]f(x)");
}

TEST(ToolCallParse, ParallelFalseKeepsTheFirstCall) {
  expect_parse(ToolCallFormat::Hermes,
               "<tool_call>{\"name\": \"a\"}</tool_call>\n<tool_call>{\"name\": \"b\", "
               "\"arguments\": {\"z\": 0}}</tool_call>",
               "", {{"a", "{}"}}, /*parallel=*/false);
  expect_parse(ToolCallFormat::Mistral,
               "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
               "\"arguments\": {}}]",
               "", {{"a", "{}"}}, false);
}

TEST(ToolCallParse, ArgumentsStreamAsTheyArrive) {
  // The arguments of a call in progress go out before the call is complete, and a possible
  // marker is held back, not sent as content.
  ToolCallParser p(ToolCallFormat::Hermes, true);
  std::vector<ToolCallDelta> d = p.push("Checking <tool_");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "Checking");
  EXPECT_TRUE(p.push("call>\n{\"name\": \"get_we").empty());
  d = p.push("ather\", \"arguments\": {\"ci");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].kind, Kind::Begin);
  EXPECT_EQ(d[0].text, "get_weather");
  EXPECT_TRUE(std::regex_match(d[0].id, std::regex("call_[A-Za-z0-9]{24}"))) << d[0].id;
  EXPECT_EQ(d[1].kind, Kind::Arguments);
  EXPECT_EQ(d[1].text, "{\"ci");
  d = p.push("ty\": \"Paris\"}}\n</tool_call>");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "ty\": \"Paris\"}");
  EXPECT_TRUE(p.finish().empty());
  EXPECT_EQ(p.content(), "Checking");
}

}  // namespace
}  // namespace minfer::server
