// The parser's state, shared by parser_expr.cpp (expressions) and parser_stmt.cpp (tags).
// Internal to src/template; see parser.h for the contract.
#pragma once

#include <initializer_list>
#include <string_view>

#include "template/parser.h"
#include "template/template_error.h"

namespace minfer::tmpl {

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : toks_(std::move(tokens)), max_depth_(max_depth) {}

  Body parse_template();

  // ---- expressions (parser_expr.cpp) ----
  ExprPtr parse_expression(bool with_condexpr = true);
  // Comma-separated expressions; a single one without a comma is itself (not a tuple).
  ExprPtr parse_tuple(bool simplified = false, bool with_condexpr = true,
                      std::initializer_list<std::string_view> extra_end = {},
                      bool explicit_parens = false);
  ExprPtr parse_assign_target(bool with_tuple = true, bool name_only = false,
                              std::initializer_list<std::string_view> extra_end = {},
                              bool with_namespace = false);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  Args parse_call_args();

 private:
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_test(ExprPtr node);
  ExprPtr parse_call(ExprPtr node);
  ExprPtr binary(Op op, ExprPtr l, ExprPtr r, const Token& at);

  // ---- statements (parser_stmt.cpp) ----
  Body subparse(std::initializer_list<std::string_view> end_tags);
  Body parse_statements(std::initializer_list<std::string_view> end_tags, bool drop_needle);
  StmtPtr parse_statement();
  StmtPtr parse_for(const Token& at);
  StmtPtr parse_if(const Token& at);
  StmtPtr parse_set(const Token& at);
  StmtPtr parse_macro(const Token& at);
  StmtPtr parse_call_block(const Token& at);
  StmtPtr parse_filter_block(const Token& at);
  StmtPtr parse_with(const Token& at);
  void parse_signature(std::vector<Param>& params);

 public:
  // ---- token stream ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  const Token& expect_op(std::string_view op);
  const Token& expect_name();
  void expect(Tok type, std::string_view what);
  [[noreturn]] void fail(const Token& at, const std::string& msg) const;
  [[noreturn]] void fail_unexpected(const Token& at) const;
  std::string describe(const Token& t) const;

  ExprPtr make(ExprKind kind, const Token& at) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  // Sets e's depth from its children and refuses trees deeper than max_depth (evaluating and
  // destroying a tree recurses over its height).
  ExprPtr seal(ExprPtr e) const;

  // Counts nesting on the C++ stack (recursive descent); refuses beyond max_depth.
  struct DepthGuard {
    Parser& p;
    DepthGuard(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > p.max_depth_) p.fail(at, "template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

 private:
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int max_depth_;
  int depth_ = 0;
  int loop_depth_ = 0;  // for break/continue outside a loop
};

}  // namespace minfer::tmpl
