// Expression grammar, after jinja2/parser.py (parse_condexpr ... parse_primary).
#include <algorithm>

#include "template/parser_impl.h"

namespace minfer::tmpl {

// ---- token helpers ------------------------------------------------------------------------

std::string Parser::describe(const Token& t) const {
  switch (t.type) {
    case Tok::Eof:
      return "end of template";
    case Tok::Data:
      return "template data";
    case Tok::VarBegin:
      return "'{{'";
    case Tok::VarEnd:
      return "end of print statement '}}'";
    case Tok::BlockBegin:
      return "'{%'";
    case Tok::BlockEnd:
      return "end of statement block '%}'";
    case Tok::String:
      return "string";
    case Tok::Int:
    case Tok::Float:
      return "number " + t.text;
    default:
      return "'" + t.text + "'";
  }
}

void Parser::fail(const Token& at, const std::string& msg) const {
  throw TemplateError(TemplateErrorKind::Syntax, msg, at.line, at.col);
}

void Parser::fail_unexpected(const Token& at) const {
  fail(at, "unexpected " + describe(at));
}

const Token& Parser::expect_op(std::string_view op) {
  if (!is_op(op)) fail(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
  return next();
}

const Token& Parser::expect_name() {
  if (cur().type != Tok::Name) fail(cur(), "expected a name, got " + describe(cur()));
  return next();
}

void Parser::expect(Tok type, std::string_view what) {
  if (cur().type != type) fail(cur(), fmt::format("expected {}, got {}", what, describe(cur())));
  next();
}

ExprPtr Parser::seal(ExprPtr e) const {
  int d = 0;
  for (const auto& k : e->kids) d = std::max(d, k ? k->depth : 0);
  for (const auto& k : e->args.pos) d = std::max(d, k->depth);
  for (const auto& [n, k] : e->args.kw) d = std::max(d, k->depth);
  e->depth = d + 1;
  if (e->depth > max_depth_) {
    throw TemplateError(TemplateErrorKind::Syntax, "expression nested too deeply", e->line, e->col);
  }
  return e;
}

ExprPtr Parser::binary(Op op, ExprPtr l, ExprPtr r, const Token& at) {
  ExprPtr e = make(ExprKind::Binary, at);
  e->op = op;
  e->kids.push_back(std::move(l));
  e->kids.push_back(std::move(r));
  return seal(std::move(e));
}

// ---- precedence levels --------------------------------------------------------------------

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr e = parse_or();
  while (is_name("if")) {
    const Token& at = next();
    ExprPtr c = make(ExprKind::Cond, at);
    ExprPtr cond = parse_or();
    ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
    c->kids.push_back(std::move(e));
    c->kids.push_back(std::move(cond));
    c->kids.push_back(std::move(other));
    e = seal(std::move(c));
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr l = parse_and();
  while (is_name("or")) {
    const Token& at = next();
    l = binary(Op::Or, std::move(l), parse_and(), at);
  }
  return l;
}

ExprPtr Parser::parse_and() {
  ExprPtr l = parse_not();
  while (is_name("and")) {
    const Token& at = next();
    l = binary(Op::And, std::move(l), parse_not(), at);
  }
  return l;
}

ExprPtr Parser::parse_not() {
  if (!is_name("not")) return parse_compare();
  const Token& at = next();
  DepthGuard guard(*this, at);
  ExprPtr e = make(ExprKind::Unary, at);
  e->op = Op::Not;
  e->kids.push_back(parse_not());
  return seal(std::move(e));
}

ExprPtr Parser::parse_compare() {
  const Token& at = cur();
  ExprPtr first = parse_math1();
  ExprPtr e;
  while (true) {
    Op op;
    if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      const std::string& t = cur().text;
      op = t == "=="   ? Op::Eq
           : t == "!=" ? Op::Ne
           : t == "<"  ? Op::Lt
           : t == "<=" ? Op::Le
           : t == ">"  ? Op::Gt
                       : Op::Ge;
      next();
    } else if (is_name("in")) {
      next();
      op = Op::In;
    } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
      next();
      next();
      op = Op::NotIn;
    } else {
      break;
    }
    if (!e) {
      e = make(ExprKind::Compare, at);
      e->kids.push_back(std::move(first));
    }
    e->ops.push_back(op);
    e->kids.push_back(parse_math1());
  }
  return e ? seal(std::move(e)) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& at = next();
    l = binary(at.text == "+" ? Op::Add : Op::Sub, std::move(l), parse_concat(), at);
  }
  return l;
}

