// Jinja2's built-in filters (jinja2/filters.py, 3.1 semantics) plus HF's tojson. Filters that
// are generators in Jinja (map, select, reject, selectattr, rejectattr, unique, batch, reverse
// of a list) return SeqKind::Generator, so `| tojson` and `| length` on them fail as they do
// in Python and `| list` turns them into lists.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "template/interp.h"

namespace minfer::tmpl {

std::vector<Value> bind_args(const char* fn, CallArgs& args,
                             std::initializer_list<const char*> names) {
  std::vector<Value> out(names.size());
  if (args.pos.size() > names.size()) {
    throw_error(TemplateErrorKind::Type, "{}() takes at most {} arguments ({} given)", fn,
                names.size(), args.pos.size());
  }
  for (size_t i = 0; i < args.pos.size(); ++i) out[i] = args.pos[i];
  for (auto& [k, v] : args.kw) {
    size_t i = 0;
    for (const char* n : names) {
      if (k == n) break;
      ++i;
    }
    if (i == names.size()) {
      throw_error(TemplateErrorKind::Type, "{}() got an unexpected keyword argument '{}'", fn, k);
    }
    out[i] = v;
  }
  return out;
}

namespace {

Value gen(std::vector<Value> items) {
  return Value::list(std::move(items), SeqKind::Generator);
}

bool arg_true(const Value& v) {
  return !v.is_undefined() && truthy(v);
}

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Jinja's make_attrgetter: "a.b.0" looks up each part, a digit part as an integer index.
Value attr_path(Interp& in, const Value& item, const Value& attribute) {
  if (attribute.is_int()) return in.get_item(item, attribute);
  Value cur = item;
  const std::string path = to_str(attribute);
  size_t b = 0;
  while (true) {
    const size_t e = path.find('.', b);
    const std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? in.get_item(cur, Value(static_cast<int64_t>(std::stoll(part))))
                 : in.get_item(cur, Value(part));
    if (e == std::string::npos) return cur;
    b = e + 1;
  }
}

// A sort / unique key: the attribute, lower-cased when comparing case-insensitively.
Value sort_key(Interp& in, const Value& v, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_undefined() || attribute.is_none() ? v : attr_path(in, v, attribute);
  if (!case_sensitive && k.is_string()) return Value(lower_ascii(k.str()));
  return k;
}

Value f_tojson(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  st.ensure_ascii = arg_true(p[0]);
  if (p[1].is_int()) st.indent = static_cast<int>(std::clamp<int64_t>(p[1].as_int(), 0, 64));
  if (p[1].is_string()) {
    st.indent = 0;
    st.indent_text = p[1].str();
  }
  st.item_sep = st.indent >= 0 ? "," : ", ";
  if (p[2].is_list()) {
    const auto& s = p[2].list_obj().items;
    if (s.size() != 2 || !s[0].is_string() || !s[1].is_string()) {
      throw_error(TemplateErrorKind::Type, "tojson: separators must be two strings");
    }
    st.item_sep = s[0].str();
    st.key_sep = s[1].str();
  }
  st.sort_keys = arg_true(p[3]);
  st.limit = in.options().limits.max_output_bytes;
  std::string out = to_json(v, st);
  in.check_size(out.size());
  return Value(std::move(out));
}

Value f_length(Interp&, const Value& v, CallArgs&) {
  return Value(length(v));
}

Value f_string(Interp&, const Value& v, CallArgs&) {
  return Value(to_str(v));
}

Value f_safe(Interp&, const Value& v, CallArgs&) {
  return Value::markup(to_str(v));
}

Value f_escape(Interp&, const Value& v, CallArgs&) {
  if (v.is_markup()) return v;
  return Value::markup(html_escape(to_str(v)));
}

Value f_forceescape(Interp&, const Value& v, CallArgs&) {
  return Value::markup(html_escape(to_str(v)));
}

Value f_trim(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("trim", a, {"chars"});
  CallArgs m;
  if (!p[0].is_undefined()) m.pos.push_back(p[0]);
  return call_method(in, Value(to_str(v)), "strip", m);
}

Value string_method(Interp& in, const Value& v, const char* name, CallArgs& a) {
  return call_method(in, Value(to_str(v)), name, a);
}
Value f_upper(Interp& in, const Value& v, CallArgs& a) {
  return string_method(in, v, "upper", a);
}
Value f_lower(Interp& in, const Value& v, CallArgs& a) {
  return string_method(in, v, "lower", a);
}
Value f_capitalize(Interp& in, const Value& v, CallArgs& a) {
  return string_method(in, v, "capitalize", a);
}
Value f_center(Interp& in, const Value& v, CallArgs& a) {
  return string_method(in, v, "center", a);
}

// Jinja's title: words start after whitespace or one of -([{<.
Value f_title(Interp&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  bool start = true;
  for (char& c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      start = true;
      continue;
    }
    c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
    start = false;
  }
  return Value(std::move(s));
}

Value f_replace(Interp& in, const Value& v, CallArgs& a) {
  return string_method(in, v, "replace", a);
}

Value f_default(Interp&, const Value& v, CallArgs& a) {
  auto p = bind_args("default", a, {"default_value", "boolean"});
  const Value dflt = p[0].is_undefined() ? Value("") : p[0];
  if (v.is_undefined() || (arg_true(p[1]) && !truthy(v))) return dflt;
  return v;
}

Value f_list(Interp&, const Value& v, CallArgs&) {
  return Value::list(iterate(v));
}

Value f_first(Interp&, const Value& v, CallArgs&) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interp&, const Value& v, CallArgs&) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_join(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("join", a, {"d", "attribute"});
  const std::string sep = p[0].is_undefined() ? "" : to_str(p[0]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(out, p[1].is_undefined() ? item : attr_path(in, item, p[1]),
               in.options().limits.max_output_bytes);
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_map(Interp& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return gen({});  // jinja2: `if value: for item in value: ...`
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (auto& [k, x] : a.kw) {
    if (k == "attribute") attribute = &x;
    if (k == "default") dflt = &x;
  }
  if (attribute) {
    for (const Value& item : iterate(v)) {
      Value r = attr_path(in, item, *attribute);
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return gen(std::move(out));
  }
  if (a.pos.empty()) throw_error(TemplateErrorKind::Type, "map requires a filter argument");
  const std::string name = to_str(a.pos[0]);
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(in.apply_filter(name, item, copy));
  }
  return gen(std::move(out));
}

// select / reject (attr=false) and selectattr / rejectattr (attr=true).
Value select_impl(Interp& in, const Value& v, CallArgs& a, bool attr, bool keep) {
  if (!truthy(v)) return gen({});  // jinja2: `if value: for item in value: ...`
  size_t i = 0;
  Value attribute;
  if (attr) {
    if (a.pos.empty()) throw_error(TemplateErrorKind::Type, "selectattr needs an attribute");
    attribute = a.pos[i++];
  }
  std::string test;
  if (i < a.pos.size()) test = to_str(a.pos[i++]);
  CallArgs targs;
  targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(i), a.pos.end());
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value x = attr ? attr_path(in, item, attribute) : item;
    CallArgs copy = targs;
    const bool pass = test.empty() ? truthy(x) : in.apply_test(test, x, copy);
    if (pass == keep) out.push_back(item);
  }
  return gen(std::move(out));
}
Value f_select(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, false);
}

