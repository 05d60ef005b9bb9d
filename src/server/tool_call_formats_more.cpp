// The tool-call formats after KimiK2 in ToolCallFormat (server/tool_calls.h): JSON calls after an
// opener (firefunction, granite, command_r, command_r7b, gigachat), MiniMax M3's XML invokes,
// Gemma 4's call:NAME{..}, LFM2's Python-style calls and muse's ATEM blocks: their block scans
// (tool_call_scan.h), openers, markers, names and detection from the template text.
//
// The JSON formats stream their arguments as the other JSON formats do. The others write values
// in a syntax of their own, which is converted to JSON once the call's closing marker is there:
// a call is found by a resumed search for that marker (ScanMemo::find), read once, and its result
// kept by position, so a call of n bytes costs O(n) however it arrives; its arguments come whole
// with its start.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/tool_call_scan.h"

namespace minfer::server::detail {

namespace {

// Ordered: arguments keep the model's order.
using json = nlohmann::ordered_json;

constexpr std::string_view kMiniMaxNs = "]<]minimax[>[";
constexpr std::string_view kMiniMaxOpen = "]<]minimax[>[<tool_call>";
constexpr std::string_view kMiniMaxClose = "]<]minimax[>[</tool_call>";
constexpr std::string_view kMiniMaxInvoke = "]<]minimax[>[<invoke name=\"";
constexpr std::string_view kMiniMaxInvokeEnd = "]<]minimax[>[</invoke>";
constexpr std::string_view kGemmaOpen = "<|tool_call>";
constexpr std::string_view kGemmaClose = "<tool_call|>";
constexpr std::string_view kGemmaQuote = "<|\"|>";
constexpr std::string_view kLfmOpen = "<|tool_call_start|>";
constexpr std::string_view kLfmClose = "<|tool_call_end|>";
constexpr std::string_view kAtemHeader = "to=";
constexpr std::string_view kAtemMessage = "<|message|>";

const JsonCalls kFirefunction{.opener = "functools"};
const JsonCalls kGranite{.opener = "<|tool_call|>"};
const JsonCalls kCommandR{.opener = "Action:",
                          .prefix = "```json",
                          .close = "```",
                          .name_key = "tool_name",
                          .args_key = "parameters"};
const JsonCalls kCommandR7b{.opener = "<|START_ACTION|>",
                            .close = "<|END_ACTION|>",
                            .name_key = "tool_name",
                            .args_key = "parameters",
                            .id_key = "tool_call_id"};
const JsonCalls kGigaChat{.opener = "function call", .prefix = "<|role_sep|>", .list = false};

const Tagged kAtem{"<atem:function_calls>",
                   "</atem:function_calls>",
                   "<atem:invoke name=\"",
                   "\">",
                   {},
                   {},
                   "<atem:parameter name=\"",
                   "\">",
                   {},
                   "</atem:parameter>",
                   false,
                   "</atem:invoke>"};

bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool is_ident(char c) {
  return is_ident_start(c) || (c >= '0' && c <= '9');
}

// A function name: letters, digits, '_', '-', '.'.
size_t name_end(std::string_view s, size_t i) {
  while (i < s.size() && (is_ident(s[i]) || s[i] == '-' || s[i] == '.')) ++i;
  return i;
}

bool starts_with(std::string_view s, size_t i, std::string_view w) {
  return s.substr(std::min(i, s.size())).substr(0, w.size()) == w;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The schema's types of parameter `key` of function `fn` (0: not known).
uint8_t type_of(const ParamTypes* types, std::string_view fn, std::string_view key) {
  return types == nullptr ? 0 : types->of(fn, key);
}

// A complete call: its name, and its arguments as the JSON text of an object.
bool finish_call(CallScan& c, std::string name, const std::string& args_json) {
  const json j = json::parse(args_json, nullptr, /*allow_exceptions=*/false);
  if (name.empty() || !j.is_object()) return false;
  c.name = std::move(name);
  c.has_name = true;
  c.args_seen = c.args_done = true;
  c.args_kind = '"';  // whole, with the call's end
  c.args_string = dump(j);
  return true;
}

// The call at s[at], whose text ends at the first `close` from `from` on: read by `parse` (text,
// call, the request's parameter types or null) once that is there, and kept by position; More until
// then.
template <class Parse>
CallScan whole_call(std::string_view s, size_t at, size_t from, std::string_view close,
                    ScanMemo& memo, Parse parse) {
  ScanMemo::CallResume& r = memo.calls.try_emplace(at).first->second;
  if (r.c.status != Scan::More) return r.c;
  CallScan c;
  c.begin = at;
  const size_t e = memo.find(s, from, close);
  if (e == npos) return c;
  c.end = e + close.size();
  c.status = parse(s.substr(at, e - at), c, memo.types) ? Scan::Done : Scan::Bad;
  r.c = c;
  return c;
}

// ---- JSON calls after an opener ----

BlockScan scan_json_calls(const JsonCalls& f, std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  size_t i = k + f.opener.size();
  if (!f.prefix.empty()) {
    i = skip_ws(s, i);
    const Scan m = match(s, i, f.prefix);
    if (m == Scan::More) return block_stop(b, Scan::More);
    if (m == Scan::Done) i += f.prefix.size();
  }
  i = skip_ws(s, i);
  if (i >= s.size()) return block_stop(b, Scan::More);
  if (!scan_objects(s, i, false, b, memo, f.name_key)) return b;
  b.end = i;
  b.calls_done = true;
  if (f.close.empty()) return block_stop(b, Scan::Done);
  // A missing closing marker ends the block with its last call.
  const size_t j = skip_ws(s, i);
  const Scan m = match(s, j, f.close);
  if (m == Scan::Done) b.end = j + f.close.size();
  return block_stop(b, m == Scan::More ? Scan::More : Scan::Done);
}

// ---- MiniMax M3: NS<invoke name="NAME">NS<key>VALUE NS</key>..NS</invoke>, values nested ----

// A leaf's text as a value: JSON (a number, true, ...) when it is, else a string.
json leaf_value(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || j.is_string()) return json(std::string(text));
  return j;
}

// Elements NS<key>..NS</key>, nested (NS<item> for a list's items), read with a stack of open
// elements, not recursion: the text is the model's.
// Top-level leaves are typed by `types` (the call's function: `fn`).
bool minimax_args(std::string_view r, std::string* out, const ParamTypes* types,
                  std::string_view fn) {
  struct Open {
    std::string key;
    size_t text_at;
    std::vector<std::pair<std::string, json>> kids;
  };
  auto value_of = [](std::vector<std::pair<std::string, json>>& kids, bool top) {
    bool items = !top;
    for (const auto& [k, v] : kids) items = items && k == "item";
    json j = items ? json::array() : json::object();
    for (auto& [k, v] : kids) items ? j.push_back(std::move(v)) : void(j[k] = std::move(v));
    return j;
  };
  std::vector<Open> stack{{"", 0, {}}};
  for (size_t i = 0; i < r.size();) {
    if (!starts_with(r, i, kMiniMaxNs)) {
      if (stack.size() == 1 && !is_ws(r[i])) return false;
      ++i;
      continue;
    }
    const size_t tag = i + kMiniMaxNs.size();
    const bool closing = starts_with(r, tag, "</");
    const size_t key_at = tag + (closing ? 2 : 1);
    if (!starts_with(r, tag, "<")) return false;
    const size_t gt = r.find('>', key_at);
    if (gt == npos) return false;
    const std::string key(r.substr(key_at, gt - key_at));
    if (key.empty() || key.find_first_of("<\n") != npos) return false;
    if (!closing) {
      stack.push_back({key, gt + 1, {}});
    } else {
      if (stack.size() == 1 || stack.back().key != key) return false;
      Open top = std::move(stack.back());
      stack.pop_back();
      const std::string_view text = r.substr(top.text_at, i - top.text_at);
      json v = top.kids.empty() ? leaf_value(text) : value_of(top.kids, false);
      if (stack.size() == 1) v = typed_value(std::move(v), text, type_of(types, fn, key));
      stack.back().kids.emplace_back(key, std::move(v));
    }
    i = gt + 1;
  }
  if (stack.size() != 1) return false;
  *out = dump(value_of(stack[0].kids, true));
  return true;
}

bool parse_minimax_call(std::string_view text, CallScan& c, const ParamTypes* types) {
  const size_t from = kMiniMaxInvoke.size();
  const size_t q = text.find("\">", from);
  if (q == npos) return false;
  const std::string_view name = text.substr(from, q - from);
  std::string args;
  return minimax_args(text.substr(q + 2), &args, types, name) &&
         finish_call(c, std::string(name), args);
}

BlockScan scan_minimax(std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  size_t i = k + kMiniMaxOpen.size();
  for (;;) {
    i = skip_ws(s, i);
    if (i >= s.size()) return block_stop(b, Scan::More);
    const Scan m = match(s, i, kMiniMaxInvoke);
    if (m == Scan::More) return block_stop(b, Scan::More);
    if (m == Scan::Bad) break;
    // The name so far must be one.
    const size_t n = name_end(s, i + kMiniMaxInvoke.size());
    if (n < s.size() && s[n] != '"') return block_stop(b, Scan::Bad);
    b.calls.push_back(whole_call(s, i, i, kMiniMaxInvokeEnd, memo, parse_minimax_call));
    if (b.calls.back().status != Scan::Done) return block_stop(b, b.calls.back().status);
    i = b.end = b.calls.back().end;
    b.calls_done = true;
  }
  if (b.calls.empty()) return block_stop(b, Scan::Bad);
  const Scan m = match(s, i, kMiniMaxClose);
  if (m == Scan::Done) b.end = i + kMiniMaxClose.size();
  return block_stop(b, m == Scan::More ? Scan::More : Scan::Done);
}

// ---- Gemma 4: <|tool_call>call:NAME{key:VALUE,..}<tool_call|> ----

// A number's text: [-+0-9.eE]+.
size_t number_end(std::string_view v, size_t i) {
  while (i < v.size() && (std::string_view("0123456789+-.eE").find(v[i]) != npos)) ++i;
  return i;
}

// Gemma's values as JSON text: strings between <|"|> marks, bare keys (and words true, false,
// null / None), numbers, lists and objects as JSON writes them.
bool gemma_to_json(std::string_view v, std::string* out) {
  for (size_t i = 0; i < v.size();) {
    const char c = v[i];
    if (starts_with(v, i, kGemmaQuote)) {
      const size_t from = i + kGemmaQuote.size();
      const size_t e = v.find(kGemmaQuote, from);
      if (e == npos) return false;
      *out += dump(json(std::string(v.substr(from, e - from))));
      i = e + kGemmaQuote.size();
    } else if (c == '"') {  // a JSON string
      size_t e = 0;
      if (scan_json_value(v, i, &e) != Scan::Done) return false;
      out->append(v.substr(i, e - i));
      i = e;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t e = number_end(v, i);
      out->append(v.substr(i, e - i));
      i = e;
    } else if (is_ident_start(c)) {
      size_t e = i;
      while (e < v.size() && is_ident(v[e])) ++e;
      const std::string_view w = v.substr(i, e - i);
      const size_t j = skip_ws(v, e);
      if (j < v.size() && v[j] == ':')
        *out += dump(json(std::string(w)));
      else if (w == "true" || w == "True")
        *out += "true";
      else if (w == "false" || w == "False")
        *out += "false";
      else if (w == "null" || w == "None")
        *out += "null";
      else
        return false;
      i = e;
    } else if (std::string_view("{}[],: \t\r\n").find(c) != npos) {
      *out += c;
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

// The end of the Gemma value at v[i]: the first ',' or '}' outside brackets and strings, or npos.
size_t gemma_value_end(std::string_view v, size_t i) {
  int depth = 0;
  while (i < v.size()) {
    const char c = v[i];
    if (starts_with(v, i, kGemmaQuote)) {
      const size_t e = v.find(kGemmaQuote, i + kGemmaQuote.size());
      if (e == npos) return npos;
      i = e + kGemmaQuote.size();
      continue;
    }
    if (c == '"') {
      size_t e = 0;
      if (scan_json_value(v, i, &e) != Scan::Done) return npos;
      i = e;
      continue;
    }
    if (depth == 0 && (c == ',' || c == '}')) return i;
    if (c == '[' || c == '{') ++depth;
    if ((c == ']' || c == '}') && --depth < 0) return npos;
    ++i;
  }
  return npos;
}

// {key:VALUE,..} at v (the whole rest of the call): each value converted (gemma_to_json) and
// typed by the schema with its text.
bool gemma_args(std::string_view v, std::string* out, const ParamTypes* types,
                std::string_view fn) {
  json obj = json::object();
  size_t i = skip_ws(v, 1);
  while (i < v.size() && v[i] != '}') {
    std::string key;
    size_t e = i;
    if (v[i] == '"') {
      if (scan_json_value(v, i, &e) != Scan::Done || !decode_string(v.substr(i, e - i), &key))
        return false;
    } else {
      while (e < v.size() && is_ident(v[e])) ++e;
      if (e == i) return false;
      key.assign(v.substr(i, e - i));
    }
    i = skip_ws(v, e);
    if (i >= v.size() || v[i] != ':') return false;
    const size_t from = skip_ws(v, i + 1);
    const size_t end = gemma_value_end(v, from);
    if (end == npos) return false;
    size_t to = end;
    while (to > from && is_ws(v[to - 1])) --to;
    std::string text;
    if (!gemma_to_json(v.substr(from, to - from), &text)) return false;
    json val = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (val.is_discarded() || to == from) return false;
    const std::string_view raw = v.substr(from, to - from);
    obj[key] = typed_value(std::move(val), raw, type_of(types, fn, key));
    i = skip_ws(v, end + (v[end] == ',' ? 1 : 0));
  }
  if (i >= v.size() || skip_ws(v, i + 1) != v.size()) return false;
  *out = dump(obj);
  return true;
}

bool parse_gemma_call(std::string_view text, CallScan& c, const ParamTypes* types) {
  size_t i = skip_ws(text, kGemmaOpen.size());
  if (!starts_with(text, i, "call:")) return false;
  i += 5;
  const size_t n = name_end(text, i);
  const std::string_view name = text.substr(i, n - i);
  const std::string_view rest = text.substr(skip_ws(text, n));
  std::string args;
  return !rest.empty() && rest[0] == '{' && gemma_args(rest, &args, types, name) &&
         finish_call(c, std::string(name), args);
}

BlockScan scan_gemma(std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  // What is there of "call:NAME{" must be it.
  size_t i = skip_ws(s, k + kGemmaOpen.size());
  if (const Scan m = match(s, i, "call:"); m != Scan::Done) return block_stop(b, m);
  i = skip_ws(s, name_end(s, i + 5));
  if (i < s.size() && s[i] != '{') return block_stop(b, Scan::Bad);
  b.calls.push_back(whole_call(s, k, k, kGemmaClose, memo, parse_gemma_call));
  b.end = b.calls.back().end;
  b.calls_done = b.calls.back().status == Scan::Done;
  return block_stop(b, b.calls.back().status);
}

// ---- Pythonic (LFM2): <|tool_call_start|>[NAME(key=VALUE, ..), ..]<|tool_call_end|> ----

// A Python string literal at v[i] ('..' or "..") into JSON text; i moves past it.
bool py_string(std::string_view v, size_t& i, std::string* out) {
  const char q = v[i++];
  std::string text;
  for (; i < v.size() && v[i] != q; ++i) {
    if (v[i] != '\\' || i + 1 >= v.size()) {
      text += v[i];
      continue;
    }
    const char e = v[++i];
    text += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    if (e != 'n' && e != 't' && e != 'r' && e != '\\' && e != '\'' && e != '"')
      text.insert(text.size() - 1, 1, '\\');
  }
  if (i >= v.size()) return false;
  ++i;
  *out += dump(json(std::move(text)));
  return true;
}

// One Python value at v[i] (literals, lists, dicts) into JSON text, up to a ',' or ')' outside
// brackets; i moves to that byte.
bool py_value(std::string_view v, size_t& i, std::string* out) {
  int depth = 0;
  const size_t from = out->size();
  while (i < v.size()) {
    const char c = v[i];
    if (depth == 0 && (c == ',' || c == ')')) break;
    if (c == '\'' || c == '"') {
      if (!py_string(v, i, out)) return false;
    } else if (is_ident_start(c)) {
      size_t e = i;
      while (e < v.size() && is_ident(v[e])) ++e;
      const std::string_view w = v.substr(i, e - i);
      if (w == "True" || w == "true")
        *out += "true";
      else if (w == "False" || w == "false")
        *out += "false";
      else if (w == "None" || w == "null")
        *out += "null";
      else
        return false;
      i = e;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t e = number_end(v, i);
      out->append(v.substr(i, e - i));
      i = e;
    } else if (std::string_view("[{").find(c) != npos) {
      ++depth;
      *out += c;
      ++i;
    } else if (std::string_view("]}").find(c) != npos) {
      if (--depth < 0) return false;
      *out += c;
      ++i;
    } else if (std::string_view(",: \t\r\n").find(c) != npos) {
      *out += c;
      ++i;
    } else {
      return false;
    }
  }
  return depth == 0 && out->size() > from;
}

// NAME(key=VALUE, ..) at v[i]; i moves past it. `suffix`: text the name must end in, dropped
// (Llama's ".call").
// Values are typed by `types` (null: as written).
bool py_call(std::string_view v, size_t& i, CallScan& c, std::string_view suffix = {},
             const ParamTypes* types = nullptr) {
  i = skip_ws(v, i);
  const size_t n = name_end(v, i);
  std::string name(v.substr(i, n - i));
  if (!suffix.empty()) {
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), npos, std::string(suffix)) != 0)
      return false;
    name.resize(name.size() - suffix.size());
  }
  i = skip_ws(v, n);
  if (i >= v.size() || v[i] != '(') return false;
  std::string args = "{";
  i = skip_ws(v, i + 1);
  while (i < v.size() && v[i] != ')') {
    const size_t k = i;
    while (i < v.size() && is_ident(v[i])) ++i;
    if (i == k) return false;
    const std::string_view key = v.substr(k, i - k);
    args += (args.size() > 1 ? ", " : "") + dump(json(std::string(key))) + ": ";
    i = skip_ws(v, i);
    if (i >= v.size() || v[i] != '=') return false;
    i = skip_ws(v, i + 1);
    const size_t from = i, at = args.size();
    if (!py_value(v, i, &args)) return false;
    if (const uint8_t t = type_of(types, name, key); t != 0) {
      json val = json::parse(std::string_view(args).substr(at), nullptr, false);
      if (val.is_discarded()) return false;
      size_t to = i;
      while (to > from && is_ws(v[to - 1])) --to;
      args.resize(at);
      args += dump(typed_value(std::move(val), v.substr(from, to - from), t));
    }
    if (i < v.size() && v[i] == ',') i = skip_ws(v, i + 1);
  }
  if (i >= v.size()) return false;
  ++i;
  return finish_call(c, std::move(name), args + "}");
}

BlockScan scan_pythonic(std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  const size_t from = skip_ws(s, k + kLfmOpen.size());
  if (from < s.size() && s[from] != '[' && !is_ident_start(s[from]))
    return block_stop(b, Scan::Bad);
  const size_t e = memo.find(s, from, kLfmClose);
  if (e == npos) return block_stop(b, Scan::More);
  const std::string_view v = s.substr(0, e);
  size_t i = from;
  const bool list = i < v.size() && v[i] == '[';
  if (list) ++i;
  for (;;) {
    CallScan c;
    c.begin = k;
    c.end = e + kLfmClose.size();
    if (!py_call(v, i, c, {}, memo.types)) return block_stop(b, Scan::Bad);
    c.status = Scan::Done;
    b.calls.push_back(std::move(c));
    i = skip_ws(v, i);
    if (!list || i >= v.size() || v[i] != ',') break;
    ++i;
  }
  if (list && (i >= v.size() || v[i++] != ']')) return block_stop(b, Scan::Bad);
  if (skip_ws(v, i) != v.size()) return block_stop(b, Scan::Bad);
  b.end = e + kLfmClose.size();
  b.calls_done = true;
  return block_stop(b, Scan::Done);
}

// ---- muse (ATEM): to=NAME<|message|><atem:function_calls>..</atem:function_calls>, one such
// message per call, each but the first after <|eom|><|start|>assistant ----

// Past a header "to=NAME<|message|>" at s[i] (and what separates it from the call before):
// Done with i at the ATEM block, More, or Bad.
Scan atem_header(std::string_view s, size_t& i, bool first) {
  if (!first) {
    for (std::string_view w : {"<|eom|>", "<|start|>", "assistant"}) {
      i = skip_ws(s, i);
      const Scan m = match(s, i, w);
      if (m == Scan::More) return m;
      if (m == Scan::Done) i += w.size();
    }
    i = skip_ws(s, i);
  }
  if (const Scan m = match(s, i, kAtemHeader); m != Scan::Done) return m;
  const size_t n = name_end(s, i + kAtemHeader.size());
  if (n >= s.size()) return Scan::More;
  i = n;
  if (const Scan m = expect(s, i, kAtemMessage); m != Scan::Done) return m;
  i = skip_ws(s, i);
  const Scan m = match(s, i, kAtem.section_open);
  return i >= s.size() ? Scan::More : m;
}

BlockScan scan_atem(std::string_view s, size_t k, ScanMemo& memo) {
  BlockScan b;
  size_t i = k;
  for (bool first = true;; first = false) {
    size_t at = i;
    const Scan h = atem_header(s, at, first);
    if (h != Scan::Done) {
      if (first) return block_stop(b, h);
      return block_stop(b, h == Scan::More ? Scan::More : Scan::Done);  // b.end: the last call's
    }
    BlockScan one = scan_tagged(kAtem, s, at, memo);
    for (CallScan& c : one.calls) b.calls.push_back(std::move(c));
    if (one.status != Scan::Done) {
      b.calls_done = one.calls_done;
      if (one.calls_done) b.end = one.end;
      return block_stop(b, one.status);
    }
    i = b.end = one.end;
    b.calls_done = true;
  }
}

}  // namespace

Scan ScanMemo::paren(std::string_view s, size_t at, size_t* end) {
  auto [it, fresh] = parens.try_emplace(at);
  ParenScan& p = it->second;
  if (fresh) p.i = at;
  for (; p.status == Scan::More && p.i < s.size(); ++p.i) {
    const char c = s[p.i];
    if (p.quote != 0) {
      if (p.escape)
        p.escape = false;
      else if (c == '\\')
        p.escape = true;
      else if (c == p.quote)
        p.quote = 0;
    } else if (c == '\'' || c == '"') {
      p.quote = c;
    } else if (c == '(' || c == '[' || c == '{') {
      ++p.depth;
    } else if (c == ')' || c == ']' || c == '}') {
      if (--p.depth < 0) p.status = Scan::Bad;
      if (p.depth == 0) p.status = c == ')' ? Scan::Done : Scan::Bad;
    }
  }
  if (p.status == Scan::Done) *end = p.i;  // the loop stopped past the ')'
  return p.status;
}

void scan_llama_builtin(std::string_view s, size_t i, BlockScan& b, ScanMemo& memo) {
  const size_t n = name_end(s, i);
  if (n >= s.size()) return void(block_stop(b, Scan::More));
  constexpr std::string_view kCall = ".call";
  if (s[n] != '(' || n - i <= kCall.size() || s.substr(n - kCall.size(), kCall.size()) != kCall)
    return void(block_stop(b, Scan::Bad));
  size_t end = 0;
  if (const Scan p = memo.paren(s, n, &end); p != Scan::Done) return void(block_stop(b, p));
  CallScan c;
  c.begin = i;
  c.end = end;
  size_t j = i;
  if (!py_call(s.substr(0, end), j, c, kCall)) return void(block_stop(b, Scan::Bad));
  c.status = Scan::Done;
  b.calls.push_back(std::move(c));
  b.end = end;
  b.calls_done = true;
  block_stop(b, Scan::Done);
}

const JsonCalls* json_calls_spec(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Firefunction:
      return &kFirefunction;
    case ToolCallFormat::Granite:
      return &kGranite;
    case ToolCallFormat::CommandR:
      return &kCommandR;
    case ToolCallFormat::CommandR7b:
      return &kCommandR7b;
    case ToolCallFormat::GigaChat:
      return &kGigaChat;
    default:
      return nullptr;
  }
}

