// The per-format scans of a call block (tool_call_scan.h), format detection and markers.
#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "server/tool_call_scan.h"

namespace minfer::server {

namespace detail {

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";

bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_name_char(char c) {
  return is_alnum(c) || c == '_' || c == '-' || c == '.' || c == ':';
}

// A call object at s[i] == '{'. Llama's (`need_args`) must start with "name" (or "type"), so
// a JSON answer that is no call is told apart at its first key. Resumes at the last key begun.
// `name_key`: the member that names the function ("name"; Cohere's "tool_name").
CallScan scan_call_object(std::string_view s, size_t at, bool need_args, ScanMemo& memo,
                          std::string_view name_key) {
  const auto [it, fresh] = memo.calls.try_emplace(at);
  ScanMemo::CallResume& r = it->second;
  if (fresh) {
    r.i = at;
    r.c.begin = at;
  }
  if (r.c.status != Scan::More) return r.c;
  CallScan c = r.c;
  size_t i = r.i;
  auto stop = [&](Scan st) {
    c.status = st;
    if (st != Scan::More) r.c = c;  // final: the text cannot change it
    return c;
  };
  for (;;) {
    r.i = i;  // a checkpoint before each key
    r.c = c;
    const bool first = r.first;
    i = skip_ws(s, i + 1);  // past '{' or ','
    if (i >= s.size()) return stop(Scan::More);
    if (first && s[i] == '}') {
      c.end = i + 1;
      return stop(valid_call(c, need_args, s) ? Scan::Done : Scan::Bad);
    }
    size_t key_end = 0;
    std::string key;
    if (s[i] != '"') return stop(Scan::Bad);
    if (Scan k = memo.value(s, i, &key_end); k != Scan::Done) return stop(k);
    if (!decode_string(s.substr(i, key_end - i), &key)) return stop(Scan::Bad);
    if (need_args && first && key != name_key && key != "type") return stop(Scan::Bad);
    i = skip_ws(s, key_end);
    if (i >= s.size()) return stop(Scan::More);
    if (s[i] != ':') return stop(Scan::Bad);
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return stop(Scan::More);
    const bool args = (key == "arguments" || key == "parameters") && !c.args_seen;
    size_t value_end = 0;
    const Scan v = memo.value(s, i, &value_end);
    if (args) {
      c.args_seen = true;
      c.args_kind = s[i];
      c.args_begin = i;
      c.args_done = v == Scan::Done;
      c.args_end = c.args_done ? value_end : s.size();
      if (c.args_done && c.args_kind == '"' &&
          !decode_string(s.substr(i, value_end - i), &c.args_string))
        return stop(Scan::Bad);
    }
    if (v != Scan::Done) return stop(v);
    if (key == name_key && !c.has_name) {
      if (s[i] != '"' || !decode_string(s.substr(i, value_end - i), &c.name))
        return stop(Scan::Bad);
      c.has_name = true;
    } else if (key == "id" && s[i] == '"') {
      decode_string(s.substr(i, value_end - i), &c.id);
    }
    i = skip_ws(s, value_end);
    if (i >= s.size()) return stop(Scan::More);
    if (s[i] == '}') {
      c.end = i + 1;
      return stop(valid_call(c, need_args, s) ? Scan::Done : Scan::Bad);
    }
    if (s[i] != ',') return stop(Scan::Bad);
    r.first = false;
  }
}

}  // namespace

BlockScan& block_stop(BlockScan& b, Scan st) {
  b.status = st;
  return b;
}

bool scan_objects(std::string_view s, size_t& i, bool need_args, BlockScan& b, ScanMemo& memo,
                  std::string_view name_key) {
  const bool list = s[i] == '[';
  if (list) {
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return block_stop(b, Scan::More), false;
  }
  for (;;) {
    if (s[i] != '{') return block_stop(b, Scan::Bad), false;
    b.calls.push_back(scan_call_object(s, i, need_args, memo, name_key));
    if (b.calls.back().status != Scan::Done) return block_stop(b, b.calls.back().status), false;
    i = b.calls.back().end;
    if (!list) return true;
    i = skip_ws(s, i);
    if (i >= s.size()) return block_stop(b, Scan::More), false;
    if (s[i] == ']') {
      ++i;
      return true;
    }
    if (s[i] != ',') return block_stop(b, Scan::Bad), false;
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return block_stop(b, Scan::More), false;
  }
}

namespace {

// <tool_call> {call} or [{call}, ...] </tool_call>; a missing closing tag ends the block with
// its last call.
// Apriel 1.5 / 1.6 write <tool_calls>[...]</tool_calls>, MiniMax M1 <tool_calls> and an object
// per line.
BlockScan scan_hermes(std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  const Scan plural = match(s, k, "<tool_calls>");
  if (plural == Scan::More) return block_stop(b, Scan::More);
  const bool many = plural == Scan::Done;
  if (!many && match(s, k, kHermesOpen) != Scan::Done)
    return block_stop(b, match(s, k, kHermesOpen));
  size_t i = skip_ws(s, k + kHermesOpen.size() + (many ? 1 : 0));
  if (i >= s.size()) return block_stop(b, Scan::More);
  if (!scan_objects(s, i, false, b, memo)) return b;
  // MiniMax M1: one object per line inside <tool_calls>.
  for (size_t j = skip_ws(s, i); many && j < s.size() && s[j] == '{'; j = skip_ws(s, i)) {
    i = j;
    if (!scan_objects(s, i, false, b, memo)) return b;
  }
  b.end = i;
  const size_t j = skip_ws(s, i);
  const std::string_view close = many ? "</tool_calls>" : kHermesClose;
  const Scan m = match(s, j, close);
  if (m == Scan::Done) b.end = j + close.size();
  b.calls_done = true;
  return block_stop(b, m == Scan::More ? Scan::More : Scan::Done);
}

// <|python_tag|>? {call} (; or whitespace) {call} ...
BlockScan scan_llama3(std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  size_t i = k;
  const bool tag = match(s, i, kPythonTag) == Scan::Done;
  if (tag) i += kPythonTag.size();
  i = skip_ws(s, i);
  if (i >= s.size()) return block_stop(b, Scan::More);
  if (tag && s[i] != '{') {
    scan_llama_builtin(s, i, b, memo);
    return b;
  }
  for (;;) {
    if (!scan_objects(s, i, true, b, memo)) return b;
    b.end = i;
    while (i < s.size() && (is_ws(s[i]) || s[i] == ';')) ++i;
    if (i >= s.size() || s[i] != '{') {
      b.calls_done = true;
      return block_stop(b, i >= s.size() ? Scan::More : Scan::Done);
    }
  }
}

// JSON arguments at s[j] (not whitespace) into c; the value's scan status.
Scan scan_args_value(std::string_view s, size_t j, CallScan& c, ScanMemo& memo) {
  size_t value_end = 0;
  const Scan r = memo.value(s, j, &value_end);
  c.args_seen = true;
  c.args_kind = s[j];
  c.args_begin = j;
  c.args_done = r == Scan::Done;
  c.args_end = c.args_done ? value_end : s.size();
  if (r == Scan::Done && c.args_kind == '"' &&
      !decode_string(s.substr(j, value_end - j), &c.args_string))
    return Scan::Bad;
  return r;
}

// [TOOL_CALLS] [{call}, ...]  or  [TOOL_CALLS]name([CALL_ID]id)?[ARGS]{...}
BlockScan scan_mistral(std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  size_t i = skip_ws(s, k + kMistralCalls.size());
  if (i >= s.size()) return block_stop(b, Scan::More);
  if (s[i] == '[') {
    if (!scan_objects(s, i, false, b, memo)) return b;
    b.end = i;
    return block_stop(b, Scan::Done);
  }
  CallScan& c = b.calls.emplace_back();
  c.begin = k;
  size_t j = i;
  while (j < s.size() && (is_alnum(s[j]) || s[j] == '_' || s[j] == '-' || s[j] == '.')) ++j;
  if (j >= s.size()) return block_stop(b, Scan::More);
  if (j == i) return block_stop(b, Scan::Bad);
  c.name.assign(s.substr(i, j - i));
  if (Scan m = match(s, j, kMistralCallId); m != Scan::Bad) {
    if (m == Scan::More) return block_stop(b, Scan::More);
    const size_t id_at = j += kMistralCallId.size();
    while (j < s.size() && is_alnum(s[j])) ++j;
    if (j >= s.size()) return block_stop(b, Scan::More);
    c.id.assign(s.substr(id_at, j - id_at));
  }
  if (Scan m = match(s, j, kMistralArgs); m != Scan::Done) return block_stop(b, m);
  c.has_name = true;
  j = skip_ws(s, j + kMistralArgs.size());
  if (j >= s.size()) return block_stop(b, Scan::More);
  if (Scan r = scan_args_value(s, j, c, memo); r != Scan::Done) return block_stop(b, c.status = r);
  c.end = b.end = c.args_end;
  c.status = valid_call(c, true, s) ? Scan::Done : Scan::Bad;
  return block_stop(b, c.status);
}

// ---- Tagged formats: markers around a name and JSON arguments or XML-style parameters ----

}  // namespace

const Tagged* tagged_spec(ToolCallFormat f) {
  static const Tagged kQwenXml{
      "<tool_call>",  "</tool_call>", "<function=", ">", {}, {}, "<parameter=", ">", {},
      "</parameter>", true,           "</function>"};
  static const Tagged kFunctionary{{}, {}, "<function=", ">", {},    {},
                                   {}, {}, {},           {},  false, "</function>"};
  static const Tagged kDeepSeekR1{"<｜tool▁calls▁begin｜>",
                                  "<｜tool▁calls▁end｜>",
                                  "<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                                  {},
                                  "```json",
                                  "```",
                                  {},
                                  {},
                                  {},
                                  {},
                                  false,
                                  "<｜tool▁call▁end｜>"};
  static const Tagged kDsml{"<｜DSML｜tool_calls>",
                            "</｜DSML｜tool_calls>",
                            "<｜DSML｜invoke name=\"",
                            "\">",
                            {},
                            {},
                            "<｜DSML｜parameter name=\"",
                            "\"",
                            ">",
                            "</｜DSML｜parameter>",
                            false,
                            "</｜DSML｜invoke>"};
  static const Tagged kGlm{{},
                           {},
                           "<tool_call>",
                           {},
                           {},
                           {},
                           "<arg_key>",
                           "</arg_key>",
                           "<arg_value>",
                           "</arg_value>",
                           false,
                           "</tool_call>"};
  static const Tagged kKimi{"<|tool_calls_section_begin|>",
                            "<|tool_calls_section_end|>",
                            "<|tool_call_begin|>",
                            "<|tool_call_argument_begin|>",
                            {},
                            {},
                            {},
                            {},
                            {},
                            {},
                            false,
                            "<|tool_call_end|>",
                            true};
  static const Tagged kSolar{"<|tool_calls|>",
                             "<|calls|>",
                             "<|tool_call:begin|>",
                             "<|tool_call:args|>",
                             {},
                             {},
                             {},
                             {},
                             {},
                             {},
                             false,
                             "<|tool_call:end|>",
                             false,
                             "<|tool_call:name|>"};
  // Attributes are written key="value"; the index counts a message's calls from 1 (not an id).
  static const Tagged kKimiK3{"<|open|>tools<|sep|>",
                              "<|close|>tools<|sep|>",
                              "<|open|>call tool=\"",
                              "\"",
                              {},
                              {},
                              "<|open|>argument key=\"",
                              "\"",
                              "<|sep|>",
                              "<|close|>argument<|sep|>",
                              false,
                              "<|close|>call<|sep|>",
                              false,
                              {},
                              "<|sep|>",
                              R"(" index=\"" [1-9] [0-9]* "\"")",
                              "<|open|>json",
                              "<|close|>json<|sep|>"};
  switch (f) {
    case ToolCallFormat::KimiK3:
      return &kKimiK3;
    case ToolCallFormat::Solar:
      return &kSolar;
    case ToolCallFormat::QwenXml:
      return &kQwenXml;
    case ToolCallFormat::Functionary:
      return &kFunctionary;
    case ToolCallFormat::DeepSeekR1:
      return &kDeepSeekR1;
    case ToolCallFormat::DeepSeekDsml:
      return &kDsml;
    case ToolCallFormat::Glm:
      return &kGlm;
    case ToolCallFormat::KimiK2:
      return &kKimi;
    default:
      return nullptr;
  }
}

