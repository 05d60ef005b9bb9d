// minfer-fuzz-libs: nlohmann_json::nlohmann_json
// minfer-fuzz-sources: src/server/harmony.cpp src/server/json_scan.cpp
// minfer-fuzz-sources: src/server/tool_calls.cpp src/server/tool_call_formats.cpp
// minfer-fuzz-sources: src/server/tool_call_formats_more.cpp
// libFuzzer target for gpt-oss's harmony parser (src/server/harmony.h): the model's text, which
// nobody controls, read into reasoning, content and tool calls as a chat answer is generated.
//
// Input: byte 0 picks the mode (mod 3: split, inline, both), whether a recipient makes a call
// (bit 2: tools) and parallel (bit 3 clear); byte 1 the size of the pieces the text arrives in
// (1..64, 0: whole); the rest is the text, skipped unless it is valid UTF-8.
// Checks: the deltas describe the parser's own message (reasoning, content, calls in order,
// each Begin before its arguments); the pieces give what the whole text gives; unless broken,
// every call's arguments is a JSON object; in split mode reasoning and content are never longer
// than the text and text without "<|" or " to=" is content byte for byte; in inline mode
// without tools the content is the text byte for byte; both mode's content is inline's and
// its reasoning split's. A crash, a sanitizer report or a failed check is a finding.
//
// Seeds (MINFER_FUZZ_SEED_DIR): analysis then final, calls in both header orders, cut and
// broken calls, plain text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_utf8.h"
#include "fuzz_util.h"
#include "server/harmony.h"

namespace {

using namespace minfer;
using namespace minfer::server;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "harmony_fuzz: %s\n", what);
  std::abort();
}

void write_seeds(const std::string& dir) {
  using namespace std::string_literals;
  const std::string seeds[] = {
      "\x04\x00<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Answer."s,
      "\x04\x03<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.f <|constrain|>json<|message|>{\"a\": [1, \"<|end|>\"]}<|call|>"s,
      "\x05\x07 to=functions.g<|channel|>commentary json<|message|>{}<|call|><|start|>assistant"
      "<|channel|>commentary to=functions.h<|constrain|><|message|>{\"b\": {}}<|call|>"s,
      "\x06\x01<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1"s,
      "\x04\x02<|channel|>commentary to=functions.f json<|message|>not json<|call|>"s,
      "\x00\x00Plain answer without channels."s,
      "\x01\x05<|channel|>analysis<|message|>cut <|en"s,
  };
  int i = 0;
  for (const std::string& s : seeds) fuzz::write_seed(dir, "seed" + std::to_string(i++), s);
}

struct Message {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  bool broken = false;
};

Message run(HarmonyReasoning mode, bool tools, bool parallel, std::string_view text, size_t step) {
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
          if (d.index != m.calls.size()) finding("a call begins out of order");
          m.calls.push_back({d.id, d.text, {}});
          break;
        case HarmonyDelta::Kind::Arguments:
          if (d.index >= m.calls.size()) finding("arguments before their call");
          m.calls[d.index].arguments += d.text;
          break;
      }
    }
  };
  const size_t n = step == 0 ? std::max<size_t>(text.size(), 1) : step;
  for (size_t i = 0; i < text.size(); i += n) take(p.push(text.substr(i, n)));
  take(p.finish());
  if (!p.push("more").empty() || !p.finish().empty()) finding("output after finish()");
  if (m.reasoning != p.reasoning() || m.content != p.content())
    finding("deltas differ from reasoning() / content()");
  if (m.calls.size() != p.calls().size()) finding("deltas differ from calls()");
  for (size_t i = 0; i < m.calls.size(); ++i)
    if (m.calls[i].name != p.calls()[i].name || m.calls[i].arguments != p.calls()[i].arguments ||
        m.calls[i].id != p.calls()[i].id)
      finding("deltas differ from calls()");
  m.broken = p.broken();
  return m;
}

bool same(const Message& a, const Message& b) {
  if (a.reasoning != b.reasoning || a.content != b.content || a.broken != b.broken ||
      a.calls.size() != b.calls.size())
    return false;
  // A broken call (the last) was sent as far as its text went, which depends on the pieces.
  for (size_t i = 0; i < a.calls.size(); ++i)
    if (a.calls[i].name != b.calls[i].name ||
        (a.calls[i].arguments != b.calls[i].arguments && !(a.broken && i + 1 == a.calls.size())))
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto mode = static_cast<HarmonyReasoning>((data[0] & 3) % 3);
  const bool tools = (data[0] & 4) != 0;
  const bool parallel = (data[0] & 8) == 0;
  const size_t step = data[1] % 65;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (!fuzz::valid_utf8(text)) return 0;

  const Message m = run(mode, tools, parallel, text, step);
  if (!same(m, run(mode, tools, parallel, text, 0))) finding("pieces and whole text differ");
  if (!parallel && m.calls.size() > 1) finding("more than one call without parallel");
  if (!tools && !m.calls.empty()) finding("a call without tools");
  for (size_t i = 0; i < m.calls.size(); ++i) {
    if (m.broken && i + 1 == m.calls.size()) break;  // the broken call is the last
    const nlohmann::json j = nlohmann::json::parse(m.calls[i].arguments, nullptr, false);
    if (!j.is_object()) finding("a call's arguments are no JSON object");
  }
  if (mode == HarmonyReasoning::Split) {
    if (m.reasoning.size() + m.content.size() > text.size()) finding("more text out than in");
    if (text.find("<|") == std::string_view::npos && text.find("to=") == std::string_view::npos &&
        (m.content != text || !m.reasoning.empty()))
      finding("text without harmony changed");
  }
  if (mode == HarmonyReasoning::Inline && !tools && (m.content != text || !m.reasoning.empty()))
    finding("inline mode without tools changed the text");
  if (mode == HarmonyReasoning::Both) {
    const Message in = run(HarmonyReasoning::Inline, tools, parallel, text, step);
    const Message split = run(HarmonyReasoning::Split, tools, parallel, text, step);
    if (m.content != in.content || m.reasoning != split.reasoning)
      finding("both mode is not inline's content and split's reasoning");
  }
  return 0;
}
