// Expressions of the evaluator (interp.h): names, operators with Python's semantics, attribute
// and item access with Jinja's fallbacks, slicing, calls, filters and tests.
#include <cmath>

#include "template/interp.h"

namespace minfer::tmpl {

namespace {

[[noreturn]] void undefined_error(const Value& v) {
  throw_error(TemplateErrorKind::Undefined, "{}", v.undefined_hint());
}

[[noreturn]] void operand_error(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  throw_error(TemplateErrorKind::Type, "unsupported operand type(s) for {}: '{}' and '{}'", op,
              type_name(a), type_name(b));
}

bool intlike(const Value& v) {
  return v.is_int() || v.is_bool();
}
int64_t int_of(const Value& v) {
  return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int();
}
bool numeric(const Value& v) {
  return v.is_number() || v.is_bool();
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(Interp& in, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    in.check_size(seq.str().size() * static_cast<size_t>(n));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  const ListObj& l = seq.list_obj();
  in.count_iterations(static_cast<int64_t>(l.items.size()) * n);
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.items.begin(), l.items.end());
  return Value::list(std::move(out), l.seq);
}

// int op int as Python computes it; false when the result leaves int64 (Python would grow a
// big int; we fall back to float arithmetic).
bool int_arith(Op op, int64_t x, int64_t y, int64_t& r) {
  switch (op) {
    case Op::Add:
      return !__builtin_add_overflow(x, y, &r);
    case Op::Sub:
      return !__builtin_sub_overflow(x, y, &r);
    case Op::Mul:
      return !__builtin_mul_overflow(x, y, &r);
    case Op::FloorDiv:
      if (x == INT64_MIN && y == -1) return false;
      r = floor_div(x, y);
      return true;
    case Op::Mod:
      r = y == -1 ? 0 : x - floor_div(x, y) * y;
      return true;
    case Op::Pow: {
      if (y < 0) return false;
      r = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(r, x, &r)) return false;
        if (r == 0 || r == 1) break;  // 0**n, 1**n: no need to loop n times
      }
      // (-1)**n alternates; the early exit above only holds for r == 1 when x == 1.
      if (x == -1) r = (y % 2 == 0) ? 1 : -1;
      return true;
    }
    default:
      return false;
  }
}