Scan expect(std::string_view s, size_t& i, std::string_view word) {
  i = skip_ws(s, i);
  if (word.empty()) return Scan::Done;
  if (i >= s.size()) return Scan::More;
  const Scan m = match(s, i, word);
  if (m == Scan::Done) i += word.size();
  return m;
}

namespace {

// Attributes at s[i] up to `close` (DSML's string="..", Kimi K3's index="N"): no tag among
// them; i moves past `close`. More while the text may still be them.
Scan skip_attrs(std::string_view s, size_t& i, std::string_view close, ScanMemo& memo) {
  const size_t e = memo.find(s, i, close);
  const std::string_view attrs = s.substr(i, (e == npos ? s.size() : e) - i);
  const size_t lt = attrs.find('<');
  if (e == npos)
    return lt == npos || match(attrs, lt, close) == Scan::More ? Scan::More : Scan::Bad;
  if (lt != npos) return Scan::Bad;
  i = e + close.size();
  return Scan::Done;
}

// Kimi K3's attribute values escape '&' and '"'.
std::string unescape_attr(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v.substr(i, 6) == "&quot;") {
      out += '"';
      i += 5;
    } else if (v.substr(i, 5) == "&amp;") {
      out += '&';
      i += 4;
    } else {
      out += v[i];
    }
  }
  return out;
}

