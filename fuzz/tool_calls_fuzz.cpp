// minfer-fuzz-libs: nlohmann_json::nlohmann_json
// minfer-fuzz-sources: src/server/tool_calls.cpp src/server/tool_call_formats.cpp src/server/json_scan.cpp
// minfer-fuzz-sources: src/server/tool_call_formats_more.cpp
// libFuzzer target for the tool-call parser (src/server/tool_calls.h): the model's text, which
// nobody controls, read for calls as a chat answer is generated.
//
// Input: byte 0 picks the format (low 5 bits mod kFormats, ToolCallFormat's order: none,
// hermes, llama3, mistral, qwen_xml, functionary, deepseek_r1, deepseek_dsml, glm, kimi_k2,
// firefunction, granite, command_r, command_r7b, gigachat, minimax_xml, gemma4, pythonic,
// atem, harmony (text stays content here: fuzz/harmony_fuzz.cpp reads it), solar, kimi_k3),
// parallel
// (bit 5 clear) and whether XML parameters are typed by a fixed tools list (bit 6); byte 1 the
// size of the pieces the text arrives in (1..64, 0: whole); the rest is the text, skipped
// unless it is valid UTF-8 (generated text always is: server/text_stream.h).
// Checks: the deltas describe the parser's own message (content, calls in order, each Begin
// before its arguments); a text in which no call was announced comes out byte for byte as
// content; unless broken(), every call's arguments is a JSON object and the text read whole
// gives the same content and calls; a call never starts twice; typed, a string parameter's
// value is a string. A crash, a sanitizer report or a failed check is a finding.
//
// Seeds (MINFER_FUZZ_SEED_DIR): one call, several, content + calls, malformed ones, per format.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "fuzz_utf8.h"
#include "server/tool_calls.h"

namespace {

using namespace minfer;
using namespace minfer::server;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "tool_calls_fuzz: %s\n", what);
  std::abort();
}

void write_seeds(const std::string& dir) {
  using namespace std::string_literals;
  const std::string seeds[] = {
      "\x01\x00"
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}\n</tool_call>"s,
      "\x01\x03"
      "Hi.\n<tool_call>{\"name\": \"a\"}</tool_call>\n<tool_call>[{\"name\": \"b\", "
      "\"arguments\": \"{}\"}]</tool_call> end"s,
      "\x02\x01"
      "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": -1.5e3}}; "
      "{\"type\": \"function\", \"name\": \"g\", \"parameters\": {}}"s,
      "\x03\x02"
      "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"abcdefghi\"}]"s,
      "\x03\x05"
      "ok[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{\"q\": \"\\u00e9\"}[TOOL_CALLS]g[ARGS]{}"s,
      "\x21\x01"
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": x}}</tool_call>"s,
      "\x04\x03"
      "ok\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\nx y\n"
      "</parameter>\n</function>\n</tool_call>"s,
      "\x05\x02"
      "<function=f>{\"a\": [1]}</function><function=g>{}</function>"s,
      "\x06\x04"
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n"
      "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"s,
      "\x07\x05"
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
      "string=\"false\">[1]</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"s,
      "\x08\x01"
      "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>b</arg_value>\n</tool_call>"s,
      "\x09\x06"
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
      "{}<|tool_call_end|><|tool_calls_section_end|>"s,
      "\x14\x03"
      "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>f<|tool_call:args|>{\"a\": 1}"
      "<|tool_call:end|><|tool_call:begin|>x<|tool_call:name|>g<|tool_call:args|>{}"
      "<|tool_call:end|><|calls|>"s,
      "\x00\x00"
      "plain text <tool_call> [TOOL_CALLS]"s,
      "\x44\x03"
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n"
      "</parameter>\n<parameter=n>\nnull\n</parameter>\n</function>\n</tool_call>"s,
      "\x48\x02"
      "<tool_call>f<arg_key>b</arg_key><arg_value>x</arg_value><arg_key>o</arg_key>"
      "<arg_value>{\"k\": [1]}</arg_value></tool_call>"s,
      "\x0a\x03"
      "ok functools[{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", "
      "\"arguments\": \"{}\"}]"s,
      "\x0b\x02"
      "<|tool_call|>[{\"name\": \"f\", \"arguments\": {}}]"s,
      "\x0c\x04"
      "Action:\n```json\n[\n    {\"tool_name\": \"f\", \"parameters\": {\"q\": [1]}}\n]```"s,
      "\x0d\x05"
      "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}}]"
      "<|END_ACTION|>"s,
      "\x0e\x01"
      "hi<|message_sep|>\n\nfunction call<|role_sep|>\n{\"name\": \"f\", \"arguments\": {}}"s,
      "\x0f\x03"
      "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"f\">]<]minimax[>[<a>1]<]minimax[>["
      "</a>]<]minimax[>[<o>]<]minimax[>[<item>x]<]minimax[>[</item>]<]minimax[>[</o>]<]minimax["
      ">[</invoke>\n]<]minimax[>[</tool_call>"s,
      "\x10\x02"
      "<|tool_call>call:f{a:<|\"|>x, y<|\"|>,b:[1,{c:true}]}<tool_call|><|tool_call>call:g{}"
      "<tool_call|>"s,
      "\x11\x04"
      "<|tool_call_start|>[f(a='x\\'y', b=[1, 2], c={\"k\": None}), g()]<|tool_call_end|>"s,
      "\x12\x03"
      " to=f<|message|><atem:function_calls>\n<atem:invoke name=\"f\">\n<atem:parameter "
      "name=\"a\">1</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|><|start|>"
      "assistant to=g<|message|><atem:function_calls>\n<atem:invoke name=\"g\">\n"
      "</atem:invoke>\n</atem:function_calls>"s,
      "\x55\x03"
      "ok<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"a\" "
      "type=\"number\"<|sep|>3<|close|>argument<|sep|><|open|>argument key=\"o\" "
      "type=\"object\"<|sep|>{\"k\": 1}<|close|>argument<|sep|><|close|>call<|sep|><|open|>call "
      "tool=\"g\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>{}<|close|>json<|sep|>"
      "<|close|>call<|sep|><|close|>tools<|sep|>"s,
      "\x4f\x02"
      "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"f\">]<]minimax[>[<a>3]<]minimax[>["
      "</a>]<]minimax[>[<b>x]<]minimax[>[</b>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"s,
      "\x50\x01"
      "<|tool_call>call:f{a:3,b:<|\"|>4<|\"|>,n:null}<tool_call|>"s,
      "\x51\x04"
      "<|tool_call_start|>[f(a=3, b='4', n=None)]<|tool_call_end|>"s,
  };
  int i = 0;
  for (const std::string& s : seeds) fuzz::write_seed(dir, "seed" + std::to_string(i++), s);
}