Value f_items(Interp&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return gen({});
  if (!v.is_dict()) throw_error(TemplateErrorKind::Type, "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict_obj().items) out.push_back(Value::list({k, x}, SeqKind::Tuple));
  return gen(std::move(out));
}

Value f_dictsort(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw_error(TemplateErrorKind::Type, "dictsort needs a mapping");
  const bool by_value = p[1].is_string() && p[1].str() == "value";
  std::vector<Value> pairs;
  for (const auto& [k, x] : v.dict_obj().items)
    pairs.push_back(Value::list({k, x}, SeqKind::Tuple));
  const bool cs = arg_true(p[0]);
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& l, const Value& r) {
    const size_t i = by_value ? 1 : 0;
    return compare(sort_key(in, l.list_obj().items[i], Value(), cs),
                   sort_key(in, r.list_obj().items[i], Value(), cs)) < 0;
  });
  if (arg_true(p[2])) std::reverse(pairs.begin(), pairs.end());
  return Value::list(std::move(pairs));
}

Value f_sort(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("sort", a, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> items = iterate(v);
  const bool cs = arg_true(p[1]);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& x : items) keyed.emplace_back(sort_key(in, x, p[2], cs), std::move(x));
  const bool rev = arg_true(p[0]);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& l, const auto& r) {
    return rev ? compare(r.first, l.first) < 0 : compare(l.first, r.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_unique(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("unique", a, {"case_sensitive", "attribute"});
  std::vector<Value> seen, out;
  for (const Value& x : iterate(v)) {
    Value k = sort_key(in, x, p[1], arg_true(p[0]));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); }))
      continue;
    seen.push_back(std::move(k));
    out.push_back(x);
  }
  return gen(std::move(out));
}

