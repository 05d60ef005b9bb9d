// Jinja parser: tokens (lexer.h) -> statement tree (ast.h), following jinja2/parser.py's
// grammar and operator precedence (or < and < not < comparisons < + - < ~ < * / // % < ** <
// unary -, then postfix . [] () and filters | / tests `is`, which bind tighter than any binary
// operator: `a + b | trim` is `a + (b | trim)`).
// Internal to src/template. Ownership: returns an owned tree. Thread safety: pure function.
// Failure: TemplateError(Syntax) naming line and column (unknown tag, unclosed block, unexpected
// token, nesting deeper than max_depth). Cost: linear in the number of tokens.
#pragma once

#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace minfer::tmpl {

Body parse(std::vector<Token> tokens, int max_depth);

}  // namespace minfer::tmpl