// The name (Kimi: "functions.NAME:INDEX", which is also the call's id; Solar: its id first;
// Kimi K3: attributes after it).
Scan scan_tagged_name(const Tagged& t, std::string_view s, size_t& i, CallScan& c, ScanMemo& memo) {
  if (!t.id_close.empty()) {
    i = skip_ws(s, i);
    const size_t from = i;
    while (i < s.size() && is_name_char(s[i])) ++i;
    if (i >= s.size()) return Scan::More;
    const std::string_view id = s.substr(from, i - from);
    if (const Scan m = expect(s, i, t.id_close); m != Scan::Done) return m;
    c.id.assign(id);
  }
  i = skip_ws(s, i);
  const size_t from = i;
  while (i < s.size() && is_name_char(s[i])) ++i;
  if (i >= s.size()) return Scan::More;
  if (i == from) return Scan::Bad;
  std::string name(s.substr(from, i - from));
  if (const Scan m = expect(s, i, t.name_close); m != Scan::Done) return m;
  if (!t.head_close.empty())
    if (const Scan m = skip_attrs(s, i, t.head_close, memo); m != Scan::Done) return m;
  if (t.indexed_id) {
    c.id = name;
    if (name.rfind("functions.", 0) == 0) name.erase(0, 10);
    if (const size_t colon = name.rfind(':'); colon != std::string::npos) name.resize(colon);
  }
  if (name.empty()) return Scan::Bad;
  c.name = std::move(name);
  c.has_name = true;
  return Scan::Done;
}

