// Python methods of str, dict and list that templates call (`content.strip()`,
// `message.get('x')`, `ns.items.append(x)`). Case mapping is ASCII-only: bytes of non-ASCII
// characters pass through unchanged. In the immutable sandbox (HF's), list and dict mutators
// are SecurityErrors, with jinja2's message.
#include <algorithm>
#include <unordered_set>

#include "template/interp.h"

namespace minfer::tmpl {

namespace {

const std::unordered_set<std::string>& str_methods() {
  static const std::unordered_set<std::string> s = {
      "strip",        "lstrip",      "rstrip",  "split",   "rsplit",  "splitlines", "startswith",
      "endswith",     "replace",     "upper",   "lower",   "title",   "capitalize", "swapcase",
      "find",         "rfind",       "index",   "rindex",  "count",   "format",     "join",
      "isdigit",      "isalpha",     "isalnum", "isspace", "isupper", "islower",    "isnumeric",
      "isdecimal",    "zfill",       "center",  "ljust",   "rjust",   "partition",  "rpartition",
      "removeprefix", "removesuffix"};
  return s;
}
const std::unordered_set<std::string>& dict_methods() {
  static const std::unordered_set<std::string> s = {
      "items", "keys", "values", "get", "copy", "update", "pop", "setdefault", "clear", "popitem"};
  return s;
}
const std::unordered_set<std::string>& list_methods() {
  static const std::unordered_set<std::string> s = {"index",  "count",  "copy",   "append",
                                                    "extend", "insert", "pop",    "remove",
                                                    "clear",  "sort",   "reverse"};
  return s;
}

bool is_py_space(unsigned char c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20);
}

std::string_view strip(std::string_view s, const Value& chars, bool left, bool right) {
  if (chars.is_undefined() || chars.is_none()) {
    while (left && !s.empty() && is_py_space(static_cast<unsigned char>(s.front())))
      s.remove_prefix(1);
    while (right && !s.empty() && is_py_space(static_cast<unsigned char>(s.back())))
      s.remove_suffix(1);
    return s;
  }
  if (!chars.is_string()) throw_error(TemplateErrorKind::Type, "strip arg must be None or str");
  // Strip whole code points that occur in `chars`.
  const std::string& set = chars.str();
  std::vector<std::string_view> cps;
  const std::vector<size_t> offs = utf8_offsets(set);
  for (size_t i = 0; i + 1 < offs.size(); ++i)
    cps.push_back(std::string_view(set).substr(offs[i], offs[i + 1] - offs[i]));
  auto match_front = [&]() -> size_t {
    for (auto cp : cps)
      if (s.starts_with(cp)) return cp.size();
    return 0;
  };
  auto match_back = [&]() -> size_t {
    for (auto cp : cps)
      if (s.ends_with(cp)) return cp.size();
    return 0;
  };
  for (size_t n; left && (n = match_front()) > 0;) s.remove_prefix(n);
  for (size_t n; right && (n = match_back()) > 0;) s.remove_suffix(n);
  return s;
}

Value split(Interp& in, const std::string& s, CallArgs& a, bool from_right) {
  auto p = bind_args(from_right ? "rsplit" : "split", a, {"sep", "maxsplit"});
  int64_t maxsplit = p[1].is_int() ? p[1].as_int() : -1;
  std::vector<std::string> parts;
  if (p[0].is_undefined() || p[0].is_none()) {
    // Runs of whitespace separate; no empty strings.
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < s.size();) {
      while (i < s.size() && is_py_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i == s.size()) break;
      size_t j = i;
      while (j < s.size() && !is_py_space(static_cast<unsigned char>(s[j]))) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
      std::string rest = s.substr(words[static_cast<size_t>(maxsplit)].first);
      while (!rest.empty() && is_py_space(static_cast<unsigned char>(rest.back()))) rest.pop_back();
      parts.push_back(rest);
    } else {
      const size_t keep = words.size() - static_cast<size_t>(maxsplit);
      std::string head = s.substr(0, words[keep - 1].second);
      while (!head.empty() && is_py_space(static_cast<unsigned char>(head.front())))
        head.erase(0, 1);
      parts.push_back(head);
      for (size_t k = keep; k < words.size(); ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else {
    if (!p[0].is_string())
      throw_error(TemplateErrorKind::Type, "must be str or None, not {}", type_name(p[0]));
    const std::string& sep = p[0].str();
    if (sep.empty()) throw_error(TemplateErrorKind::Type, "empty separator");
    if (!from_right) {
      size_t b = 0;
      for (int64_t k = 0; maxsplit < 0 || k < maxsplit; ++k) {
        const size_t e = s.find(sep, b);
        if (e == std::string::npos) break;
        parts.push_back(s.substr(b, e - b));
        b = e + sep.size();
      }
      parts.push_back(s.substr(b));
    } else {
      size_t e = s.size();
      for (int64_t k = 0; maxsplit < 0 || k < maxsplit; ++k) {
        if (e < sep.size()) break;
        const size_t b = s.rfind(sep, e - sep.size());
        if (b == std::string::npos) break;
        parts.push_back(s.substr(b + sep.size(), e - b - sep.size()));
        e = b;
      }
      parts.push_back(s.substr(0, e));
      std::reverse(parts.begin(), parts.end());
    }
  }
  in.count_iterations(static_cast<int64_t>(parts.size()));
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& x : parts) out.emplace_back(std::move(x));
  return Value::list(std::move(out));
}

bool affix(const std::string& s, const Value& what, bool prefix) {
  auto one = [&](const Value& v) {
    if (!v.is_string())
      throw_error(TemplateErrorKind::Type, "{}with first arg must be str or a tuple of str",
                  prefix ? "starts" : "ends");
    return prefix ? std::string_view(s).starts_with(v.str())
                  : std::string_view(s).ends_with(v.str());
  };
  if (what.is_list())
    return std::any_of(what.list_obj().items.begin(), what.list_obj().items.end(), one);
  return one(what);
}

Value replace(Interp& in, const std::string& s, CallArgs& a) {
  auto p = bind_args("replace", a, {"old", "new", "count"});
  if (!p[0].is_string() || !p[1].is_string())
    throw_error(TemplateErrorKind::Type, "replace() arguments must be str");
  const std::string &from = p[0].str(), &to = p[1].str();
  int64_t count = p[2].is_int() ? p[2].as_int() : -1;
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const std::vector<size_t> offs = utf8_offsets(s);
    for (size_t i = 0; i + 1 < offs.size() || i == 0; ++i) {
      if (count != 0) {
        out += to;
        --count;
      }
      if (i + 1 < offs.size()) out.append(s, offs[i], offs[i + 1] - offs[i]);
      in.check_size(out.size());
      if (i + 1 >= offs.size()) break;
    }
    if (count != 0 && !s.empty()) out += to;
    return Value(std::move(out));
  }
  size_t b = 0;
  while (count != 0) {
    const size_t e = s.find(from, b);
    if (e == std::string::npos) break;
    out.append(s, b, e - b);
    out += to;
    in.check_size(out.size());
    b = e + from.size();
    --count;
  }
  out.append(s, b);
  return Value(std::move(out));
}

int64_t cp_index(const std::string& s, size_t byte) {
  return utf8_length(std::string_view(s).substr(0, byte));
}

Value find(const std::string& s, CallArgs& a, bool reverse, bool raise) {
  auto p = bind_args(reverse ? "rfind" : "find", a, {"sub", "start", "end"});
  if (!p[0].is_string())
    throw_error(TemplateErrorKind::Type, "must be str, not {}", type_name(p[0]));
  const std::vector<size_t> offs = utf8_offsets(s);
  const int64_t n = static_cast<int64_t>(offs.size()) - 1;
  auto clampi = [&](const Value& v, int64_t d) {
    if (!v.is_int()) return d;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  const size_t b = offs[static_cast<size_t>(clampi(p[1], 0))];
  const size_t e = offs[static_cast<size_t>(clampi(p[2], n))];
  size_t pos = std::string::npos;
  if (b <= e) {
    const std::string_view hay = std::string_view(s).substr(b, e - b);
    const size_t r = reverse ? hay.rfind(p[0].str()) : hay.find(p[0].str());
    if (r != std::string_view::npos) pos = b + r;
  }
  if (pos == std::string::npos) {
    if (raise) throw_error(TemplateErrorKind::Type, "substring not found");
    return Value(int64_t{-1});
  }
  return Value(cp_index(s, pos));
}

Value pad(const std::string& s, CallArgs& a, const char* fn) {
  auto p = bind_args(fn, a, {"width", "fillchar"});
  const int64_t width = p[0].is_int() ? std::min<int64_t>(p[0].as_int(), 1 << 20) : 0;
  const std::string fill = p[1].is_string() ? p[1].str() : " ";
  const int64_t n = utf8_length(s);
  if (width <= n) return Value(s);
  const int64_t total = width - n;
  int64_t left = 0;
  if (std::string_view(fn) == "rjust") left = total;
  if (std::string_view(fn) == "center") left = total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < total; ++i) out += fill;
  return Value(std::move(out));
}

template <typename Pred>
Value all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return Value(false);
  return Value(
      std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)); }));
}

