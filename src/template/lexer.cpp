#include "template/lexer.h"

#include <algorithm>
#include <cstring>

#include "template/template_error.h"

namespace minfer::tmpl {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// Jinja lexes with "\n" newlines and, without keep_trailing_newline, drops one final newline.
std::string normalise(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& opts) : src_(normalise(source)), o_(opts) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) root_step();
    Token eof;
    eof.type = Tok::Eof;
    locate(src_.size(), eof);
    out_.push_back(std::move(eof));
    return std::move(out_);
  }

 private:
  void locate(size_t pos, Token& t) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    t.line = static_cast<int>(line);
    t.col = static_cast<int>(pos - line_starts_[line - 1]) + 1;
  }

  template <typename... Args>
  [[noreturn]] void error(size_t pos, fmt::format_string<Args...> f, Args&&... args) const {
    Token t;
    locate(pos, t);
    throw TemplateError(TemplateErrorKind::Syntax, fmt::format(f, std::forward<Args>(args)...),
                        t.line, t.col);
  }

  Token& emit(Tok type, size_t pos, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    locate(pos, t);
    out_.push_back(std::move(t));
    return out_.back();
  }

  void emit_data(size_t pos, std::string_view text) {
    if (!text.empty()) emit(Tok::Data, pos, std::string(text));
  }

  // Text before a tag opening with `sign` ('-', '+' or 0); lstrip only for block/comment tags.
  std::string_view strip_before(std::string_view text, char sign, bool lstrip_applies) const {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0 && is_space(text[e - 1])) --e;
      return text.substr(0, e);
    }
    if (sign == '+' || !o_.lstrip_blocks || !lstrip_applies) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    const std::string_view tail = text.substr(l_pos);
    if (tail.empty()) return text;
    for (char c : tail) {
      if (!is_space(c)) return text;
    }
    return text.substr(0, l_pos);
  }

  // After a closing `%}` / `#}` at pos (just past it): trim_blocks eats one newline.
  size_t after_block_end(size_t pos, char sign) const {
    if (sign == '-') {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
    } else if (sign != '+' && o_.trim_blocks && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  void root_step() {
    size_t i = pos_;
    while (true) {
      i = src_.find('{', i);
      if (i == std::string::npos || i + 1 >= src_.size()) {
        emit_data(pos_, std::string_view(src_).substr(pos_));
        pos_ = src_.size();
        return;
      }
      const char k = src_[i + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++i;
    }
    const char kind = src_[i + 1];
    size_t after = i + 2;
    const char sign =
        after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
    if (sign) ++after;
    const std::string_view text = std::string_view(src_).substr(pos_, i - pos_);
    if (kind == '%' && try_raw(i, after, sign, text)) return;
    emit_data(pos_, strip_before(text, sign, kind != '{'));
    if (kind == '#') {
      lex_comment(i, after);
      return;
    }
    emit(kind == '%' ? Tok::BlockBegin : Tok::VarBegin, i);
    pos_ = after;
    lex_tag(kind == '%');
  }

  void lex_comment(size_t open, size_t start) {
    const size_t j = src_.find("#}", start);
    if (j == std::string::npos) error(open, "missing end of comment tag");
    const char sign = j > start && (src_[j - 1] == '-' || src_[j - 1] == '+') ? src_[j - 1] : 0;
    pos_ = after_block_end(j + 2, sign);
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  // `{% raw %}...{% endraw %}`: the body is one Data token, untouched.
  bool try_raw(size_t open, size_t after, char sign, std::string_view text) {
    size_t p = after;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3])))
      return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    emit_data(pos_, strip_before(text, sign, true));
    for (size_t q = src_.find("{%", p); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      const char esign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : 0;
      if (esign) ++r;
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      char csign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) csign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      line_starting_ = false;
      emit_data(p, strip_before(std::string_view(src_).substr(p, q - p), esign, true));
      pos_ = after_block_end(r + 2, csign);
      line_starting_ = src_[pos_ - 1] == '\n';
      return true;
    }
    error(open, "missing end of raw directive");
  }

  // Tokens of one {% %} or {{ }} up to its end; brackets must balance before it may end.
  void lex_tag(bool block) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) {
        error(pos_, "unexpected end of template, expected '{}'", block ? "%}" : "}}");
      }
      if (balance.empty() && try_tag_end(block)) return;
      const char c = src_[pos_];
      if (is_space(c)) {
        ++pos_;
      } else if (is_name_start(c)) {
        const size_t b = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        emit(Tok::Name, b, src_.substr(b, pos_ - b));
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(balance);
      }
    }
  }

  bool try_tag_end(bool block) {
    const std::string_view rest = std::string_view(src_).substr(pos_);
    const char* close = block ? "%}" : "}}";
    char sign = 0;
    size_t len = 0;
    if (rest.starts_with(close)) {
      len = 2;
    } else if ((rest.starts_with("-") || (block && rest.starts_with("+"))) &&
               rest.substr(1).starts_with(close)) {
      sign = rest[0];
      len = 3;
    } else {
      return false;
    }
    emit(block ? Tok::BlockEnd : Tok::VarEnd, pos_);
    pos_ += len;
    if (block) {
      pos_ = after_block_end(pos_, sign);
    } else if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    }
    line_starting_ = src_[pos_ - 1] == '\n';
    return true;
  }

  void lex_number();
  void lex_string();
  uint32_t lex_hex(int n);
  void lex_operator(std::vector<char>& balance);

  std::string src_;
  LexOptions o_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