ExprPtr Parser::parse_concat() {
  const Token& at = cur();
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  ExprPtr e = make(ExprKind::Binary, at);
  e->op = Op::Concat;
  e->kids.push_back(std::move(first));
  while (skip_op("~")) e->kids.push_back(parse_math2());
  return seal(std::move(e));
}

ExprPtr Parser::parse_math2() {
  ExprPtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& at = next();
    const Op op = at.text == "*"    ? Op::Mul
                  : at.text == "/"  ? Op::Div
                  : at.text == "//" ? Op::FloorDiv
                                    : Op::Mod;
    l = binary(op, std::move(l), parse_pow(), at);
  }
  return l;
}

ExprPtr Parser::parse_pow() {
  ExprPtr l = parse_unary(true);
  while (is_op("**")) {
    const Token& at = next();
    l = binary(Op::Pow, std::move(l), parse_unary(true), at);
  }
  return l;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  const Token& at = cur();
  DepthGuard guard(*this, at);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    next();
    node = make(ExprKind::Unary, at);
    node->op = at.text == "-" ? Op::Neg : Op::Pos;
    node->kids.push_back(parse_unary(false));
    node = seal(std::move(node));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  ExprPtr e;
  switch (t.type) {
    case Tok::Name:
      next();
      e = make(ExprKind::Const, t);
      if (t.text == "true" || t.text == "True") {
        e->value = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::Name;
        e->name = t.text;
      }
      return e;
    case Tok::String: {
      std::string s = next().text;
      while (cur().type == Tok::String) s += next().text;  // 'a' 'b' is 'ab', as in Python
      e = make(ExprKind::Const, t);
      e->value = Value(std::move(s));
      return e;
    }
    case Tok::Int:
    case Tok::Float:
      next();
      e = make(ExprKind::Const, t);
      e->value = t.type == Tok::Int ? Value(t.ival) : Value(t.fval);
      return e;
    case Tok::Op:
      if (t.text == "(") {
        next();
        e = parse_tuple(false, true, {}, true);
        expect_op(")");
        return e;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default:
      break;
  }
  fail_unexpected(t);
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr,
                            std::initializer_list<std::string_view> extra_end,
                            bool explicit_parens) {
  const Token& at = cur();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  auto at_end = [&] {
    const Token& c = cur();
    if (c.type == Tok::VarEnd || c.type == Tok::BlockEnd || c.type == Tok::Eof) return true;
    if (c.type == Tok::Op && c.text == ")") return true;
    for (std::string_view n : extra_end) {
      if (c.type == Tok::Name && c.text == n) return true;
    }
    return false;
  };
  while (true) {
    if (!items.empty()) expect_op(",");
    if (at_end()) break;
    if (simplified) {
      items.push_back(parse_primary());
    } else {
      items.push_back(parse_expression(with_condexpr));
    }
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail(cur(), "expected an expression, got " + describe(cur()));
  }
  ExprPtr e = make(ExprKind::Tuple, at);
  e->kids = std::move(items);
  return seal(std::move(e));
}

ExprPtr Parser::parse_list() {
  const Token& at = expect_op("[");
  ExprPtr e = make(ExprKind::List, at);
  while (!is_op("]")) {
    if (!e->kids.empty()) expect_op(",");
    if (is_op("]")) break;
    e->kids.push_back(parse_expression());
  }
  expect_op("]");
  return seal(std::move(e));
}

ExprPtr Parser::parse_dict() {
  const Token& at = expect_op("{");
  ExprPtr e = make(ExprKind::Dict, at);
  while (!is_op("}")) {
    if (!e->kids.empty()) expect_op(",");
    if (is_op("}")) break;
    e->kids.push_back(parse_expression());
    expect_op(":");
    e->kids.push_back(parse_expression());
  }
  expect_op("}");
  return seal(std::move(e));
}

// ---- postfix: . [] () | is ------------------------------------------------------------------

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& at = next();
  if (at.text == ".") {
    const Token& attr = cur();
    if (attr.type == Tok::Name) {
      next();
      ExprPtr e = make(ExprKind::GetAttr, at);
      e->name = attr.text;
      e->kids.push_back(std::move(node));
      return seal(std::move(e));
    }
    if (attr.type != Tok::Int) fail(attr, "expected name or number after '.'");
    next();
    ExprPtr idx = make(ExprKind::Const, attr);
    idx->value = Value(attr.ival);
    ExprPtr e = make(ExprKind::GetItem, at);
    e->kids.push_back(std::move(node));
    e->kids.push_back(std::move(idx));
    return seal(std::move(e));
  }
  std::vector<ExprPtr> subs;
  while (!is_op("]")) {
    if (!subs.empty()) expect_op(",");
    subs.push_back(parse_subscribed());
  }
  expect_op("]");
  if (subs.empty()) fail(at, "expected a subscript");
  ExprPtr sub;
  if (subs.size() == 1) {
    sub = std::move(subs[0]);
  } else {
    sub = make(ExprKind::Tuple, at);
    sub->kids = std::move(subs);
    sub = seal(std::move(sub));
  }
  if (sub->kind == ExprKind::Slice) {
    sub->kids.insert(sub->kids.begin(), std::move(node));
    return seal(std::move(sub));
  }
  ExprPtr e = make(ExprKind::GetItem, at);
  e->kids.push_back(std::move(node));
  e->kids.push_back(std::move(sub));
  return seal(std::move(e));
}

