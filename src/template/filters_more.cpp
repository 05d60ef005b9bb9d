// More of Jinja2's built-in filters: numbers, indent, wordcount, format, attr, truncate.
#include <cmath>
#include <unordered_map>

#include "template/interp.h"

namespace minfer::tmpl {

namespace {

bool arg_true(const Value& v) {
  return !v.is_undefined() && truthy(v);
}

// Python's int(str) (base 10, surrounding whitespace and '_' between digits allowed).
bool parse_int(std::string_view s, int64_t base, int64_t& out) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  bool neg = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c == '_') continue;
    int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10
                                                          : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
  }
  out = neg ? -v : v;
  return true;
}

bool parse_float(const std::string& s, double& out) {
  try {
    size_t used = 0;
    out = std::stod(s, &used);
    while (used < s.size() && std::isspace(static_cast<unsigned char>(s[used]))) ++used;
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

Value f_int(Interp&, const Value& v, CallArgs& a) {
  auto p = bind_args("int", a, {"default", "base"});
  const Value dflt = p[0].is_undefined() ? Value(int64_t{0}) : p[0];
  const int64_t base = p[1].is_int() ? p[1].as_int() : 10;
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.as_bool()});
  if (v.is_float()) {
    const double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return dflt;
    return Value(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    int64_t i;
    if (parse_int(v.str(), base, i)) return Value(i);
    double f;
    if (parse_float(v.str(), f) && std::isfinite(f) && std::fabs(f) < 9.2e18) {
      return Value(static_cast<int64_t>(f));
    }
  }
  return dflt;
}

Value f_float(Interp&, const Value& v, CallArgs& a) {
  auto p = bind_args("float", a, {"default"});
  const Value dflt = p[0].is_undefined() ? Value(0.0) : p[0];
  if (v.is_number() || v.is_bool()) return Value(v.to_double());
  double f;
  if (v.is_string() && parse_float(v.str(), f)) return Value(f);
  return dflt;
}

Value f_abs(Interp&, const Value& v, CallArgs&) {
  if (v.is_int())
    return v.as_int() == INT64_MIN ? Value(-v.to_double()) : Value(std::abs(v.as_int()));
  if (v.is_bool()) return Value(int64_t{v.as_bool()});
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  throw_error(TemplateErrorKind::Type, "bad operand type for abs(): '{}'", type_name(v));
}

// Python's round(x, n): half to even on the decimal value.
double py_round(double x, int64_t n) {
  const double m = std::pow(10.0, static_cast<double>(n));
  const double y = x * m;
  double r = std::nearbyint(y);  // default rounding mode: half to even
  if (std::fabs(y - std::trunc(y)) != 0.5) r = std::round(y);
  return r / m;
}

Value f_round(Interp&, const Value& v, CallArgs& a) {
  auto p = bind_args("round", a, {"precision", "method"});
  const int64_t prec = p[0].is_int() ? p[0].as_int() : 0;
  const std::string method = p[1].is_string() ? p[1].str() : "common";
  if (!v.is_number() && !v.is_bool()) {
    throw_error(TemplateErrorKind::Type, "type {} doesn't define __round__ method", type_name(v));
  }
  const double x = v.to_double();
  const double m = std::pow(10.0, static_cast<double>(prec));
  if (method == "ceil") return Value(std::ceil(x * m) / m);
  if (method == "floor") return Value(std::floor(x * m) / m);
  if (method != "common")
    throw_error(TemplateErrorKind::Type, "method must be common, ceil or floor");
  return Value(py_round(x, prec));
}

// Python's str.splitlines() boundaries (the ASCII and UTF-8 line separators).
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t skip = 0;
    if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') {
      skip = 1;
    } else if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      skip = 0;
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      skip = 1;
    } else if (c == 0xe2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xa8 ||
                static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
      skip = 2;
    } else {
      cur += static_cast<char>(c);
      continue;
    }
    i += skip;
    lines.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

// Jinja 3.1 indent(): appends "\n" before splitlines so a trailing newline survives.
Value f_indent(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("indent", a, {"width", "first", "blank"});
  std::string ind;
  if (p[0].is_string()) {
    ind = p[0].str();
  } else {
    const int64_t w = p[0].is_int() ? p[0].as_int() : 4;
    in.check_size(static_cast<size_t>(std::max<int64_t>(w, 0)));
    ind.assign(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
  }
  const std::vector<std::string> lines = split_lines(to_str(v) + "\n");
  std::string rv;
  if (arg_true(p[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else if (!lines.empty()) {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += ind;
      rv += lines[i];
    }
  }
  if (arg_true(p[1])) rv = ind + rv;
  in.check_size(rv.size());
  return Value(std::move(rv));
}

Value f_wordcount(Interp&, const Value& v, CallArgs&) {
  const std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    const bool w = std::isalnum(u) || c == '_' || u >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_format(Interp&, const Value& v, CallArgs& a) {
  if (!a.kw.empty()) {
    DictObj d;
    for (auto& [k, x] : a.kw) d.items.emplace_back(Value(k), x);
    return Value(percent_format(to_str(v), Value::dict(std::move(d))));
  }
  return Value(percent_format(to_str(v), Value::list(a.pos, SeqKind::Tuple)));
}

Value f_attr(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("attr", a, {"name"});
  return in.get_attr(v, to_str(p[0]));
}

Value f_truncate(Interp&, const Value& v, CallArgs& a) {
  auto p = bind_args("truncate", a, {"length", "killwords", "end", "leeway"});
  const std::string s = to_str(v);
  const int64_t len = p[0].is_int() ? p[0].as_int() : 255;
  const std::string end = p[2].is_string() ? p[2].str() : "...";
  const int64_t leeway = p[3].is_int() ? p[3].as_int() : 5;
  const std::vector<size_t> offs = utf8_offsets(s);
  const int64_t n = static_cast<int64_t>(offs.size()) - 1;
  if (n <= len + leeway) return Value(s);
  const int64_t keep = std::max<int64_t>(0, len - utf8_length(end));
  std::string head = s.substr(0, offs[static_cast<size_t>(keep)]);
  if (!arg_true(p[1])) {
    const size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head.resize(sp);
  }
  return Value(head + end);
}

Value f_tojson_string(Interp&, const Value& v, CallArgs&) {
  return Value(repr(v));
}

}  // namespace

void register_more_filters(std::unordered_map<std::string, FilterFn>& m) {
  m.emplace("int", f_int);
  m.emplace("float", f_float);
  m.emplace("abs", f_abs);
  m.emplace("round", f_round);
  m.emplace("indent", f_indent);
  m.emplace("wordcount", f_wordcount);
  m.emplace("format", f_format);
  m.emplace("attr", f_attr);
  m.emplace("truncate", f_truncate);
  m.emplace("pprint", f_tojson_string);
}

}  // namespace minfer::tmpl
