#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "template/template_error.h"

namespace minfer::tmpl {

// ---- Value ---------------------------------------------------------------------------------

Value::Value(std::string s)
    : kind_(Kind::String), obj_(std::make_shared<std::string>(std::move(s))) {}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.obj_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::list(std::vector<Value> items, SeqKind seq) {
  Value v;
  v.kind_ = Kind::List;
  v.obj_ = std::make_shared<ListObj>(ListObj{std::move(items), seq});
  return v;
}

Value Value::dict(DictObj d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.obj_ = std::make_shared<DictObj>(std::move(d));
  return v;
}

Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.obj_ = std::make_shared<FunctionObj>(FunctionObj{std::move(name), std::move(fn)});
  return v;
}

double Value::to_double() const {
  switch (kind_) {
    case Kind::Int:
      return static_cast<double>(i_);
    case Kind::Float:
      return f_;
    case Kind::Bool:
      return b_ ? 1.0 : 0.0;
    default:
      MINFER_ASSERT(false, "to_double of a non-number");
  }
  return 0;
}

const std::string& Value::str() const {
  MINFER_ASSERT(kind_ == Kind::String);
  return *static_cast<const std::string*>(obj_.get());
}

ListObj& Value::list_obj() const {
  MINFER_ASSERT(kind_ == Kind::List);
  return *static_cast<ListObj*>(obj_.get());
}

DictObj& Value::dict_obj() const {
  MINFER_ASSERT(kind_ == Kind::Dict);
  return *static_cast<DictObj*>(obj_.get());
}

FunctionObj& Value::fn_obj() const {
  MINFER_ASSERT(kind_ == Kind::Function);
  return *static_cast<FunctionObj*>(obj_.get());
}

std::string Value::undefined_hint() const {
  MINFER_ASSERT(kind_ == Kind::Undefined);
  if (!obj_) return "value is undefined";
  return *static_cast<const std::string*>(obj_.get());
}

// ---- DictObj -------------------------------------------------------------------------------

const Value* DictObj::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictObj::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void DictObj::set(const Value& key, Value v) {
  if (const Value* old = find(key)) {
    *const_cast<Value*>(old) = std::move(v);
    return;
  }
  items.emplace_back(key, std::move(v));
}

// ---- truthiness, names, str / repr --------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return v.as_bool();
    case Kind::Int:
      return v.as_int() != 0;
    case Kind::Float:
      return v.as_float() != 0.0;
    case Kind::String:
      return !v.str().empty();
    case Kind::List:
      // A generator is an object, and objects are true.
      return v.list_obj().seq == SeqKind::Generator || !v.list_obj().items.empty();
    case Kind::Dict:
      return v.dict_obj().is_namespace || !v.dict_obj().items.empty();
    case Kind::Function:
      return true;
  }
  return false;
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      switch (v.list_obj().seq) {
        case SeqKind::List:
          return "list";
        case SeqKind::Tuple:
          return "tuple";
        case SeqKind::Generator:
          return "generator";
      }
      return "list";
    case Kind::Dict:
      return v.dict_obj().is_namespace ? "Namespace" : "dict";
    case Kind::Function:
      return "function";
  }
  return "object";
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, then laid out as Python's repr does:
  // positional for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  if (exp >= -5 + 1 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." +
            digits.substr(static_cast<size_t>(exp + 1));
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return fmt::format("{}{}e{}{:02d}", sign, out, exp < 0 ? '-' : '+', std::abs(exp));
}

namespace {

void append_repr_str(std::string& out, std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  out += q;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
      // U+0080..U+009F are not printable: Python shows them as \x80..\x9f.
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i + 1]));
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
}

void append_repr(std::string& out, const Value& v, size_t limit);

void check_limit(const std::string& out, size_t limit) {
  if (out.size() > limit) {
    throw_error(TemplateErrorKind::Limit, "printed value larger than {} bytes", limit);
  }
}