// One subscript: an expression, or a slice `a:b:c` (returned as a Slice without its object).
ExprPtr Parser::parse_subscribed() {
  const Token& at = cur();
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression();
    if (!is_op(":")) return start;
  }
  next();  // ':'
  ExprPtr e = make(ExprKind::Slice, at);
  e->kids.push_back(std::move(start));
  e->kids.push_back(is_op("]") || is_op(",") || is_op(":") ? nullptr : parse_expression());
  ExprPtr step;
  if (skip_op(":") && !is_op("]") && !is_op(",")) step = parse_expression();
  e->kids.push_back(std::move(step));
  return e;
}

Args Parser::parse_call_args() {
  expect_op("(");
  Args a;
  while (!is_op(")")) {
    if (!a.pos.empty() || !a.kw.empty()) expect_op(",");
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs calls are not supported");
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
      std::string key = next().text;
      next();
      a.kw.emplace_back(std::move(key), parse_expression());
    } else {
      if (!a.kw.empty()) fail(cur(), "positional argument follows keyword argument");
      a.pos.push_back(parse_expression());
    }
  }
  expect_op(")");
  return a;
}

ExprPtr Parser::parse_call(ExprPtr node) {
  const Token& at = cur();
  ExprPtr e = make(ExprKind::Call, at);
  e->args = parse_call_args();
  e->kids.push_back(std::move(node));
  return seal(std::move(e));
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token& at = expect_name();
    ExprPtr e = make(ExprKind::Filter, at);
    e->name = at.text;
    while (is_op(".")) {
      next();
      e->name += "." + expect_name().text;
    }
    if (is_op("(")) e->args = parse_call_args();
    e->kids.push_back(std::move(node));
    node = seal(std::move(e));
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const Token& at = next();  // 'is'
  ExprPtr e = make(ExprKind::Test, at);
  e->negated = skip_name("not");
  e->name = expect_name().text;
  while (is_op(".")) {
    next();
    e->name += "." + expect_name().text;
  }
  const Token& c = cur();
  const bool arg_start = c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int ||
                         c.type == Tok::Float ||
                         (c.type == Tok::Op && (c.text == "[" || c.text == "{"));
  if (is_op("(")) {
    e->args = parse_call_args();
  } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail(c, "you cannot chain multiple tests with 'is'");
    e->args.pos.push_back(parse_postfix(parse_primary()));
  }
  e->kids.push_back(std::move(node));
  return seal(std::move(e));
}

ExprPtr Parser::parse_assign_target(bool with_tuple, bool name_only,
                                    std::initializer_list<std::string_view> extra_end,
                                    bool with_namespace) {
  ExprPtr target;
  if (with_namespace && cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
    const Token& ns = next();
    next();
    const Token& attr = expect_name();
    target = make(ExprKind::GetAttr, attr);
    target->name = attr.text;
    ExprPtr base = make(ExprKind::Name, ns);
    base->name = ns.text;
    target->kids.push_back(std::move(base));
    return seal(std::move(target));
  }
  if (name_only) {
    const Token& n = expect_name();
    target = make(ExprKind::Name, n);
    target->name = n.text;
    return target;
  }
  const Token& at = cur();
  target = with_tuple ? parse_tuple(true, true, extra_end) : parse_primary();
  auto assignable = [](const Expr& e) { return e.kind == ExprKind::Name; };
  bool ok = assignable(*target);
  if (target->kind == ExprKind::Tuple) {
    ok = std::all_of(target->kids.begin(), target->kids.end(),
                     [&](const ExprPtr& k) { return assignable(*k); });
  }
  if (!ok) fail(at, "can't assign to this expression");
  return target;
}

}  // namespace minfer::tmpl