// f: a string, b an integer, o an object, n a string or null.
const ParamTypes& fuzz_types() {
  static const ParamTypes t(nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
     "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "o": {"type": "object"},
                    "n": {"type": ["string", "null"]}}}}}])"));
  return t;
}

struct Seen {
  std::string content;
  std::vector<ToolCall> calls;
};

void take(const std::vector<ToolCallDelta>& deltas, Seen& s) {
  for (const ToolCallDelta& d : deltas) {
    switch (d.kind) {
      case ToolCallDelta::Kind::Content:
        if (d.text.empty()) finding("empty content delta");
        s.content += d.text;
        break;
      case ToolCallDelta::Kind::Begin:
        if (d.index != s.calls.size() || d.id.empty() || d.text.empty())
          finding("a call starts out of order or without id / name");
        s.calls.push_back({d.id, d.text, {}});
        break;
      case ToolCallDelta::Kind::Arguments:
        if (d.index >= s.calls.size()) finding("arguments before their call's start");
        s.calls[d.index].arguments += d.text;
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  constexpr int kFormats = static_cast<int>(ToolCallFormat::KimiK3) + 1;
  const auto format = static_cast<ToolCallFormat>((data[0] & 0x1f) % kFormats);
  const bool parallel = (data[0] & 0x20) == 0;
  const ParamTypes types = (data[0] & 0x40) != 0 ? fuzz_types() : ParamTypes();
  const size_t step = data[1] % 65;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (!fuzz::valid_utf8(text)) return 0;

  ToolCallParser p(format, parallel, types);
  Seen seen;
  const size_t n = step == 0 ? std::max<size_t>(text.size(), 1) : step;
  for (size_t i = 0; i < text.size(); i += n) take(p.push(text.substr(i, n)), seen);
  take(p.finish(), seen);
  if (!p.push("more").empty() || !p.finish().empty()) finding("output after finish()");

  if (seen.content != p.content()) finding("content deltas differ from content()");
  if (seen.calls.size() != p.calls().size()) finding("Begin deltas differ from calls()");
  for (size_t i = 0; i < seen.calls.size(); ++i)
    if (seen.calls[i].arguments != p.calls()[i].arguments || seen.calls[i].id != p.calls()[i].id)
      finding("argument deltas differ from calls()");
  if (seen.calls.empty() && !p.broken() && seen.content != text)
    finding("text without calls changed");
  if (!parallel && seen.calls.size() > 1) finding("parallel = false gave several calls");
  if (p.broken()) return 0;
  constexpr size_t npos = std::string_view::npos;
  for (const ToolCall& c : seen.calls) {
    const auto args = nlohmann::ordered_json::parse(c.arguments, nullptr, false);
    if (!args.is_object()) finding("arguments are not a JSON object");
    // The XML-parameter formats and those converted to JSON type parameters by the schema (a
    // JSON-arguments format, or Kimi K3's JSON block, carries the model's own types).
    const bool xml = format == ToolCallFormat::QwenXml || format == ToolCallFormat::Glm ||
                     format == ToolCallFormat::DeepSeekDsml ||
                     (format == ToolCallFormat::KimiK3 && text.find("<|open|>json") == npos) ||
                     format == ToolCallFormat::Atem || format == ToolCallFormat::MiniMaxXml ||
                     format == ToolCallFormat::Gemma4 || format == ToolCallFormat::Pythonic;
    if (xml && c.name == "f" && types.of("f", "a") != 0 && args.is_object())
      for (const auto& [k, v] : args.items())
        if (k == "a" && !v.is_string()) finding("a string parameter is not a string");
  }
  const ParsedToolCalls whole = parse_tool_calls(format, text, parallel, types);
  if (whole.broken) return 0;
  if (whole.content != seen.content || whole.calls.size() != seen.calls.size())
    finding("pieces and whole text differ");
  for (size_t i = 0; i < seen.calls.size(); ++i)
    if (whole.calls[i].name != seen.calls[i].name ||
        whole.calls[i].arguments != seen.calls[i].arguments)
      finding("pieces and whole text give other calls");
  return 0;
}
