// minfer-fuzz-libs: nlohmann_json::nlohmann_json
// minfer-fuzz-sources: src/server/reasoning.cpp src/server/tool_calls.cpp
// minfer-fuzz-sources: src/server/tool_call_formats.cpp src/server/json_scan.cpp
// minfer-fuzz-sources: src/server/tool_call_formats_more.cpp
// libFuzzer target for the thinking splitter (src/server/reasoning.h) and the tool-call parser
// behind it, as a chat answer of a reasoning model is read: the model's text, which nobody
// controls.
//
// Input: byte 0 picks the syntax (bits 0-2 and 6, mod 10: none, then the nine detected ones),
// whether the prompt opened the thinking (bit 3) and the tool-call format the content goes to
// (bits 4-5: none, hermes, llama3, mistral); byte 1 the size of the pieces the text arrives in
// (1..64, 0: whole); the rest is the text, skipped unless it is valid UTF-8.
// Checks: the pieces concatenate to what the splitter reports and to the whole text's split;
// with no syntax, or when the thinking is not opened and the text does not start with the open
// marker (nor the content's opening marker) and holds no trailer, the content is the text byte
// for byte and there is no reasoning; reasoning and content are never longer than the text
// together; the reasoning never holds the close marker (the first one ends it); with keep_text
// (deepseek-legacy) the content is the text byte for byte and the reasoning the same; the
// content read by the tool-call parser in pieces gives the calls of the whole content. The
// phase the slot's grammar gate follows (server/slot.h) only moves forward (Start, Thinking,
// Answer); content comes in the answer only, and a push's content ends where the text pushed
// so far ends (the gate feeds it to the grammar; not checked for Kimi K3 and Solar Open, whose
// content header and trailers are dropped); thought() says whether the thinking was entered.
// A crash, a sanitizer report or a failed check is a finding.
//
// Seeds (MINFER_FUZZ_SEED_DIR): thinking then content, a call inside and after the thinking,
// cut thinking, per syntax.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "fuzz_utf8.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace {

using namespace minfer;
using namespace minfer::server;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "reasoning_fuzz: %s\n", what);
  std::abort();
}

ReasoningSyntax syntax_of(int i) {
  static const char* const kTeach[] = {
      "",
      "<think></think>",
      "[THINK][/THINK]",
      "<mm:think></mm:think>",
      "<|START_THINKING|><|END_THINKING|>",
      "<|channel>thought<channel|>",
      "Here are my reasoning steps:[BEGIN FINAL RESPONSE]",
      "<|begin|>assistant<|think|>",
      "{{ open_tag('think') }}",
      "<|channel|>analysis<|message|>",
  };
  return detect_reasoning_syntax(kTeach[i % 10]);
}

void write_seeds(const std::string& dir) {
  using namespace std::string_literals;
  const std::string seeds[] = {
      "\x01\x00<think>\nSo 2 + 2 = 4.\n</think>\n\nIt is 4."s,
      "\x19\x03<think>maybe <tool_call>{\"name\": \"f\"}</tool_call></think>\n<tool_call>"
      "{\"name\": \"g\", \"arguments\": {}}</tool_call>"s,
      "\x09\x01Still thinking </thi"s,
      "\x02\x05[THINK]a[/THINK]b [THINK]c"s,
      "\x0e\x02 thought.\n[BEGIN FINAL RESPONSE]\nAnswer"s,
      "\x00\x00<think>none</think>"s,
      "\x47\x03<|think|>Add.<|end|><|begin|>assistant<|content|>4<|end|>"s,
      "\x48\x02Hmm<|close|>think<|sep|><|open|>response<|sep|>Yes<|close|>response<|sep|>"s,
  };
  int i = 0;
  for (const std::string& s : seeds) fuzz::write_seed(dir, "seed" + std::to_string(i++), s);
}

bool starts_with_open(const ReasoningSyntax& s, std::string_view text) {
  const size_t i = text.find_first_not_of(" \t\n\r");
  return i != std::string_view::npos &&
         (text.substr(i).starts_with(s.open) ||
          (!s.content_open.empty() && text.substr(i).starts_with(s.content_open)));
}

