// The value type of the Jinja interpreter: Python's data model, reduced to what chat templates
// use. Undefined (Jinja's default Undefined, carrying the hint its errors print), None, bool,
// int (64-bit), float, str (UTF-8), list / tuple / generator, dict (insertion-ordered, as
// Python's), and callables (built-ins, bound methods, macros).
//
// Python semantics are the point: truthiness, `==` across types (1 == 1.0 == True), ordering,
// str() and repr() (so `{{ [1, 'a'] }}` prints "[1, 'a']" and 1.0 prints "1.0"), and
// json.dumps with Python's separators for the tojson filter.
//
// Ownership: scalars are held inline; strings, lists, dicts and callables are shared
// (std::shared_ptr), so copying a Value is cheap and, as in Python, two copies of a list alias
// the same list (namespace attributes assigned through one copy are seen through the other).
// Strings are immutable once made.
// Thread safety: a Value graph is not synchronised. A render builds its own values; the parsed
// template's constants are only read.
// Failure modes: operations Python refuses (ordering a dict, len() of a generator, json of an
// Undefined) throw TemplateError (template_error.h) with Python's wording.
// Cost: copies are a refcount increment; dict lookups are linear (template dicts are small).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace minfer::tmpl {

class Value;
class Interp;
struct CallArgs;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

// What a sequence is in Python: it decides how it prints and what len()/json accept.
enum class SeqKind : uint8_t { List, Tuple, Generator };

struct ListObj {
  std::vector<Value> items;
  SeqKind seq = SeqKind::List;
};

struct DictObj {
  std::vector<std::pair<Value, Value>> items;  // insertion order, as Python's dict
  bool is_namespace = false;                   // namespace(): attributes assignable by `set`

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
};

using NativeFn = std::function<Value(Interp&, CallArgs&)>;

struct FunctionObj {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  Value() = default;  // Undefined without a hint
  Value(bool b) : kind_(Kind::Bool) { b_ = b; }
  Value(int64_t i) : kind_(Kind::Int) { i_ = i; }
  Value(int i) : kind_(Kind::Int) { i_ = i; }
  Value(double f) : kind_(Kind::Float) { f_ = f; }
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}

  // `hint` is what an error about this Undefined says ("'x' is undefined").
  static Value undefined(std::string hint);
  static Value none();
  static Value list(std::vector<Value> items = {}, SeqKind seq = SeqKind::List);
  static Value dict(DictObj d = {});
  static Value function(std::string name, NativeFn fn);
  // markupsafe.Markup: a string that `+` does not escape, while a plain str added to it is
  // HTML-escaped (what `"..." | safe + x` does in Jinja2, even without autoescape).
  static Value markup(std::string s);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_function() const { return kind_ == Kind::Function; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_float() const { return f_; }
  // Int, Float or Bool as a double (Python's numeric tower).
  double to_double() const;
  const std::string& str() const;
  ListObj& list_obj() const;
  DictObj& dict_obj() const;
  FunctionObj& fn_obj() const;
  std::string undefined_hint() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool markup_ = false;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  // String text, the Undefined hint, or the ListObj / DictObj / FunctionObj.
  std::shared_ptr<void> obj_;
};

// Arguments of a call, as Python receives them.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// ---- Python semantics -------------------------------------------------------------------

bool truthy(const Value& v);
// Python's type name ("dict", "list", "str", "NoneType", ...), for error messages.
const char* type_name(const Value& v);
// str(v) appended to out (Undefined prints nothing). A list or dict whose text would take `out`
// past `limit` bytes throws TemplateError(Limit) part-way (shared sub-lists can make the text
// exponentially larger than the value).
void append_str(std::string& out, const Value& v, size_t limit = SIZE_MAX);
std::string to_str(const Value& v);
std::string repr(const Value& v);
// Python repr() of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf".
std::string format_float(double f);
bool equals(const Value& a, const Value& b);
// <0, 0, >0 as Python orders numbers, strings and sequences; other pairs throw TypeError
// naming `op`.
int compare(const Value& a, const Value& b, const char* op = "<");
// Python len(); throws for values without one (generators, numbers).
int64_t length(const Value& v);

struct JsonStyle {
  int indent = -1;          // < 0: one line
  std::string indent_text;  // used when non-empty (indent given as a string)
  std::string item_sep;     // default ", " (one line) or "," (indented)
  std::string key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
  size_t limit = SIZE_MAX;  // bytes; beyond it TemplateError(Limit), checked while writing
};
// json.dumps(v, ...); throws TypeError for Undefined, generators and callables.
std::string to_json(const Value& v, const JsonStyle& style);

Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// ---- UTF-8 as Python's code-point strings -------------------------------------------------

// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(std::string_view s);

// Number of code points (Python's len()).
int64_t utf8_length(std::string_view s);
// Byte offsets of every code point start, plus s.size() at the end.
std::vector<size_t> utf8_offsets(std::string_view s);
bool is_ascii(std::string_view s);

}  // namespace minfer::tmpl