Value min_max(Interp& in, const Value& v, CallArgs& a, bool want_max) {
  auto p = bind_args(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(in, items[0], p[1], arg_true(p[0]));
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(in, items[i], p[1], arg_true(p[0]));
    const int c = compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Value f_min(Interp& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, false);
}
Value f_max(Interp& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, true);
}

Value f_sum(Interp& in, const Value& v, CallArgs& a) {
  auto p = bind_args("sum", a, {"attribute", "start"});
  Value acc = p[1].is_undefined() ? Value(int64_t{0}) : p[1];
  for (const Value& x : iterate(v)) {
    const Value item = p[0].is_undefined() ? x : attr_path(in, x, p[0]);
    acc = binary_op(in, Op::Add, acc, item);
  }
  return acc;
}

Value f_reverse(Interp&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    const std::vector<size_t> offs = utf8_offsets(v.str());
    std::string out;
    for (size_t i = offs.size() - 1; i > 0; --i)
      out.append(v.str(), offs[i - 1], offs[i] - offs[i - 1]);
    return Value(std::move(out));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return gen(std::move(items));
}

Value f_batch(Interp&, const Value& v, CallArgs& a) {
  auto p = bind_args("batch", a, {"linecount", "fill_with"});
  if (!p[0].is_int() || p[0].as_int() <= 0)
    throw_error(TemplateErrorKind::Type, "batch needs a positive count");
  const size_t n = static_cast<size_t>(p[0].as_int());
  std::vector<Value> out, cur;
  for (const Value& x : iterate(v)) {
    cur.push_back(x);
    if (cur.size() == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (!p[1].is_undefined()) cur.resize(n, p[1]);
    out.push_back(Value::list(std::move(cur)));
  }
  return gen(std::move(out));
}

}  // namespace

// The rest (numbers, indent, wordcount, format, attr, ...) live in filters_more.cpp.
void register_more_filters(std::unordered_map<std::string, FilterFn>& m);

FilterFn find_filter(const std::string& name) {
  static const std::unordered_map<std::string, FilterFn> table = [] {
    std::unordered_map<std::string, FilterFn> m = {
        {"tojson", f_tojson},
        {"length", f_length},
        {"count", f_length},
        {"string", f_string},
        {"safe", f_safe},
        {"e", f_escape},
        {"escape", f_escape},
        {"forceescape", f_forceescape},
        {"trim", f_trim},
        {"upper", f_upper},
        {"lower", f_lower},
        {"capitalize", f_capitalize},
        {"center", f_center},
        {"title", f_title},
        {"replace", f_replace},
        {"default", f_default},
        {"d", f_default},
        {"list", f_list},
        {"first", f_first},
        {"last", f_last},
        {"join", f_join},
        {"map", f_map},
        {"select", f_select},
        {"reject", f_reject},
        {"selectattr", f_selectattr},
        {"rejectattr", f_rejectattr},
        {"items", f_items},
        {"dictsort", f_dictsort},
        {"sort", f_sort},
        {"unique", f_unique},
        {"min", f_min},
        {"max", f_max},
        {"sum", f_sum},
        {"reverse", f_reverse},
        {"batch", f_batch},
    };
    register_more_filters(m);
    return m;
  }();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace minfer::tmpl