Value case_map(const std::string& s, const std::string& name) {
  std::string out = s;
  bool prev_cased = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(out[i]);
    const bool alpha = std::isalpha(c) != 0;
    if (name == "upper")
      out[i] = static_cast<char>(std::toupper(c));
    else if (name == "lower")
      out[i] = static_cast<char>(std::tolower(c));
    else if (name == "swapcase")
      out[i] = static_cast<char>(std::isupper(c) ? std::tolower(c) : std::toupper(c));
    else if (name == "capitalize")
      out[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
    else if (name == "title")
      out[i] = static_cast<char>(prev_cased ? std::tolower(c) : std::toupper(c));
    prev_cased = alpha;
  }
  return Value(std::move(out));
}

// join, format, predicates, padding, partition, affix removal.
Value str_method_more(Interp& in, const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "format") return Value(str_format(in, s, a));
  if (name == "join") {
    auto p = bind_args("join", a, {"iterable"});
    std::string out;
    size_t i = 0;
    for (const Value& x : iterate(p[0])) {
      if (!x.is_string())
        throw_error(TemplateErrorKind::Type, "sequence item {}: expected str instance, {} found", i,
                    type_name(x));
      if (i++) out += s;
      out += x.str();
      in.check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return all_chars(s, [](unsigned char c) { return std::isdigit(c) != 0; });
  if (name == "isalpha")
    return all_chars(s, [](unsigned char c) { return std::isalpha(c) != 0 || c >= 0x80; });
  if (name == "isalnum")
    return all_chars(s, [](unsigned char c) { return std::isalnum(c) != 0 || c >= 0x80; });
  if (name == "isspace") return all_chars(s, is_py_space);
  if (name == "isupper" || name == "islower") {
    CallArgs none;
    return Value(find_test(name == "isupper" ? "upper" : "lower")(in, Value(s), none));
  }
  if (name == "zfill") {
    auto p = bind_args("zfill", a, {"width"});
    const int64_t w = p[0].is_int() ? std::min<int64_t>(p[0].as_int(), 1 << 20) : 0;
    const int64_t n = utf8_length(s);
    if (w <= n) return Value(s);
    const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
    return Value(s.substr(0, sign) + std::string(static_cast<size_t>(w - n), '0') + s.substr(sign));
  }
  if (name == "center" || name == "ljust" || name == "rjust") return pad(s, a, name.c_str());
  if (name == "partition" || name == "rpartition") {
    auto p = bind_args(name.c_str(), a, {"sep"});
    if (!p[0].is_string() || p[0].str().empty())
      throw_error(TemplateErrorKind::Type, "empty or non-str separator");
    const size_t at = name == "partition" ? s.find(p[0].str()) : s.rfind(p[0].str());
    if (at == std::string::npos) {
      return name == "partition" ? Value::list({Value(s), Value(""), Value("")}, SeqKind::Tuple)
                                 : Value::list({Value(""), Value(""), Value(s)}, SeqKind::Tuple);
    }
    return Value::list({Value(s.substr(0, at)), p[0], Value(s.substr(at + p[0].str().size()))},
                       SeqKind::Tuple);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto p = bind_args(name.c_str(), a, {"affix"});
    if (!p[0].is_string()) throw_error(TemplateErrorKind::Type, "must be str");
    const std::string& x = p[0].str();
    if (name == "removeprefix" && std::string_view(s).starts_with(x))
      return Value(s.substr(x.size()));
    if (name == "removesuffix" && std::string_view(s).ends_with(x) && !x.empty())
      return Value(s.substr(0, s.size() - x.size()));
    return Value(s);
  }
  MINFER_ASSERT(false, "unhandled str method");
  return {};
}

Value str_method(Interp& in, const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto p = bind_args(name.c_str(), a, {"chars"});
    return Value(std::string(strip(s, p[0], name != "rstrip", name != "lstrip")));
  }
  if (name == "split" || name == "rsplit") return split(in, s, a, name == "rsplit");
  if (name == "splitlines") {
    std::vector<Value> out;
    size_t b = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.emplace_back(s.substr(b, i - b));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        b = i + 1;
      }
    }
    if (b < s.size()) out.emplace_back(s.substr(b));
    return Value::list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    auto p = bind_args(name.c_str(), a, {"prefix"});
    return Value(affix(s, p[0], name == "startswith"));
  }
  if (name == "replace") return replace(in, s, a);
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "swapcase")
    return case_map(s, name);
  if (name == "find" || name == "index") return find(s, a, false, name == "index");
  if (name == "rfind" || name == "rindex") return find(s, a, true, name == "rindex");
  if (name == "count") {
    auto p = bind_args("count", a, {"sub"});
    if (!p[0].is_string()) throw_error(TemplateErrorKind::Type, "must be str");
    if (p[0].str().empty()) return Value(utf8_length(s) + 1);
    int64_t n = 0;
    for (size_t b = s.find(p[0].str()); b != std::string::npos;
         b = s.find(p[0].str(), b + p[0].str().size()))
      ++n;
    return Value(n);
  }
  return str_method_more(in, s, name, a);
}