// One parameter at s[i] (past param_open) into c.params.
Scan scan_param(const Tagged& t, std::string_view s, size_t& i, CallScan& c, ScanMemo& memo) {
  const size_t key_end = memo.find(s, i, t.key_close);
  if (key_end == npos) {
    // Keys are one line without tags: longer text is no parameter, not one still coming.
    const std::string_view part = s.substr(i);
    const size_t lt = part.find('<');
    if (part.find_first_of(">\n") != npos) return Scan::Bad;
    return lt == npos || match(part, lt, t.key_close) == Scan::More ? Scan::More : Scan::Bad;
  }
  ParamScan p;
  const std::string_view key = s.substr(i, key_end - i);
  if (key.empty() || key.find_first_of("<>\n") != npos) return Scan::Bad;
  p.key = t.head_close.empty() ? std::string(key) : unescape_attr(key);
  i = key_end + t.key_close.size();
  if (!t.value_open.empty()) {
    const size_t v = memo.find(s, i, t.value_open);
    // Between the key and the value: whitespace or attributes (DSML's string="true"), no tag.
    const std::string_view attrs = s.substr(i, (v == npos ? s.size() : v) - i);
    const size_t lt = attrs.find('<');
    if (v == npos)
      return lt == npos || match(attrs, lt, t.value_open) == Scan::More ? Scan::More : Scan::Bad;
    if (lt != npos) return Scan::Bad;
    if (attrs.find("string=\"true\"") != npos) p.as_string = 1;
    if (attrs.find("string=\"false\"") != npos) p.as_string = 0;
    // Kimi K3 names each value's JSON type.
    if (const size_t ty = attrs.find("type=\""); ty != npos)
      p.as_string = attrs.substr(ty + 6, 7) == "string\"" ? 1 : 0;
    i = v + t.value_open.size();
  }
  const size_t close = memo.find(s, i, t.value_close);
  if (close == npos) return Scan::More;
  p.begin = i;
  p.end = close;
  if (t.trim_newline) {
    if (p.begin < p.end && s[p.begin] == '\n') ++p.begin;
    if (p.begin < p.end && s[p.end - 1] == '\n') --p.end;
  }
  i = close + t.value_close.size();
  c.params.push_back(std::move(p));
  return Scan::Done;
}

