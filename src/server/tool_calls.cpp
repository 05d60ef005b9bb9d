#include "server/tool_calls.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "server/tool_call_scan.h"

namespace minfer::server {

namespace {

using namespace detail;

// A call is announced (Begin) once its name is complete and its arguments have begun as an
// object, whose text can then be streamed; other arguments (a string, null, none) wait for the
// whole call, so that a call announced can only break off by what follows.
bool can_begin(const CallScan& c) {
  return c.status != Scan::Bad && c.has_name && !c.name.empty() &&
         ((c.args_seen && (c.args_kind == '{' || c.args_kind == 'p')) || c.status == Scan::Done);
}

}  // namespace

namespace {

uint8_t type_named(const nlohmann::ordered_json& name) {
  static const std::pair<const char*, uint8_t> kNames[] = {
      {"string", ParamTypes::kString},   {"number", ParamTypes::kNumber},
      {"integer", ParamTypes::kInteger}, {"boolean", ParamTypes::kBoolean},
      {"object", ParamTypes::kObject},   {"array", ParamTypes::kArray},
      {"null", ParamTypes::kNull}};
  for (const auto& [n, bit] : kNames)
    if (name == n) return bit;
  return 0;
}

uint8_t schema_types(const nlohmann::ordered_json& s, int depth) {
  if (!s.is_object() || depth > 16) return 0;
  uint8_t m = 0;
  if (const auto t = s.find("type"); t != s.end()) {
    if (t->is_array())
      for (const auto& n : *t) m |= type_named(n);
    else
      m |= type_named(*t);
  }
  if (const auto e = s.find("enum"); e != s.end() && e->is_array())
    for (const auto& v : *e) m |= ParamTypes::of_value(v);
  if (const auto c = s.find("const"); c != s.end()) m |= ParamTypes::of_value(*c);
  for (const char* key : {"anyOf", "oneOf"}) {
    const auto a = s.find(key);
    if (a == s.end() || !a->is_array()) continue;
    for (const auto& sub : *a) {
      const uint8_t t = schema_types(sub, depth + 1);
      if (t == 0) return 0;  // an alternative of unknown type: anything may come
      m |= t;
    }
  }
  if (m != 0 && s.value("nullable", false) == true) m |= ParamTypes::kNull;
  return m;
}

}  // namespace

uint8_t ParamTypes::of_value(const nlohmann::ordered_json& v) {
  if (v.is_string()) return kString;
  if (v.is_boolean()) return kBoolean;
  if (v.is_null()) return kNull;
  if (v.is_object()) return kObject;
  if (v.is_array()) return kArray;
  return v.is_number_float() ? kNumber : kInteger | kNumber;  // an integer is a number too
}

uint8_t ParamTypes::of_schema(const nlohmann::ordered_json& schema) {
  return schema_types(schema, 0);
}

ParamTypes::ParamTypes(const nlohmann::ordered_json& tools) {
  if (!tools.is_array()) return;
  for (const auto& t : tools) {
    const auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      continue;
    auto& params = types_[(*fn)["name"].get<std::string>()];
    const auto p = fn->find("parameters");
    if (p == fn->end() || !p->is_object() || !p->contains("properties") ||
        !(*p)["properties"].is_object())
      continue;
    for (const auto& [key, schema] : (*p)["properties"].items())
      if (const uint8_t m = of_schema(schema)) params[key] = m;
  }
}

uint8_t ParamTypes::of(std::string_view fn, std::string_view param) const {
  const auto f = types_.find(fn);
  if (f == types_.end()) return 0;
  const auto p = f->second.find(param);
  return p == f->second.end() ? 0 : p->second;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, bool parallel, ParamTypes types)
    : format_(format),
      parallel_(parallel),
      types_(std::move(types)),
      memo_(std::make_unique<detail::ScanMemo>()),
      rng_(std::random_device{}()) {
  // Harmony's calls are messages of their own, read by HarmonyParser: the text is content here.
  closed_ = format == ToolCallFormat::None || format == ToolCallFormat::Harmony;
}

ToolCallParser::~ToolCallParser() = default;
ToolCallParser::ToolCallParser(ToolCallParser&&) noexcept = default;
ToolCallParser& ToolCallParser::operator=(ToolCallParser&&) noexcept = default;

// The JSON text of a parameters call's arguments not sent yet: "{" and each parameter
// complete since `sent` of them went, and "}" once the call is (sent is then npos).
std::string ToolCallParser::param_fragments(const detail::CallScan& c, size_t& sent) const {
  std::string frag;
  if (sent == npos) return frag;
  for (; sent < c.params.size(); ++sent) {
    frag += sent == 0 ? "{" : ", ";
    frag += nlohmann::json(c.params[sent].key)
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    frag += ": " + param_json(c.params[sent], buf_, types_.of(c.name, c.params[sent].key));
  }
  if (c.status == Scan::Done) {
    frag += c.params.empty() ? "{}" : "}";
    sent = npos;
  }
  return frag;
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
    const Scan tag = match(buf_, p, "<|python_tag|>");
    if (p < buf_.size() && (buf_[p] == '{' || tag == Scan::Done))
      at = p;
    else if (p >= buf_.size() || tag == Scan::More)
      hold = pos_;
    else
      closed_ = true;
  } else if (!closed_) {
    const std::string_view marker = block_opener(format_);
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
    memo_->clear();
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
  memo_->types = &types_;  // here, not once: the parser may have moved since
  BlockScan b = scan_block(format_, buf_, block_at_, *memo_);
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
    } else if (c.args_kind == 'p') {
      frag = param_fragments(c, sent);
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

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text, bool parallel,
                                 const ParamTypes& types) {
  ToolCallParser p(format, parallel, types);
  p.push(text);
  p.finish();
  return {p.content(), p.calls(), p.broken()};
}

}  // namespace minfer::server