Value arith(Interp& in, Op op, const Value& a, const Value& b) {
  static const char* kSym[] = {"+", "-", "*", "/", "//", "%", "**"};
  const char* sym = kSym[static_cast<int>(op)];
  if (numeric(a) && numeric(b)) {
    if ((op == Op::Div || op == Op::FloorDiv || op == Op::Mod) && b.to_double() == 0) {
      throw_error(TemplateErrorKind::Type, "division by zero");
    }
    int64_t r = 0;
    if (intlike(a) && intlike(b) && int_arith(op, int_of(a), int_of(b), r)) return Value(r);
    const double x = a.to_double(), y = b.to_double();
    switch (op) {
      case Op::Add:
        return Value(x + y);
      case Op::Sub:
        return Value(x - y);
      case Op::Mul:
        return Value(x * y);
      case Op::Div:
        return Value(x / y);
      case Op::FloorDiv:
        return Value(std::floor(x / y));
      case Op::Mod: {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value(m);
      }
      case Op::Pow:
        return Value(std::pow(x, y));
      default:
        break;
    }
  }
  if (op == Op::Add && a.is_string() && b.is_string()) {
    in.check_size(a.str().size() + b.str().size());
    if (a.is_markup() == b.is_markup()) {
      Value r(a.str() + b.str());
      return a.is_markup() ? Value::markup(r.str()) : r;
    }
    // Markup + str escapes the str (markupsafe's __add__ / __radd__).
    return Value::markup(a.is_markup() ? a.str() + html_escape(b.str())
                                       : html_escape(a.str()) + b.str());
  }
  if (op == Op::Add && a.is_list() && b.is_list() && a.list_obj().seq == b.list_obj().seq &&
      a.list_obj().seq != SeqKind::Generator) {
    // Counted like iterations: `set ns.l = ns.l + ns.l` in a loop doubles each time.
    in.count_iterations(
        static_cast<int64_t>(a.list_obj().items.size() + b.list_obj().items.size()));
    std::vector<Value> out = a.list_obj().items;
    out.insert(out.end(), b.list_obj().items.begin(), b.list_obj().items.end());
    return Value::list(std::move(out), a.list_obj().seq);
  }
  if (op == Op::Mul) {
    if ((a.is_string() || a.is_list()) && intlike(b)) return repeat(in, a, int_of(b));
    if ((b.is_string() || b.is_list()) && intlike(a)) return repeat(in, b, int_of(a));
  }
  if (op == Op::Mod && a.is_string()) return Value(percent_format(a.str(), b));
  operand_error(sym, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::String:
      if (!item.is_string()) {
        throw_error(TemplateErrorKind::Type,
                    "'in <string>' requires string as left operand, not {}", type_name(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::Dict:
      return container.dict_obj().find(item) != nullptr;
    case Kind::List:
      for (const Value& v : container.list_obj().items) {
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::Undefined:
      return false;
    default:
      throw_error(TemplateErrorKind::Type, "argument of type '{}' is not iterable",
                  type_name(container));
  }
}

}  // namespace

Value binary_op(Interp& in, Op op, const Value& a, const Value& b) {
  return arith(in, op, a, b);
}

Value Interp::eval(const Expr& e) {
  DepthGuard guard(*this);
  try {
    return eval_inner(e);
  } catch (const TemplateError& err) {
    if (err.line() == 0) throw TemplateError(err.template_kind(), err.message(), e.line, e.col);
    throw;
  }
}

Value Interp::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name:
      return eval_name(e);
    case ExprKind::List:
    case ExprKind::Tuple:
    case ExprKind::Dict:
      return eval_collection(e);
    case ExprKind::GetAttr:
      return get_attr(eval(*e.kids[0]), e.name);
    case ExprKind::GetItem:
      return get_item(eval(*e.kids[0]), eval(*e.kids[1]));
    case ExprKind::Slice:
      return eval_slice(e);
    case ExprKind::Call:
      return eval_call(e);
    case ExprKind::Filter:
      return eval_filter(e);
    case ExprKind::Test:
      return eval_test(e);
    case ExprKind::Unary: {
      const Value v = eval(*e.kids[0]);
      if (e.op == Op::Not) return Value(!truthy(v));
      if (v.is_undefined()) undefined_error(v);
      if (!numeric(v)) {
        throw_error(TemplateErrorKind::Type, "bad operand type for unary {}: '{}'",
                    e.op == Op::Neg ? "-" : "+", type_name(v));
      }
      if (e.op == Op::Pos) return intlike(v) ? Value(int_of(v)) : v;
      if (intlike(v)) return int_of(v) == INT64_MIN ? Value(-v.to_double()) : Value(-int_of(v));
      return Value(-v.as_float());
    }
    case ExprKind::Binary:
      return eval_binary(e);
    case ExprKind::Compare:
      return eval_compare(e);
    case ExprKind::Cond:
      if (truthy(eval(*e.kids[1]))) return eval(*e.kids[0]);
      if (e.kids[2]) return eval(*e.kids[2]);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else "
          "section was defined");
  }
  MINFER_ASSERT(false, "unknown expression kind");
  return {};
}

Value Interp::eval_name(const Expr& e) {
  if (const Value* v = lookup(e.name)) return *v;
  return Value::undefined(fmt::format("'{}' is undefined", e.name));
}

Value Interp::eval_collection(const Expr& e) {
  if (e.kind == ExprKind::Dict) {
    DictObj d;
    for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
      Value k = eval(*e.kids[i]);
      d.set(k, eval(*e.kids[i + 1]));
    }
    return Value::dict(std::move(d));
  }
  std::vector<Value> items;
  items.reserve(e.kids.size());
  for (const ExprPtr& k : e.kids) items.push_back(eval(*k));
  return Value::list(std::move(items), e.kind == ExprKind::Tuple ? SeqKind::Tuple : SeqKind::List);
}