// One call at s[i] == call_open.
CallScan scan_tagged_call(const Tagged& t, std::string_view s, size_t i, ScanMemo& memo) {
  CallScan c;
  c.begin = i;
  auto stop = [&](Scan st) {
    c.status = st;
    return c;
  };
  i += t.call_open.size();
  if (Scan r = scan_tagged_name(t, s, i, c, memo); r != Scan::Done) return stop(r);
  if (!t.json_open.empty()) {  // Kimi K3: JSON text instead of parameters
    i = skip_ws(s, i);
    const Scan m = match(s, i, t.json_open);
    if (m == Scan::More) return stop(Scan::More);
    if (m == Scan::Done) {
      i += t.json_open.size();
      if (Scan r = skip_attrs(s, i, t.head_close, memo); r != Scan::Done) return stop(r);
      i = skip_ws(s, i);
      if (i >= s.size()) return stop(Scan::More);
      if (s[i] != '{') return stop(Scan::Bad);
      if (Scan r = scan_args_value(s, i, c, memo); r != Scan::Done) return stop(r);
      i = c.args_end;
      if (Scan r = expect(s, i, t.json_close); r != Scan::Done) return stop(r);
      if (Scan r = expect(s, i, t.call_close); r != Scan::Done) return stop(r);
      c.end = i;
      return stop(valid_call(c, true, s) ? Scan::Done : Scan::Bad);
    }
  }
  if (t.param_open.empty()) {
    if (Scan r = expect(s, i, t.args_open); r != Scan::Done) return stop(r);
    i = skip_ws(s, i);
    if (i >= s.size()) return stop(Scan::More);
    if (s[i] != '{') return stop(Scan::Bad);
    if (Scan r = scan_args_value(s, i, c, memo); r != Scan::Done) return stop(r);
    i = c.args_end;
    if (Scan r = expect(s, i, t.args_close); r != Scan::Done) return stop(r);
  } else {
    c.args_seen = true;
    c.args_kind = 'p';
    for (;;) {
      i = skip_ws(s, i);
      if (i >= s.size()) return stop(Scan::More);
      const Scan m = match(s, i, t.param_open);
      if (m == Scan::More) return stop(Scan::More);
      if (m == Scan::Bad) break;
      i += t.param_open.size();
      if (Scan r = scan_param(t, s, i, c, memo); r != Scan::Done) return stop(r);
    }
    c.args_done = true;
  }
  if (Scan r = expect(s, i, t.call_close); r != Scan::Done) return stop(r);
  c.end = i;
  return stop(c.args_kind == 'p' || valid_call(c, true, s) ? Scan::Done : Scan::Bad);
}

}  // namespace

BlockScan scan_tagged(const Tagged& t, std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  size_t i = k + t.section_open.size();
  for (;;) {
    i = skip_ws(s, i);
    if (i >= s.size()) return block_stop(b, Scan::More);
    const Scan m = match(s, i, t.call_open);
    if (m == Scan::More) return block_stop(b, Scan::More);
    if (m == Scan::Bad) break;
    b.calls.push_back(scan_tagged_call(t, s, i, memo));
    if (b.calls.back().status != Scan::Done) {
      // A call begun and cut off: the block cannot end at the last complete one (the text
      // ending here makes it broken, not a call with no arguments).
      b.calls_done = false;
      return block_stop(b, b.calls.back().status);
    }
    i = b.end = b.calls.back().end;
    b.calls_done = true;
    if (t.section_open.empty()) return block_stop(b, Scan::Done);
  }
  if (b.calls.empty()) return block_stop(b, Scan::Bad);
  const Scan m = match(s, i, t.section_close);
  if (m == Scan::Done) b.end = i + t.section_close.size();
  return block_stop(b, m == Scan::More ? Scan::More : Scan::Done);
}

