#include "server/tool_calls.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace minfer::server {

namespace {

constexpr size_t npos = std::string_view::npos;
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";

// Done: a complete item; More: the text ends inside a valid prefix of one; Bad: invalid.
enum class Scan { Done, More, Bad };

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// Whether s[i..] starts with `word` (Done), is a proper prefix of it (More), or neither.
Scan match(std::string_view s, size_t i, std::string_view word) {
  const std::string_view rest = s.substr(std::min(i, s.size()));
  if (rest.size() >= word.size())
    return rest.substr(0, word.size()) == word ? Scan::Done : Scan::Bad;
  return word.substr(0, rest.size()) == rest ? Scan::More : Scan::Bad;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A JSON string at s[i] == '"'; raw control characters are invalid, as in JSON.
Scan scan_string(std::string_view s, size_t i, size_t* end) {
  for (++i; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"') {
      *end = i + 1;
      return Scan::Done;
    }
    if (c < 0x20) return Scan::Bad;
    if (c != '\\') continue;
    if (++i >= s.size()) return Scan::More;
    if (s[i] == 'u') {
      for (int k = 0; k < 4; ++k) {
        if (++i >= s.size()) return Scan::More;
        if (!is_hex(s[i])) return Scan::Bad;
      }
    } else if (std::string_view("\"\\/bfnrt").find(s[i]) == npos) {
      return Scan::Bad;
    }
  }
  return Scan::More;
}

size_t skip_digits(std::string_view s, size_t i) {
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i;
}

// true / false / null or a number at s[i]. A number that reaches the end of the text may go on.
Scan scan_scalar(std::string_view s, size_t i, size_t* end) {
  for (std::string_view lit : {"true", "false", "null"}) {
    if (s[i] != lit[0]) continue;
    const Scan m = match(s, i, lit);
    if (m == Scan::Done) *end = i + lit.size();
    return m;
  }
  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  size_t j = i + (s[i] == '-' ? 1 : 0);
  if (j >= s.size()) return Scan::More;
  if (s[j] == '0') {
    ++j;
  } else {
    const size_t k = skip_digits(s, j);
    if (k == j) return Scan::Bad;
    j = k;
  }
  auto part = [&](bool sign) {  // after '.' or 'e': digits must follow
    ++j;
    if (sign && j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const size_t k = skip_digits(s, j);
    const bool ok = k > j || k >= s.size();
    j = k;
    return ok;
  };
  if (j < s.size() && s[j] == '.' && !part(false)) return Scan::Bad;
  if (j < s.size() && (s[j] == 'e' || s[j] == 'E') && !part(true)) return Scan::Bad;
  if (j >= s.size()) return Scan::More;
  *end = j;
  return Scan::Done;
}

// Any JSON value at s[i] (not whitespace). Iterative: nesting depth is bounded by the text only.
Scan scan_value(std::string_view s, size_t i, size_t* end) {
  enum class Want { Value, ValueOrClose, Key, KeyOrClose, Colon, CommaOrClose };
  std::vector<char> open;  // the containers the scan is in: '{' or '['
  Want want = Want::Value;
  for (;;) {
    i = skip_ws(s, i);
    if (i >= s.size()) return Scan::More;
    const char c = s[i];
    size_t next = i + 1;
    Scan r = Scan::Done;
    switch (want) {
      case Want::KeyOrClose:
      case Want::ValueOrClose:
        if (c == (want == Want::KeyOrClose ? '}' : ']')) {
          open.pop_back();
          want = Want::CommaOrClose;
          break;
        }
        if (want == Want::KeyOrClose) {
          want = Want::Key;
          continue;  // the same character, as a key
        }
        [[fallthrough]];
      case Want::Value:
        if (c == '{' || c == '[') {
          open.push_back(c);
          want = c == '{' ? Want::KeyOrClose : Want::ValueOrClose;
          break;
        }
        r = c == '"' ? scan_string(s, i, &next) : scan_scalar(s, i, &next);
        if (r != Scan::Done) return r;
        want = Want::CommaOrClose;
        break;
      case Want::Key:
        if (c != '"') return Scan::Bad;
        r = scan_string(s, i, &next);
        if (r != Scan::Done) return r;
        want = Want::Colon;
        break;
      case Want::Colon:
        if (c != ':') return Scan::Bad;
        want = Want::Value;
        break;
      case Want::CommaOrClose:
        if (c == ',')
          want = open.back() == '{' ? Want::Key : Want::Value;
        else if (c == (open.back() == '{' ? '}' : ']'))
          open.pop_back();
        else
          return Scan::Bad;
        break;
    }
    i = next;
    if (want == Want::CommaOrClose && open.empty()) {
      *end = i;
      return Scan::Done;
    }
  }
}

// The text of a scanned JSON string; false for escapes nlohmann refuses (lone surrogates).
bool decode_string(std::string_view quoted, std::string* out) {
  const nlohmann::json j = nlohmann::json::parse(quoted, nullptr, /*allow_exceptions=*/false);
  if (!j.is_string()) return false;
  *out = j.get<std::string>();
  return true;
}

// One call: {"name": .., "arguments" (or "parameters"): .., "id"?: ..}, or Mistral's
// name[ARGS]{..}. Whatever is known so far, also while the text ends inside it.
struct CallScan {
  Scan status = Scan::More;
  size_t begin = 0, end = 0;  // its text; end once Done
  bool has_name = false;      // the name is complete
  std::string name, id;
  bool args_seen = false;   // the arguments value has begun
  bool args_done = false;   // ... and is complete
  char args_kind = 0;       // its first character: '{', '"', 'n', ...
  size_t args_begin = 0;    // its text: [args_begin, args_end)
  size_t args_end = 0;      // the end of the text while !args_done
  std::string args_string;  // args_kind '"', done: the decoded text
};

// Whether a complete call in `s` is one: a name, and arguments that are an object, a string
// holding a JSON object, null, or (unless `need_args`) absent. The object is checked once more
// by nlohmann-json, which also refuses what the scan lets through (numbers beyond a double,
// invalid UTF-8 in strings), so that every call returned parses.
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

// A call object at s[i] == '{'. Llama's (`need_args`) must start with "name" (or "type"), so
// a JSON answer that is no call is told apart at its first key.
CallScan scan_call_object(std::string_view s, size_t i, bool need_args) {
  CallScan c;
  c.begin = i;
  auto stop = [&](Scan st) {
    c.status = st;
    return c;
  };
  for (bool first = true;; first = false) {
    i = skip_ws(s, i + 1);  // past '{' or ','
    if (i >= s.size()) return stop(Scan::More);
    if (first && s[i] == '}') {
      c.end = i + 1;
      return stop(valid_call(c, need_args, s) ? Scan::Done : Scan::Bad);
    }
    size_t key_end = 0;
    std::string key;
    if (s[i] != '"') return stop(Scan::Bad);
    if (Scan r = scan_string(s, i, &key_end); r != Scan::Done) return stop(r);
    if (!decode_string(s.substr(i, key_end - i), &key)) return stop(Scan::Bad);
    if (need_args && first && key != "name" && key != "type") return stop(Scan::Bad);
    i = skip_ws(s, key_end);
    if (i >= s.size()) return stop(Scan::More);
    if (s[i] != ':') return stop(Scan::Bad);
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return stop(Scan::More);
    const bool args = (key == "arguments" || key == "parameters") && !c.args_seen;
    size_t value_end = 0;
    const Scan r = scan_value(s, i, &value_end);
    if (args) {
      c.args_seen = true;
      c.args_kind = s[i];
      c.args_begin = i;
      c.args_done = r == Scan::Done;
      c.args_end = c.args_done ? value_end : s.size();
      if (c.args_done && c.args_kind == '"' &&
          !decode_string(s.substr(i, value_end - i), &c.args_string))
        return stop(Scan::Bad);
    }
    if (r != Scan::Done) return stop(r);
    if (key == "name" && !c.has_name) {
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
  }
}

// The calls of one block (a marker and what follows it).
struct BlockScan {
  Scan status = Scan::More;
  size_t end = 0;           // Done: past the block; More with calls_done: past the last call
  bool calls_done = false;  // More: every call is complete, only the block's closing may follow
  std::vector<CallScan> calls;
};

BlockScan& block_stop(BlockScan& b, Scan st) {
  b.status = st;
  return b;
}

// One call object, or a list of them, at s[i]; `i` moves past it.
bool scan_objects(std::string_view s, size_t& i, bool need_args, BlockScan& b) {
  const bool list = s[i] == '[';
  if (list) {
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return block_stop(b, Scan::More), false;
  }
  for (;;) {
    if (s[i] != '{') return block_stop(b, Scan::Bad), false;
    b.calls.push_back(scan_call_object(s, i, need_args));
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

// <tool_call> {call} or [{call}, ...] </tool_call>; a missing closing tag ends the block with
// its last call.
BlockScan scan_hermes(std::string_view s, size_t k) {
  BlockScan b;
  size_t i = skip_ws(s, k + kHermesOpen.size());
  if (i >= s.size()) return block_stop(b, Scan::More);
  if (!scan_objects(s, i, false, b)) return b;
  b.end = i;
  const size_t j = skip_ws(s, i);
  const Scan m = match(s, j, kHermesClose);
  if (m == Scan::Done) b.end = j + kHermesClose.size();
  b.calls_done = true;
  return block_stop(b, m == Scan::More ? Scan::More : Scan::Done);
}

// <|python_tag|>? {call} (; or whitespace) {call} ...
BlockScan scan_llama3(std::string_view s, size_t k) {
  BlockScan b;
  size_t i = k;
  if (match(s, i, kPythonTag) == Scan::Done) i += kPythonTag.size();
  i = skip_ws(s, i);
  if (i >= s.size()) return block_stop(b, Scan::More);
  for (;;) {
    if (!scan_objects(s, i, true, b)) return b;
    b.end = i;
    while (i < s.size() && (is_ws(s[i]) || s[i] == ';')) ++i;
    if (i >= s.size() || s[i] != '{') {
      b.calls_done = true;
      return block_stop(b, i >= s.size() ? Scan::More : Scan::Done);
    }
  }
}

// [TOOL_CALLS] [{call}, ...]  or  [TOOL_CALLS]name([CALL_ID]id)?[ARGS]{...}
BlockScan scan_mistral(std::string_view s, size_t k) {
  BlockScan b;
  size_t i = skip_ws(s, k + kMistralCalls.size());
  if (i >= s.size()) return block_stop(b, Scan::More);
  if (s[i] == '[') {
    if (!scan_objects(s, i, false, b)) return b;
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
  size_t value_end = 0;
  const Scan r = scan_value(s, j, &value_end);
  c.args_seen = true;
  c.args_kind = s[j];
  c.args_begin = j;
  c.args_done = r == Scan::Done;
  c.args_end = c.args_done ? value_end : s.size();
  if (r != Scan::Done) return block_stop(b, c.status = r);
  if (c.args_kind == '"' && !decode_string(s.substr(j, value_end - j), &c.args_string))
    return block_stop(b, c.status = Scan::Bad);
  c.end = b.end = value_end;
  c.status = valid_call(c, true, s) ? Scan::Done : Scan::Bad;
  return block_stop(b, c.status);
}

BlockScan scan_block(ToolCallFormat f, std::string_view s, size_t k) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return scan_hermes(s, k);
    case ToolCallFormat::Llama3:
      return scan_llama3(s, k);
    case ToolCallFormat::Mistral:
      return scan_mistral(s, k);
    case ToolCallFormat::None:
      break;
  }
  BlockScan b;
  return block_stop(b, Scan::Bad);
}

// A call is announced (Begin) once its name is complete and its arguments have begun as an
// object, whose text can then be streamed; other arguments (a string, null, none) wait for the
// whole call, so that a call announced can only break off by what follows.
bool can_begin(const CallScan& c) {
  return c.status != Scan::Bad && c.has_name && !c.name.empty() &&
         ((c.args_seen && c.args_kind == '{') || c.status == Scan::Done);
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3:
      return "llama3";
    case ToolCallFormat::Mistral:
      return "mistral";
    case ToolCallFormat::None:
      break;
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  auto has = [&](std::string_view w) { return t.find(w) != npos; };
  if (has(kMistralCalls)) return ToolCallFormat::Mistral;
  // <tool_call> also wraps other syntaxes: XML parameters (Qwen3.5, Nemotron), GLM's
  // arg_key / arg_value, MiniMax's invoke; those are not JSON.
  if (has(kHermesOpen))
    return has("<function=") || has("<arg_key>") || has("<invoke") ? ToolCallFormat::None
                                                                   : ToolCallFormat::Hermes;
  if (has("<|start_header_id|>") && has("\"parameters\"")) return ToolCallFormat::Llama3;
  return ToolCallFormat::None;
}

std::vector<std::string_view> tool_call_markers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return {kHermesOpen, kHermesClose};
    case ToolCallFormat::Llama3:
      return {kPythonTag};
    case ToolCallFormat::Mistral:
      return {kMistralCalls, kMistralArgs, kMistralCallId};
    case ToolCallFormat::None:
      break;
  }
  return {};
}

ToolCallParser::ToolCallParser(ToolCallFormat format, bool parallel)
    : format_(format), parallel_(parallel), rng_(std::random_device{}()) {
  closed_ = format == ToolCallFormat::None;
}

std::vector<ToolCallDelta> ToolCallParser::push(std::string_view text) {
  std::vector<ToolCallDelta> out;
  if (finished_) return out;
  buf_.append(text);
  step(false, out);
  return out;
}

std::vector<ToolCallDelta> ToolCallParser::finish() {
  std::vector<ToolCallDelta> out;
  if (finished_) return out;
  step(true, out);
  finished_ = true;
  return out;
}

std::string ToolCallParser::new_id() {
  static constexpr std::string_view kChars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bool mistral = format_ == ToolCallFormat::Mistral;
  std::string id = mistral ? "" : "call_";
  std::uniform_int_distribution<size_t> pick(0, kChars.size() - 1);
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kChars[pick(rng_)];
  return id;
}

void ToolCallParser::emit_content(size_t from, size_t to, std::vector<ToolCallDelta>& out) {
  if (after_block_) {
    while (from < to && is_ws(buf_[from])) ++from;
    if (from < to) after_block_ = false;
  }
  if (from >= to) return;
  const std::string_view text = std::string_view(buf_).substr(from, to - from);
  content_.append(text);
  if (!out.empty() && out.back().kind == ToolCallDelta::Kind::Content)
    out.back().text.append(text);
  else
    out.push_back({ToolCallDelta::Kind::Content, 0, std::string(text), {}});
}

void ToolCallParser::step(bool at_end, std::vector<ToolCallDelta>& out) {
  while (in_block_ ? step_block(at_end, out) : step_content(at_end, out)) {
  }
}

// Content up to the next call block; true when one starts.
bool ToolCallParser::step_content(bool at_end, std::vector<ToolCallDelta>& out) {
  size_t at = npos;           // a block starts here
  size_t hold = buf_.size();  // text from here may be the start of one
  if (!closed_ && format_ == ToolCallFormat::Llama3) {
    // Llama's calls are the whole answer: only its start (after whitespace) can be one.
    const size_t p = skip_ws(buf_, pos_);
    const Scan tag = match(buf_, p, kPythonTag);
    if (p < buf_.size() && (buf_[p] == '{' || tag == Scan::Done))
      at = p;
    else if (p >= buf_.size() || tag == Scan::More)
      hold = pos_;
    else
      closed_ = true;
  } else if (!closed_) {
    const std::string_view marker = format_ == ToolCallFormat::Hermes ? kHermesOpen : kMistralCalls;
    const size_t from = std::max(pos_, search_from_);
    at = buf_.find(marker, from);
    for (size_t len = std::min(marker.size() - 1, buf_.size() - from); at == npos && len > 0;
         --len) {
      if (std::string_view(buf_).substr(buf_.size() - len) == marker.substr(0, len)) {
        hold = buf_.size() - len;
        break;
      }
    }
  }
  if (at != npos) {
    size_t end = at;  // whitespace before a call is not content (unless it proves no call)
    while (end > pos_ && is_ws(buf_[end - 1])) --end;
    emit_content(pos_, end, out);
    pos_ = end;
    block_at_ = at;
    in_block_ = true;
    block_index_.clear();
    block_sent_.clear();
    return true;
  }
  size_t end = at_end || closed_ ? buf_.size() : hold;
  if (!at_end && !closed_)
    while (end > pos_ && is_ws(buf_[end - 1])) --end;
  emit_content(pos_, std::max(pos_, end), out);
  pos_ = std::max(pos_, end);
  return false;
}

// The block at block_at_: announce calls, send argument text; true when the block is over.
bool ToolCallParser::step_block(bool at_end, std::vector<ToolCallDelta>& out) {
  BlockScan b = scan_block(format_, buf_, block_at_);
  for (size_t j = 0; j < b.calls.size(); ++j) {
    const CallScan& c = b.calls[j];
    if (j == block_index_.size()) {
      if (!can_begin(c)) break;
      block_sent_.push_back(0);
      if (!parallel_ && !calls_.empty()) {
        block_index_.push_back(npos);
        continue;
      }
      block_index_.push_back(calls_.size());
      calls_.push_back({c.id.empty() ? new_id() : c.id, c.name, {}});
      out.push_back({ToolCallDelta::Kind::Begin, calls_.size() - 1, c.name, calls_.back().id});
    }
    if (block_index_[j] == npos || c.status == Scan::Bad) continue;
    // Arguments: an object's text as it arrives; a string's text, or "{}" for null or none,
    // once the call is complete.
    std::string frag;
    size_t& sent = block_sent_[j];
    if (c.args_seen && c.args_kind == '{') {
      frag = buf_.substr(c.args_begin + sent, c.args_end - c.args_begin - sent);
      sent = c.args_end - c.args_begin;
    } else if (c.status == Scan::Done && sent == 0) {
      frag = c.args_seen && c.args_kind == '"' ? c.args_string : "{}";
      sent = 1;
    }
    if (frag.empty()) continue;
    const size_t index = block_index_[j];
    calls_[index].arguments += frag;
    if (!out.empty() && out.back().kind == ToolCallDelta::Kind::Arguments &&
        out.back().index == index)
      out.back().text += frag;
    else
      out.push_back({ToolCallDelta::Kind::Arguments, index, std::move(frag), {}});
  }
  if (b.status == Scan::More && at_end) b.status = b.calls_done ? Scan::Done : Scan::Bad;
  if (b.status == Scan::More) return false;
  in_block_ = false;
  if (format_ == ToolCallFormat::Llama3) closed_ = true;
  if (b.status == Scan::Done) {
    pos_ = search_from_ = b.end;
    after_block_ = true;
    return true;
  }
  if (std::all_of(block_index_.begin(), block_index_.end(), [](size_t x) { return x == npos; })) {
    search_from_ = block_at_ + 1;  // it was no call: its text is content
    return true;
  }
  // A call already announced broke off: from it on (from the block's start and the whitespace
  // before it, when it is the block's first), everything is content.
  broken_ = true;
  closed_ = true;
  for (size_t j = 0; j < b.calls.size(); ++j) {
    if (b.calls[j].status != Scan::Done) {
      if (j > 0) pos_ = b.calls[j].begin;
      break;
    }
    pos_ = b.calls[j].end;
  }
  after_block_ = false;
  return true;
}

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text, bool parallel) {
  ToolCallParser p(format, parallel);
  p.push(text);
  p.finish();
  return {p.content(), p.calls(), p.broken()};
}

}  // namespace minfer::server