const Tagged* tagged_spec_more(ToolCallFormat f) {
  return f == ToolCallFormat::Atem ? &kAtem : nullptr;
}

BlockScan scan_block_more(ToolCallFormat f, std::string_view s, size_t k, ScanMemo& memo) {
  if (const JsonCalls* j = json_calls_spec(f)) return scan_json_calls(*j, s, k, memo);
  switch (f) {
    case ToolCallFormat::MiniMaxXml:
      return scan_minimax(s, k, memo);
    case ToolCallFormat::Gemma4:
      return scan_gemma(s, k, memo);
    case ToolCallFormat::Pythonic:
      return scan_pythonic(s, k, memo);
    case ToolCallFormat::Atem:
      return scan_atem(s, k, memo);
    default:
      break;
  }
  BlockScan b;
  return block_stop(b, Scan::Bad);
}

std::string_view block_opener_more(ToolCallFormat f) {
  if (const JsonCalls* j = json_calls_spec(f)) return j->opener;
  switch (f) {
    case ToolCallFormat::MiniMaxXml:
      return kMiniMaxOpen;
    case ToolCallFormat::Gemma4:
      return kGemmaOpen;
    case ToolCallFormat::Pythonic:
      return kLfmOpen;
    case ToolCallFormat::Atem:
      return kAtemHeader;
    default:
      return {};
  }
}