bool has_trailer(const ReasoningSyntax& s, std::string_view text) {
  for (std::string_view t : s.trailers)
    if (!t.empty() && text.find(t) != std::string_view::npos) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const ReasoningSyntax syntax = syntax_of((data[0] & 7) | ((data[0] >> 3) & 8));
  const bool inside = (data[0] & 8) != 0;
  const auto format = static_cast<ToolCallFormat>((data[0] >> 4) & 3);
  const size_t step = data[1] % 65;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (!fuzz::valid_utf8(text)) return 0;

  ReasoningSplitter sp(syntax, inside);
  const bool plain = syntax.after_close.empty() && syntax.content_open.empty() &&
                     std::all_of(syntax.trailers.begin(), syntax.trailers.end(),
                                 [](std::string_view t) { return t.empty(); });
  ToolCallParser tools(format, true);
  std::string reasoning, content;
  const size_t n = step == 0 ? std::max<size_t>(text.size(), 1) : step;
  using Phase = ReasoningSplitter::Phase;
  Phase phase = sp.phase();
  bool was_thinking = false;
  for (size_t i = 0; i < text.size(); i += n) {
    ReasoningPiece p = sp.push(text.substr(i, n));
    if (sp.phase() < phase) finding("the phase went back");
    phase = sp.phase();
    was_thinking |= phase == Phase::Thinking;
    // Syntaxes with markup in the answer (Kimi K3, Solar Open: a content header and trailers
    // the splitter holds back and drops wherever they are) give content that need not end
    // where the text does: only its phase is checked.
    const std::string_view so_far = text.substr(0, std::min(text.size(), i + n));
    if (!p.content.empty() &&
        (phase != Phase::Answer || (plain && !so_far.ends_with(p.content))))
      finding("content outside the answer, or not up to the end of the text");
    if (was_thinking && !sp.thought()) finding("thought() is wrong");
    reasoning += p.reasoning;
    content += p.content;
    tools.push(p.content);
  }
  ReasoningPiece p = sp.finish();
  reasoning += p.reasoning;
  content += p.content;
  tools.push(p.content);
  tools.finish();
  if (!sp.push("more").content.empty() || !sp.finish().reasoning.empty())
    finding("output after finish()");

  if (reasoning != sp.reasoning() || content != sp.content())
    finding("pieces differ from reasoning() / content()");
  const ReasoningPiece whole = split_reasoning(syntax, inside, text);
  if (whole.reasoning != reasoning || whole.content != content)
    finding("pieces and whole text differ");
  if (reasoning.size() + content.size() > text.size()) finding("more text out than in");
  if (!syntax.empty() && reasoning.find(syntax.close) != std::string::npos)
    finding("the reasoning holds the close marker");
  if ((syntax.empty() ||
       (!inside && !starts_with_open(syntax, text) && !has_trailer(syntax, text))) &&
      (content != text || !reasoning.empty()))
    finding("text without thinking changed");
  // deepseek-legacy: the same reasoning, the text as content.
  ReasoningSplitter legacy(syntax, inside, true);
  std::string legacy_reasoning, legacy_content;
  for (size_t i = 0; i < text.size(); i += n) {
    ReasoningPiece q = legacy.push(text.substr(i, n));
    legacy_reasoning += q.reasoning;
    legacy_content += q.content;
  }
  ReasoningPiece q = legacy.finish();
  legacy_reasoning += q.reasoning;
  legacy_content += q.content;
  if (legacy_content != text || legacy_reasoning != reasoning)
    finding("keep_text changed the text or the reasoning");

  const ParsedToolCalls calls = parse_tool_calls(format, content, true);
  if (!tools.broken() && !calls.broken) {
    if (calls.calls.size() != tools.calls().size()) finding("calls differ, pieces vs whole");
    for (size_t i = 0; i < calls.calls.size(); ++i)
      if (calls.calls[i].name != tools.calls()[i].name ||
          calls.calls[i].arguments != tools.calls()[i].arguments)
        finding("calls differ, pieces vs whole");
  }
  return 0;
}