void append_seq(std::string& out, const ListObj& l, size_t limit) {
  const bool tuple = l.seq == SeqKind::Tuple;
  out += tuple ? '(' : '[';
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, l.items[i], limit);
    check_limit(out, limit);
  }
  if (tuple && l.items.size() == 1) out += ',';
  out += tuple ? ')' : ']';
}

void append_dict(std::string& out, const DictObj& d, size_t limit) {
  if (d.is_namespace) out += "<Namespace ";
  out += '{';
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, d.items[i].first, limit);
    out += ": ";
    append_repr(out, d.items[i].second, limit);
    check_limit(out, limit);
  }
  out += '}';
  if (d.is_namespace) out += '>';
}

void append_repr(std::string& out, const Value& v, size_t limit) {
  if (v.is_string()) {
    append_repr_str(out, v.str());
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    append_str(out, v, limit);
  }
}

}  // namespace

void append_str(std::string& out, const Value& v, size_t limit) {
  switch (v.kind()) {
    case Kind::Undefined:
      return;
    case Kind::None:
      out += "None";
      return;
    case Kind::Bool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Kind::Int:
      out += fmt::format("{}", v.as_int());
      return;
    case Kind::Float:
      out += format_float(v.as_float());
      return;
    case Kind::String:
      out += v.str();
      return;
    case Kind::List:
      if (v.list_obj().seq == SeqKind::Generator) {
        out += "<generator object>";
      } else {
        append_seq(out, v.list_obj(), limit);
      }
      return;
    case Kind::Dict:
      append_dict(out, v.dict_obj(), limit);
      return;
    case Kind::Function:
      out += "<function " + v.fn_obj().name + ">";
      return;
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str(out, v);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v, SIZE_MAX);
  return out;
}

// ---- comparison ---------------------------------------------------------------------------

namespace {

bool numeric(const Value& v) {
  return v.is_int() || v.is_float() || v.is_bool();
}

int sign_of(double d) {
  return d < 0 ? -1 : (d > 0 ? 1 : 0);
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (numeric(a) && numeric(b)) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x == y;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return a.str() == b.str();
    case Kind::List: {
      const ListObj &x = a.list_obj(), &y = b.list_obj();
      if (&x == &y) return true;
      if (x.seq == SeqKind::Generator || y.seq == SeqKind::Generator) return false;
      if ((x.seq == SeqKind::Tuple) != (y.seq == SeqKind::Tuple)) return false;
      if (x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Kind::Dict: {
      const DictObj &x = a.dict_obj(), &y = b.dict_obj();
      if (&x == &y) return true;
      if (x.is_namespace || y.is_namespace) return false;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Kind::Function:
      return &a.fn_obj() == &b.fn_obj();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  if (numeric(a) && numeric(b)) {
    if (a.is_float() || b.is_float()) return sign_of(a.to_double() - b.to_double());
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 is code-point order, which is what Python compares.
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.list_obj().seq == b.list_obj().seq &&
      a.list_obj().seq != SeqKind::Generator) {
    const auto &x = a.list_obj().items, &y = b.list_obj().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined()) {
    throw_error(TemplateErrorKind::Undefined, "{}", (a.is_undefined() ? a : b).undefined_hint());
  }
  throw_error(TemplateErrorKind::Type, "'{}' not supported between instances of '{}' and '{}'", op,
              type_name(a), type_name(b));
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return 0;
    case Kind::String:
      return utf8_length(v.str());
    case Kind::List:
      if (v.list_obj().seq == SeqKind::Generator) break;
      return static_cast<int64_t>(v.list_obj().items.size());
    case Kind::Dict:
      if (v.dict_obj().is_namespace) break;
      return static_cast<int64_t>(v.dict_obj().items.size());
    default:
      break;
  }
  throw_error(TemplateErrorKind::Type, "object of type '{}' has no len()", type_name(v));
}

// ---- UTF-8 ---------------------------------------------------------------------------------

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) offs.push_back(i);
  }
  offs.push_back(s.size());
  return offs;
}

}  // namespace minfer::tmpl