Value Interp::eval_binary(const Expr& e) {
  if (e.op == Op::And) {
    Value l = eval(*e.kids[0]);
    return truthy(l) ? eval(*e.kids[1]) : l;
  }
  if (e.op == Op::Or) {
    Value l = eval(*e.kids[0]);
    return truthy(l) ? l : eval(*e.kids[1]);
  }
  if (e.op == Op::Concat) {
    std::string out;
    for (const ExprPtr& k : e.kids) {
      append_str(out, eval(*k), opts_.limits.max_output_bytes);
      check_size(out.size());
    }
    return Value(std::move(out));
  }
  const Value l = eval(*e.kids[0]);
  const Value r = eval(*e.kids[1]);
  return arith(*this, e.op, l, r);
}

Value Interp::eval_compare(const Expr& e) {
  Value left = eval(*e.kids[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.kids[i + 1]);
    bool ok = false;
    switch (e.ops[i]) {
      case Op::Eq:
        ok = equals(left, right);
        break;
      case Op::Ne:
        ok = !equals(left, right);
        break;
      case Op::Lt:
        ok = compare(left, right, "<") < 0;
        break;
      case Op::Le:
        ok = compare(left, right, "<=") <= 0;
        break;
      case Op::Gt:
        ok = compare(left, right, ">") > 0;
        break;
      case Op::Ge:
        ok = compare(left, right, ">=") >= 0;
        break;
      case Op::In:
        ok = contains(right, left);
        break;
      case Op::NotIn:
        ok = !contains(right, left);
        break;
      default:
        MINFER_ASSERT(false, "not a comparison");
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

CallArgs Interp::eval_args(const Args& a) {
  CallArgs out;
  out.pos.reserve(a.pos.size());
  for (const ExprPtr& p : a.pos) out.pos.push_back(eval(*p));
  for (const auto& [k, p] : a.kw) out.kw.emplace_back(k, eval(*p));
  return out;
}

Value Interp::eval_call(const Expr& e) {
  const Expr& callee = *e.kids[0];
  if (callee.kind == ExprKind::GetAttr) {
    // obj.method(...) without materialising a bound method.
    Value obj = eval(*callee.kids[0]);
    if (has_method(obj, callee.name)) {
      CallArgs args = eval_args(e.args);
      return call_method(*this, obj, callee.name, args);
    }
    Value fn = get_attr(obj, callee.name);
    CallArgs args = eval_args(e.args);
    return call(fn, args);
  }
  Value fn = eval(callee);
  CallArgs args = eval_args(e.args);
  return call(fn, args);
}

Value Interp::call(const Value& fn, CallArgs& args) {
  if (fn.is_function()) return fn.fn_obj().fn(*this, args);
  if (fn.is_undefined()) undefined_error(fn);
  throw_error(TemplateErrorKind::Type, "'{}' object is not callable", type_name(fn));
}

Value Interp::eval_filter(const Expr& e) {
  Value v = e.kids[0] ? eval(*e.kids[0]) : filter_input_;
  CallArgs args = eval_args(e.args);
  return apply_filter(e.name, v, args);
}

Value Interp::eval_test(const Expr& e) {
  Value v = eval(*e.kids[0]);
  CallArgs args = eval_args(e.args);
  const bool r = apply_test(e.name, v, args);
  return Value(e.negated ? !r : r);
}

Value Interp::apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) throw_error(TemplateErrorKind::Unsupported, "no filter named '{}'", name);
  return f(*this, v, args);
}

bool Interp::apply_test(const std::string& name, const Value& v, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) throw_error(TemplateErrorKind::Unsupported, "no test named '{}'", name);
  return t(*this, v, args);
}

// ---- attribute / item access ---------------------------------------------------------------

Value Interp::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Undefined:
      undefined_error(obj);
    case Kind::Dict: {
      const DictObj& d = obj.dict_obj();
      if (has_method(obj, name)) break;
      if (const Value* v = d.find(std::string_view(name))) return *v;
      return Value::undefined(
          fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
    }
    default:
      if (has_method(obj, name)) break;
      return Value::undefined(
          fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
  }
  const Value self = obj;
  return Value::function(
      name, [self, name](Interp& in, CallArgs& a) { return call_method(in, self, name, a); });
}