Scan match(std::string_view s, size_t i, std::string_view word) {
  const std::string_view rest = s.substr(std::min(i, s.size()));
  if (rest.size() >= word.size())
    return rest.substr(0, word.size()) == word ? Scan::Done : Scan::Bad;
  return word.substr(0, rest.size()) == rest ? Scan::More : Scan::Bad;
}

Scan ScanMemo::value(std::string_view s, size_t i, size_t* end) {
  JsonScanner& sc = values.try_emplace(i, i).first->second;
  const Scan r = sc.feed(s);
  if (r == Scan::Done) *end = sc.end();
  return r;
}

size_t ScanMemo::find(std::string_view s, size_t from, std::string_view word) {
  size_t& at = finds.try_emplace((from << 8) ^ word.size(), from).first->second;
  const size_t hit = s.find(word, at);
  if (hit == npos && s.size() >= word.size()) at = std::max(at, s.size() - word.size() + 1);
  return hit;
}

bool decode_string(std::string_view quoted, std::string* out) {
  const nlohmann::json j = nlohmann::json::parse(quoted, nullptr, /*allow_exceptions=*/false);
  if (!j.is_string()) return false;
  *out = j.get<std::string>();
  return true;
}

// The object is checked once more by nlohmann-json, which also refuses what the scan lets
// through (numbers beyond a double, invalid UTF-8 in strings), so that every call returned
// parses.
bool valid_call(const CallScan& c, bool need_args, std::string_view s) {
  if (!c.has_name || c.name.empty()) return false;
  if (!c.args_seen) return !need_args;
  if (c.args_kind == 'n') return true;
  if (c.args_kind == '{')
    return nlohmann::json::accept(s.substr(c.args_begin, c.args_end - c.args_begin));
  if (c.args_kind != '"') return false;
  const nlohmann::json j = nlohmann::json::parse(c.args_string, nullptr, false);
  return j.is_object();
}

BlockScan scan_block(ToolCallFormat f, std::string_view s, size_t k, ScanMemo& memo) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return scan_hermes(s, k, memo);
    case ToolCallFormat::Llama3:
      return scan_llama3(s, k, memo);
    case ToolCallFormat::Mistral:
      return scan_mistral(s, k, memo);
    default:
      break;
  }
  if (const Tagged* t = tagged_spec(f)) return scan_tagged(*t, s, k, memo);
  return scan_block_more(f, s, k, memo);
}

std::string_view block_opener(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return "<tool_call";  // <tool_call> or <tool_calls>
    case ToolCallFormat::Mistral:
      return kMistralCalls;
    case ToolCallFormat::Llama3:
    case ToolCallFormat::None:
    case ToolCallFormat::Harmony:
      return {};
    default:
      break;
  }
  const Tagged* t = tagged_spec(f);
  if (t == nullptr) return block_opener_more(f);
  return t->section_open.empty() ? t->call_open : t->section_open;
}

// Untyped (types 0): a value the format marks a string is one; else a JSON object, array,
// number, true, false or null is that value, and any other text is a string (the templates
// write strings bare). Typed: a string-only parameter is its text; else JSON of an allowed
// type is that value, and other text a string (the model wrote no valid value: kept as
// written). DSML's string="false" with a JSON string for a string parameter is that string.
std::string param_json(const ParamScan& p, std::string_view s, uint8_t types) {
  using json = nlohmann::ordered_json;
  const std::string_view text = s.substr(p.begin, p.end - p.begin);
  auto dump = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
  const bool untyped = types == 0;
  if (untyped ? p.as_string != 1 : types != ParamTypes::kString || p.as_string == 0) {
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() &&
        (untyped ? !j.is_string()
                 : (ParamTypes::of_value(j) & types) != 0 && (!j.is_string() || p.as_string == 0)))
      return dump(j);
  }
  return dump(json(std::string(text)));
}

nlohmann::ordered_json typed_value(nlohmann::ordered_json v, std::string_view raw, uint8_t types) {
  using json = nlohmann::ordered_json;
  if (types == 0 || (ParamTypes::of_value(v) & types) != 0) return v;
  if (v.is_string()) {
    json j = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && !j.is_string() && (ParamTypes::of_value(j) & types) != 0) return j;
    return v;
  }
  if ((types & ParamTypes::kString) != 0) return json(std::string(raw));
  return v;
}

}  // namespace detail