std::vector<std::string_view> markers_more(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Granite:
      return {kGranite.opener};
    case ToolCallFormat::CommandR7b:
      return {kCommandR7b.opener, kCommandR7b.close};
    case ToolCallFormat::GigaChat:
      return {kGigaChat.prefix};
    case ToolCallFormat::MiniMaxXml:
      return {kMiniMaxNs};
    case ToolCallFormat::Gemma4:
      return {kGemmaOpen, kGemmaClose, kGemmaQuote};
    case ToolCallFormat::Pythonic:
      return {kLfmOpen, kLfmClose};
    case ToolCallFormat::Atem:
      return {kAtemMessage};
    default:
      return {};
  }
}

const char* format_name_more(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Firefunction:
      return "firefunction";
    case ToolCallFormat::Granite:
      return "granite";
    case ToolCallFormat::CommandR:
      return "command_r";
    case ToolCallFormat::CommandR7b:
      return "command_r7b";
    case ToolCallFormat::GigaChat:
      return "gigachat";
    case ToolCallFormat::MiniMaxXml:
      return "minimax_xml";
    case ToolCallFormat::Gemma4:
      return "gemma4";
    case ToolCallFormat::Pythonic:
      return "pythonic";
    case ToolCallFormat::Atem:
      return "atem";
    default:
      return "none";
  }
}

ToolCallFormat detect_more(std::string_view t) {
  auto has = [&](std::string_view w) { return t.find(w) != npos; };
  if (has(kMiniMaxNs) && has("<invoke name=")) return ToolCallFormat::MiniMaxXml;
  if (has("<|tool_call>call:")) return ToolCallFormat::Gemma4;
  // LFM2's template does not render calls, but names the same markers' list.
  if (has(kLfmOpen) || has("<|tool_list_start|>")) return ToolCallFormat::Pythonic;
  if (has("functools[")) return ToolCallFormat::Firefunction;
  if (has(kCommandR7b.opener)) return ToolCallFormat::CommandR7b;
  if (has("Action:") && has("\"tool_name\"")) return ToolCallFormat::CommandR;
  if (has("'function call'") && has(kGigaChat.prefix)) return ToolCallFormat::GigaChat;
  if (has(kAtem.section_open)) return ToolCallFormat::Atem;
  // Granite 3.3 tells the model to write <|tool_call|> and a JSON list (it renders no calls).
  if (has(kGranite.opener)) return ToolCallFormat::Granite;
  return ToolCallFormat::None;
}

}  // namespace minfer::server::detail