Value Interp::get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Undefined:
      undefined_error(obj);
    case Kind::Dict:
      if (!obj.dict_obj().is_namespace) {
        if (const Value* v = obj.dict_obj().find(key)) return *v;
      }
      break;
    case Kind::List: {
      const ListObj& l = obj.list_obj();
      if (l.seq == SeqKind::Generator || !(key.is_int() || key.is_bool())) break;
      int64_t i = int_of(key);
      const int64_t n = static_cast<int64_t>(l.items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return l.items[static_cast<size_t>(i)];
      break;
    }
    case Kind::String: {
      if (!(key.is_int() || key.is_bool())) break;
      const std::string& s = obj.str();
      int64_t i = int_of(key);
      if (is_ascii(s)) {
        const int64_t n = static_cast<int64_t>(s.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(std::string(1, s[static_cast<size_t>(i)]));
        break;
      }
      const std::vector<size_t> offs = utf8_offsets(s);
      const int64_t n = static_cast<int64_t>(offs.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        const size_t b = offs[static_cast<size_t>(i)], en = offs[static_cast<size_t>(i) + 1];
        return Value(s.substr(b, en - b));
      }
      break;
    }
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(fmt::format("'{} object' has no element {}", type_name(obj), repr(key)));
}

namespace {

// Python's slice.indices(): clamps start/stop for a sequence of n items.
void slice_indices(int64_t n, const Value& a, const Value& b, int64_t step, int64_t& start,
                   int64_t& stop) {
  auto norm = [&](const Value& v, int64_t dflt, int64_t lo, int64_t hi) {
    if (v.is_none() || v.is_undefined()) return dflt;
    if (!v.is_int() && !v.is_bool()) {
      throw_error(TemplateErrorKind::Type, "slice indices must be integers or None");
    }
    int64_t i = int_of(v);
    if (i < 0) i += n;
    return std::clamp(i, lo, hi);
  };
  if (step > 0) {
    start = norm(a, 0, 0, n);
    stop = norm(b, n, 0, n);
  } else {
    start = norm(a, n - 1, -1, n - 1);
    stop = norm(b, -1, -1, n - 1);
  }
}

}  // namespace

Value Interp::eval_slice(const Expr& e) {
  const Value obj = eval(*e.kids[0]);
  const Value a = e.kids[1] ? eval(*e.kids[1]) : Value::none();
  const Value b = e.kids[2] ? eval(*e.kids[2]) : Value::none();
  const Value st = e.kids[3] ? eval(*e.kids[3]) : Value::none();
  int64_t step = 1;
  if (!st.is_none()) {
    if (!st.is_int()) throw_error(TemplateErrorKind::Type, "slice indices must be integers");
    step = st.as_int();
    if (step == 0) throw_error(TemplateErrorKind::Type, "slice step cannot be zero");
  }
  if (obj.is_undefined()) undefined_error(obj);
  const bool is_str = obj.is_string();
  if (!is_str && !(obj.is_list() && obj.list_obj().seq != SeqKind::Generator)) {
    throw_error(TemplateErrorKind::Type, "'{}' object is not subscriptable", type_name(obj));
  }
  std::vector<size_t> offs;
  int64_t n;
  if (is_str) {
    offs = utf8_offsets(obj.str());
    n = static_cast<int64_t>(offs.size()) - 1;
  } else {
    n = static_cast<int64_t>(obj.list_obj().items.size());
  }
  int64_t start, stop;
  slice_indices(n, a, b, step, start, stop);
  std::string s;
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    const size_t k = static_cast<size_t>(i);
    if (is_str) {
      s.append(obj.str(), offs[k], offs[k + 1] - offs[k]);
    } else {
      items.push_back(obj.list_obj().items[k]);
    }
  }
  if (is_str) return Value(std::move(s));
  return Value::list(std::move(items), obj.list_obj().seq);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return {};
    case Kind::List:
      return v.list_obj().items;
    case Kind::Dict: {
      if (v.dict_obj().is_namespace) break;
      std::vector<Value> keys;
      keys.reserve(v.dict_obj().items.size());
      for (const auto& [k, x] : v.dict_obj().items) keys.push_back(k);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      const std::vector<size_t> offs = utf8_offsets(v.str());
      for (size_t i = 0; i + 1 < offs.size(); ++i) {
        chars.emplace_back(v.str().substr(offs[i], offs[i + 1] - offs[i]));
      }
      return chars;
    }
    default:
      break;
  }
  throw_error(TemplateErrorKind::Type, "'{}' object is not iterable", type_name(v));
}

}  // namespace minfer::tmpl