using detail::npos;

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3:
      return "llama3";
    case ToolCallFormat::Mistral:
      return "mistral";
    case ToolCallFormat::QwenXml:
      return "qwen_xml";
    case ToolCallFormat::Functionary:
      return "functionary";
    case ToolCallFormat::DeepSeekR1:
      return "deepseek_r1";
    case ToolCallFormat::DeepSeekDsml:
      return "deepseek_dsml";
    case ToolCallFormat::Glm:
      return "glm";
    case ToolCallFormat::KimiK2:
      return "kimi_k2";
    case ToolCallFormat::Harmony:
      return "harmony";
    case ToolCallFormat::Solar:
      return "solar";
    case ToolCallFormat::KimiK3:
      return "kimi_k3";
    default:
      break;
  }
  return detail::format_name_more(f);
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  auto has = [&](std::string_view w) { return t.find(w) != npos; };
  if (has("<|channel|>commentary") && has("<|message|>")) return ToolCallFormat::Harmony;
  if (has("<|tool_call:begin|>") && has("<|tool_call:args|>")) return ToolCallFormat::Solar;
  // Kimi K3 builds its tags with a macro: open_tag('call', ..) / open_tag('argument', ..).
  if (has("<|open|>") && has("'call'") && has("'argument'")) return ToolCallFormat::KimiK3;
  if (const ToolCallFormat more = detail::detect_more(t); more != ToolCallFormat::None) return more;
  if (has(detail::kMistralCalls)) return ToolCallFormat::Mistral;
  if (has("DSML") && has("invoke name=")) return ToolCallFormat::DeepSeekDsml;
  if (has("<｜tool▁calls▁begin｜>")) return ToolCallFormat::DeepSeekR1;
  if (has("<|tool_calls_section_begin|>")) return ToolCallFormat::KimiK2;
  if (has(detail::kHermesOpen)) {
    if (has("<function=") && has("<parameter=")) return ToolCallFormat::QwenXml;
    if (has("<arg_key>")) return ToolCallFormat::Glm;
    // Another <invoke> syntax (MiniMax M3's is detect_more's) is not read.
    return has("<function=") || has("<invoke") ? ToolCallFormat::None : ToolCallFormat::Hermes;
  }
  if (has("<tool_calls>") && has("</tool_calls>")) return ToolCallFormat::Hermes;
  if (has("<function=")) return ToolCallFormat::Functionary;
  if (has("<|start_header_id|>") && has("\"parameters\"")) return ToolCallFormat::Llama3;
  return ToolCallFormat::None;
}

std::vector<std::string_view> tool_call_markers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
    case ToolCallFormat::QwenXml:
      return {detail::kHermesOpen, detail::kHermesClose};
    case ToolCallFormat::Llama3:
      return {detail::kPythonTag};
    case ToolCallFormat::Mistral:
      return {detail::kMistralCalls, detail::kMistralArgs, detail::kMistralCallId};
    case ToolCallFormat::Glm:
      return {detail::kHermesOpen, detail::kHermesClose, "<arg_key>",
              "</arg_key>",        "<arg_value>",        "</arg_value>"};
    case ToolCallFormat::DeepSeekR1:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
              "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"};
    case ToolCallFormat::KimiK2:
      return {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
              "<|tool_call_argument_begin|>", "<|tool_call_end|>"};
    case ToolCallFormat::Solar:
      return {"<|tool_calls|>", "<|calls|>", "<|tool_call:begin|>", "<|tool_call:name|>",
              "<|tool_call:args|>", "<|tool_call:end|>"};
    case ToolCallFormat::KimiK3:
      return {"<|open|>", "<|close|>", "<|sep|>"};
    case ToolCallFormat::Harmony:  // as harmony_markers() (harmony.h)
      return {"<|start|>", "<|channel|>", "<|constrain|>", "<|message|>", "<|end|>", "<|call|>"};
    case ToolCallFormat::Functionary:
    case ToolCallFormat::DeepSeekDsml:
    case ToolCallFormat::None:
      return {};
    default:
      break;
  }
  return detail::markers_more(f);
}

}  // namespace minfer::server