void Lexer::lex_number() {
  const size_t b = pos_;
  auto digits = [&](auto ok) {
    const size_t s = pos_;
    while (pos_ < src_.size() && (ok(src_[pos_]) || (src_[pos_] == '_' && pos_ > s))) ++pos_;
  };
  if (src_[pos_] == '0' && pos_ + 1 < src_.size() && std::strchr("xXoObB", src_[pos_ + 1])) {
    const char base_ch = static_cast<char>(src_[pos_ + 1] | 0x20);
    const int base = base_ch == 'x' ? 16 : base_ch == 'o' ? 8 : 2;
    pos_ += 2;
    std::string ds;
    for (; pos_ < src_.size() &&
           (std::isxdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_');
         ++pos_) {
      if (src_[pos_] != '_') ds += src_[pos_];
    }
    Token& t = emit(Tok::Int, b, src_.substr(b, pos_ - b));
    try {
      t.ival = static_cast<int64_t>(std::stoull(ds, nullptr, base));
    } catch (const std::exception&) {
      error(b, "invalid integer literal '{}'", t.text);
    }
    return;
  }
  digits(is_digit);
  bool is_float = false;
  // `x.0.1` is attribute access; a float needs digits after its dot.
  const bool after_dot = b > 0 && src_[b - 1] == '.';
  if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
    ++pos_;
    digits(is_digit);
    is_float = true;
  }
  if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
    size_t q = pos_ + 1;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    if (q < src_.size() && is_digit(src_[q])) {
      pos_ = q;
      digits(is_digit);
      is_float = true;
    }
  }
  std::string text;
  for (size_t i = b; i < pos_; ++i) {
    if (src_[i] != '_') text += src_[i];
  }
  Token& t = emit(is_float ? Tok::Float : Tok::Int, b, text);
  try {
    if (is_float) {
      t.fval = std::stod(text);
    } else {
      t.ival = std::stoll(text);
    }
  } catch (const std::exception&) {
    error(b, "number literal '{}' out of range", text);
  }
}

void Lexer::lex_string() {
  const size_t b = pos_;
  const char q = src_[pos_++];
  std::string val;
  // Python's string escapes (Jinja unescapes literals as Python does).
  static constexpr std::string_view kEscapes = "ntr\\'\"abfv0";
  static constexpr char kValues[] = {'\n', '\t', '\r', '\\', '\'', '"',
                                     '\a', '\b', '\f', '\v', '\0'};
  while (true) {
    if (pos_ >= src_.size()) error(b, "unterminated string literal");
    const char c = src_[pos_++];
    if (c == q) break;
    if (c != '\\') {
      val += c;
      continue;
    }
    if (pos_ >= src_.size()) error(b, "unterminated string literal");
    const char e = src_[pos_++];
    if (const size_t k = kEscapes.find(e); k != std::string_view::npos) {
      val += kValues[k];
    } else if (e == '\n') {
      // a line continuation adds nothing
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const uint32_t cp = lex_hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
      if (cp > 0x10ffff) error(pos_ - 10, "\\U escape out of range");
      append_utf8(val, cp);
    } else {
      val += '\\';
      val += e;
    }
  }
  emit(Tok::String, b, std::move(val));
}

uint32_t Lexer::lex_hex(int n) {
  if (pos_ + static_cast<size_t>(n) > src_.size()) error(pos_, "truncated \\x/\\u escape");
  uint32_t v = 0;
  for (int k = 0; k < n; ++k) {
    const char h = src_[pos_++];
    if (!std::isxdigit(static_cast<unsigned char>(h))) error(pos_ - 1, "bad hex escape");
    v = v * 16 + static_cast<uint32_t>(
                     std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
  }
  return v;
}

void Lexer::lex_operator(std::vector<char>& balance) {
  static constexpr const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
  const size_t b = pos_;
  for (const char* op : kTwo) {
    if (src_.compare(pos_, 2, op) == 0) {
      pos_ += 2;
      emit(Tok::Op, b, op);
      return;
    }
  }
  const char c = src_[pos_];
  if (!std::strchr("+-/*%~[](){}><=.:|,;", c)) error(pos_, "unexpected character '{}'", c);
  ++pos_;
  if (c == '(' || c == '[' || c == '{') {
    balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
  } else if (c == ')' || c == ']' || c == '}') {
    if (balance.empty()) error(b, "unexpected '{}'", c);
    if (balance.back() != c) error(b, "unexpected '{}', expected '{}'", c, balance.back());
    balance.pop_back();
  }
  emit(Tok::Op, b, std::string(1, c));
}

}  // namespace

std::vector<Token> lex(std::string_view source, const LexOptions& opts) {
  return Lexer(source, opts).run();
}

}  // namespace minfer::tmpl
