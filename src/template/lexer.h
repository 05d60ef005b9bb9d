// Jinja lexer: template text -> tokens, with Jinja2's whitespace control applied to the text
// between tags (so the parser never sees whitespace rules):
//   * `{%-` / `{{-` / `{#-` strip all whitespace before the tag; `-%}` / `-}}` / `-#}` after it;
//   * trim_blocks: the first newline after a block or comment tag is dropped (`+%}` keeps it);
//   * lstrip_blocks: spaces and tabs from the start of a line up to a block or comment tag are
//     dropped (`{%+` keeps them), exactly as jinja2/lexer.py decides it (line_starting);
//   * newlines are normalised to "\n" and one trailing newline is dropped
//     (keep_trailing_newline=False);
//   * `{% raw %}...{% endraw %}` becomes one Data token.
// Internal to src/template. Ownership: tokens own their text. Thread safety: pure function.
// Failure: TemplateError(Syntax) with line and column (unterminated tag, comment or string,
// unbalanced brackets, a stray character). Cost: linear in the template's size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace minfer::tmpl {

enum class Tok : uint8_t {
  Data,        // text between tags (whitespace control applied)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // text: the unescaped value
  Int,
  Float,
  Op,  // text: the operator ("+", "//", "(", ...)
  Eof,
};

struct Token {
  Tok type = Tok::Eof;
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
  int col = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

std::vector<Token> lex(std::string_view source, const LexOptions& opts);

}  // namespace minfer::tmpl
