// Jinja2's built-in tests (`x is name`), jinja2/tests.py semantics.
#include <unordered_map>

#include "template/interp.h"

namespace minfer::tmpl {

namespace {

const Value& arg0(const char* test, CallArgs& a) {
  if (a.pos.empty()) {
    if (!a.kw.empty()) return a.kw[0].second;
    throw_error(TemplateErrorKind::Type, "test '{}' needs an argument", test);
  }
  return a.pos[0];
}

bool t_defined(Interp&, const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(Interp&, const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_boolean(Interp&, const Value& v, CallArgs&) {
  return v.is_bool();
}
bool t_true(Interp&, const Value& v, CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(Interp&, const Value& v, CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interp&, const Value& v, CallArgs&) {
  return v.is_int();
}
bool t_float(Interp&, const Value& v, CallArgs&) {
  return v.is_float();
}
bool t_number(Interp&, const Value& v, CallArgs&) {
  return v.is_number() || v.is_bool();
}
bool t_string(Interp&, const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_mapping(Interp&, const Value& v, CallArgs&) {
  return v.is_dict() && !v.dict_obj().is_namespace;
}
// Undefined iterates as empty in Jinja, so it is iterable.
bool t_iterable(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() ||
         (v.is_dict() && !v.dict_obj().is_namespace);
}
bool t_sequence(Interp&, const Value& v, CallArgs&) {
  return v.is_string() || (v.is_list() && v.list_obj().seq != SeqKind::Generator) ||
         (v.is_dict() && !v.dict_obj().is_namespace);
}
bool t_callable(Interp&, const Value& v, CallArgs&) {
  return v.is_function();
}
bool t_odd(Interp&, const Value& v, CallArgs&) {
  if (!v.is_int()) throw_error(TemplateErrorKind::Type, "'odd' needs an integer");
  return v.as_int() % 2 != 0;
}
bool t_even(Interp&, const Value& v, CallArgs&) {
  if (!v.is_int()) throw_error(TemplateErrorKind::Type, "'even' needs an integer");
  return v.as_int() % 2 == 0;
}
bool t_divisibleby(Interp&, const Value& v, CallArgs& a) {
  const Value& d = arg0("divisibleby", a);
  if (!v.is_int() || !d.is_int())
    throw_error(TemplateErrorKind::Type, "'divisibleby' needs integers");
  if (d.as_int() == 0) throw_error(TemplateErrorKind::Type, "integer modulo by zero");
  if (d.as_int() == -1) return true;
  return v.as_int() % d.as_int() == 0;
}
bool t_eq(Interp&, const Value& v, CallArgs& a) {
  return equals(v, arg0("eq", a));
}
bool t_ne(Interp&, const Value& v, CallArgs& a) {
  return !equals(v, arg0("ne", a));
}
bool t_lt(Interp&, const Value& v, CallArgs& a) {
  return compare(v, arg0("lt", a), "<") < 0;
}
bool t_le(Interp&, const Value& v, CallArgs& a) {
  return compare(v, arg0("le", a), "<=") <= 0;
}
bool t_gt(Interp&, const Value& v, CallArgs& a) {
  return compare(v, arg0("gt", a), ">") > 0;
}
bool t_ge(Interp&, const Value& v, CallArgs& a) {
  return compare(v, arg0("ge", a), ">=") >= 0;
}
bool t_in(Interp& in, const Value& v, CallArgs& a) {
  const Value& seq = arg0("in", a);
  if (seq.is_string()) {
    if (!v.is_string()) {
      throw_error(TemplateErrorKind::Type, "'in <string>' requires string as left operand");
    }
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_dict()) return seq.dict_obj().find(v) != nullptr;
  for (const Value& x : iterate(seq)) {
    if (equals(x, v)) return true;
  }
  return false;
}
bool t_sameas(Interp&, const Value& v, CallArgs& a) {
  const Value& o = arg0("sameas", a);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::List:
      return &v.list_obj() == &o.list_obj();
    case Kind::Dict:
      return &v.dict_obj() == &o.dict_obj();
    case Kind::Function:
      return &v.fn_obj() == &o.fn_obj();
    default:
      return equals(v, o);
  }
}
bool t_lower(Interp&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char c : v.str()) {
    if (std::isupper(static_cast<unsigned char>(c))) return false;
    cased |= std::islower(static_cast<unsigned char>(c)) != 0;
  }
  return cased;
}
bool t_upper(Interp&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char c : v.str()) {
    if (std::islower(static_cast<unsigned char>(c))) return false;
    cased |= std::isupper(static_cast<unsigned char>(c)) != 0;
  }
  return cased;
}
bool t_escaped(Interp&, const Value&, CallArgs&) {
  return false;
}
bool t_filter(Interp&, const Value& v, CallArgs&) {
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interp&, const Value& v, CallArgs&) {
  return v.is_string() && find_test(v.str()) != nullptr;
}

}  // namespace

TestFn find_test(const std::string& name) {
  static const std::unordered_map<std::string, TestFn> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
      {"escaped", t_escaped},
      {"filter", t_filter},
      {"test", t_test},
  };
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace minfer::tmpl