[[noreturn]] void unsafe(const Value& self, const std::string& name) {
  throw_error(TemplateErrorKind::Security, "access to attribute '{}' of '{}' object is unsafe.",
              name, type_name(self));
}

Value dict_method(Interp& in, const Value& self, const std::string& name, CallArgs& a) {
  DictObj& d = self.dict_obj();
  if (name == "items" || name == "keys" || name == "values") {
    bind_args(name.c_str(), a, {});
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) {
      out.push_back(name == "items" ? Value::list({k, v}, SeqKind::Tuple) : name == "keys" ? k : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    auto p = bind_args("get", a, {"key", "default"});
    if (const Value* v = d.find(p[0])) return *v;
    return p[1].is_undefined() ? Value::none() : p[1];
  }
  if (name == "copy") return Value::dict(DictObj{d.items, false});
  if (in.options().immutable) unsafe(self, name);
  if (name == "update") {
    auto p = bind_args("update", a, {"other"});
    if (p[0].is_dict())
      for (const auto& [k, v] : p[0].dict_obj().items) d.set(k, v);
    return Value::none();
  }
  if (name == "pop" || name == "setdefault") {
    auto p = bind_args(name.c_str(), a, {"key", "default"});
    for (auto it = d.items.begin(); it != d.items.end(); ++it) {
      if (!equals(it->first, p[0])) continue;
      Value v = it->second;
      if (name == "pop") d.items.erase(it);
      return v;
    }
    if (name == "setdefault") d.set(p[0], p[1].is_undefined() ? Value::none() : p[1]);
    if (p[1].is_undefined() && name == "pop")
      throw_error(TemplateErrorKind::Type, "KeyError: {}", repr(p[0]));
    return p[1].is_undefined() ? Value::none() : p[1];
  }
  if (name == "clear") {
    d.items.clear();
    return Value::none();
  }
  if (d.items.empty()) throw_error(TemplateErrorKind::Type, "popitem(): dictionary is empty");
  Value kv = Value::list({d.items.back().first, d.items.back().second}, SeqKind::Tuple);
  d.items.pop_back();
  return kv;
}

Value list_method(Interp& in, const Value& self, const std::string& name, CallArgs& a) {
  ListObj& l = self.list_obj();
  if (name == "index" || name == "count") {
    auto p = bind_args(name.c_str(), a, {"value"});
    int64_t n = 0;
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (!equals(l.items[i], p[0])) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") throw_error(TemplateErrorKind::Type, "{} is not in list", repr(p[0]));
    return Value(n);
  }
  if (name == "copy") return Value::list(l.items);
  if (in.options().immutable || l.seq != SeqKind::List) unsafe(self, name);
  if (name == "append") {
    auto p = bind_args("append", a, {"object"});
    in.count_iterations(1);
    l.items.push_back(p[0]);
  } else if (name == "extend") {
    auto p = bind_args("extend", a, {"iterable"});
    std::vector<Value> more = iterate(p[0]);
    in.count_iterations(static_cast<int64_t>(more.size()));
    l.items.insert(l.items.end(), more.begin(), more.end());
  } else if (name == "insert") {
    auto p = bind_args("insert", a, {"index", "object"});
    int64_t i = p[0].is_int() ? p[0].as_int() : 0;
    const int64_t n = static_cast<int64_t>(l.items.size());
    if (i < 0) i += n;
    i = std::clamp<int64_t>(i, 0, n);
    l.items.insert(l.items.begin() + i, p[1]);
  } else if (name == "pop") {
    auto p = bind_args("pop", a, {"index"});
    if (l.items.empty()) throw_error(TemplateErrorKind::Type, "pop from empty list");
    int64_t i = p[0].is_int() ? p[0].as_int() : -1;
    const int64_t n = static_cast<int64_t>(l.items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) throw_error(TemplateErrorKind::Type, "pop index out of range");
    Value v = l.items[static_cast<size_t>(i)];
    l.items.erase(l.items.begin() + i);
    return v;
  } else if (name == "remove") {
    auto p = bind_args("remove", a, {"value"});
    auto it = std::find_if(l.items.begin(), l.items.end(),
                           [&](const Value& v) { return equals(v, p[0]); });
    if (it == l.items.end()) throw_error(TemplateErrorKind::Type, "list.remove(x): x not in list");
    l.items.erase(it);
  } else if (name == "clear") {
    l.items.clear();
  } else if (name == "reverse") {
    std::reverse(l.items.begin(), l.items.end());
  } else {
    std::stable_sort(l.items.begin(), l.items.end(),
                     [](const Value& x, const Value& y) { return compare(x, y) < 0; });
  }
  return Value::none();
}

}  // namespace

bool has_method(const Value& self, const std::string& name) {
  switch (self.kind()) {
    case Kind::String:
      return str_methods().count(name) != 0;
    case Kind::Dict:
      return !self.dict_obj().is_namespace && dict_methods().count(name) != 0;
    case Kind::List:
      return self.list_obj().seq != SeqKind::Generator && list_methods().count(name) != 0;
    default:
      return false;
  }
}

Value call_method(Interp& in, const Value& self, const std::string& name, CallArgs& args) {
  MINFER_ASSERT(has_method(self, name));
  switch (self.kind()) {
    case Kind::String:
      return str_method(in, self.str(), name, args);
    case Kind::Dict:
      return dict_method(in, self, name, args);
    default:
      return list_method(in, self, name, args);
  }
}

}  // namespace minfer::tmpl
