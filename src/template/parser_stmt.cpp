// Statements (tags), after jinja2/parser.py: subparse / parse_statements and one function per
// tag. The HF chat-template environment enables loopcontrols (break, continue) and adds
// {% generation %}; include / import / extends need a loader, which a sandboxed chat template
// does not get, so they are refused at parse time.
#include "template/parser_impl.h"

namespace minfer::tmpl {

Body parse(std::vector<Token> tokens, int max_depth) {
  return Parser(std::move(tokens), max_depth).parse_template();
}

Body Parser::parse_template() {
  Body body = subparse({});
  if (cur().type != Tok::Eof) fail_unexpected(cur());
  return body;
}

// Statements until EOF or a block whose tag name is in end_tags (left as the current token).
Body Parser::subparse(std::initializer_list<std::string_view> end_tags) {
  Body body;
  while (cur().type != Tok::Eof) {
    const Token& t = cur();
    if (t.type == Tok::Data) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::Text;
      s->line = t.line;
      s->col = t.col;
      s->text = next().text;
      body.push_back(std::move(s));
    } else if (t.type == Tok::VarBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::Print;
      s->line = t.line;
      s->col = t.col;
      s->expr = parse_tuple();
      expect(Tok::VarEnd, "'}}'");
      body.push_back(std::move(s));
    } else if (t.type == Tok::BlockBegin) {
      next();
      for (std::string_view e : end_tags) {
        if (is_name(e)) return body;
      }
      body.push_back(parse_statement());
      expect(Tok::BlockEnd, "'%}'");
    } else {
      fail_unexpected(t);
    }
  }
  return body;
}

// After a tag's own tokens: its '%}', the body, and (drop_needle) the end tag's name.
Body Parser::parse_statements(std::initializer_list<std::string_view> end_tags, bool drop_needle) {
  skip_op(":");
  expect(Tok::BlockEnd, "'%}'");
  const Token& at = cur();
  DepthGuard guard(*this, at);
  Body body = subparse(end_tags);
  if (cur().type == Tok::Eof) {
    std::string names;
    for (std::string_view e : end_tags)
      names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
    fail(cur(), "unexpected end of template; looking for " + names);
  }
  if (drop_needle) next();
  return body;
}

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != Tok::Name) fail(t, "tag name expected, got " + describe(t));
  const std::string& tag = t.text;
  auto simple = [&](StmtKind kind) {
    next();
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = t.line;
    s->col = t.col;
    return s;
  };
  if (tag == "for") return parse_for(next());
  if (tag == "if") return parse_if(next());
  if (tag == "set") return parse_set(next());
  if (tag == "macro") return parse_macro(next());
  if (tag == "call") return parse_call_block(next());
  if (tag == "filter") return parse_filter_block(next());
  if (tag == "with") return parse_with(next());
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) fail(t, "'" + tag + "' outside of a loop");
    return simple(tag == "break" ? StmtKind::Break : StmtKind::Continue);
  }
  if (tag == "generation") {
    StmtPtr s = simple(StmtKind::Generation);
    s->body = parse_statements({"endgeneration"}, true);
    return s;
  }
  if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block") {
    throw TemplateError(TemplateErrorKind::Unsupported,
                        "'" + tag + "' needs a template loader, which a chat template has not",
                        t.line, t.col);
  }
  fail(t, "encountered unknown tag '" + tag + "'");
}

StmtPtr Parser::parse_for(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::For;
  s->line = at.line;
  s->col = at.col;
  s->target = parse_assign_target(true, false, {"in"});
  if (!skip_name("in")) fail(cur(), "expected 'in', got " + describe(cur()));
  s->expr = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) s->cond = parse_expression();
  s->recursive = skip_name("recursive");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_if(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::If;
  s->line = at.line;
  s->col = at.col;
  ExprPtr cond = parse_tuple(false, false);
  while (true) {
    Body body = parse_statements({"elif", "else", "endif"}, false);
    s->branches.emplace_back(std::move(cond), std::move(body));
    const Token& t = next();
    if (t.text == "elif") {
      cond = parse_tuple(false, false);
      continue;
    }
    if (t.text == "else") s->branches.emplace_back(nullptr, parse_statements({"endif"}, true));
    return s;
  }
}

StmtPtr Parser::parse_set(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->line = at.line;
  s->col = at.col;
  s->target = parse_assign_target(true, false, {}, true);
  if (skip_op("=")) {
    s->kind = StmtKind::Set;
    s->expr = parse_tuple();
    return s;
  }
  s->kind = StmtKind::SetBlock;
  if (is_op("|")) s->expr = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true);
  return s;
}

void Parser::parse_signature(std::vector<Param>& params) {
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    const Token& n = expect_name();
    Param p;
    p.name = n.text;
    if (skip_op("=")) {
      p.default_value = parse_expression();
    } else if (!params.empty() && params.back().default_value) {
      fail(n, "non-default argument follows default argument");
    }
    params.push_back(std::move(p));
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::Macro;
  s->line = at.line;
  s->col = at.col;
  s->text = expect_name().text;
  parse_signature(s->params);
  // break/continue inside a macro body cannot reach a loop around the definition.
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endmacro"}, true);
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_call_block(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::CallBlock;
  s->line = at.line;
  s->col = at.col;
  if (is_op("(")) parse_signature(s->params);
  s->expr = parse_expression();
  if (s->expr->kind != ExprKind::Call) fail(at, "expected a call after 'call'");
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endcall"}, true);
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_filter_block(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::FilterBlock;
  s->line = at.line;
  s->col = at.col;
  s->expr = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true);
  return s;
}

StmtPtr Parser::parse_with(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::With;
  s->line = at.line;
  s->col = at.col;
  while (cur().type != Tok::BlockEnd) {
    if (!s->sets.empty()) expect_op(",");
    const Token& n = expect_name();
    expect_op("=");
    s->sets.emplace_back(n.text, parse_expression());
  }
  s->body = parse_statements({"endwith"}, true);
  return s;
}

}  // namespace minfer::tmpl
