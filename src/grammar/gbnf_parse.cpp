// GBNF text -> Grammar: a recursive-descent parser over the source bytes, staging every rule
// as alternatives of element runs, then the checks (undefined rules, root, left recursion) and
// the flattening into Grammar::elems.
#include <algorithm>
#include <limits>
#include <unordered_map>

#include "common/error.h"
#include "grammar/grammar.h"

namespace minfer::grammar {

namespace {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

using Seq = std::vector<Element>;
using Alts = std::vector<Seq>;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view src, const ParseLimits& lim) : src_(src), lim_(lim) {}

  Grammar run(std::string_view root_name);

 private:
  [[noreturn]] void error_at(size_t off, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail(ErrorKind::InvalidArgument, "grammar:{}:{}: {}", line, col, what);
  }
  bool at_end() const { return pos_ >= src_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  std::string shown(size_t off) const {
    if (off >= src_.size()) return "end of input";
    const char c = src_[off];
    if (c == '\n') return "end of line";
    return fmt::format("'{}'", std::string_view(src_.data() + off, 1));
  }

  void skip_space(bool newline_ok);
  std::string parse_name();
  uint32_t parse_code_point();
  uint32_t parse_char();
  uint32_t rule_id(const std::string& name, size_t off);
  uint32_t new_rule(const std::string& base, Alts alts);
  Alts parse_alternates(const std::string& rule, bool nested);
  Seq parse_sequence(const std::string& rule, bool nested);
  void parse_literal(Seq& out);
  void parse_class(Seq& out);
  void parse_repeat_bounds(uint32_t& lo, uint32_t& hi);
  void apply_repeat(const std::string& rule, Seq& out, size_t item_start, uint32_t lo, uint32_t hi,
                    size_t off);
  void count(size_t n, size_t off);
  void check_left_recursion() const;

  std::string_view src_;
  ParseLimits lim_;
  size_t pos_ = 0;
  size_t n_elems_ = 0;
  uint32_t nesting_ = 0;  // open parentheses
  Grammar g_;
  std::vector<Alts> rules_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;  // offset of the first reference (for "undefined" errors)
  std::unordered_map<std::string, uint32_t> ids_;
  std::unordered_map<std::string, uint32_t> generated_;  // per base name, the last suffix
};

void Parser::skip_space(bool newline_ok) {
  while (!at_end()) {
    const char c = peek();
    if (c == ' ' || c == '\t') {
      ++pos_;
    } else if (c == '#') {
      while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
    } else if ((c == '\n' || c == '\r') && newline_ok) {
      ++pos_;
    } else {
      break;
    }
  }
}

std::string Parser::parse_name() {
  const size_t start = pos_;
  while (!at_end() && is_name_char(peek())) ++pos_;
  if (pos_ == start) error_at(start, fmt::format("expected a rule name, got {}", shown(start)));
  return std::string(src_.substr(start, pos_ - start));
}

// One UTF-8 encoded code point of the source.
uint32_t Parser::parse_code_point() {
  const size_t start = pos_;
  const auto b0 = static_cast<uint8_t>(src_[pos_++]);
  if (b0 < 0x80) return b0;
  int n = 0;
  uint32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 1;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3;
    cp = b0 & 0x07;
  } else {
    error_at(start, "invalid UTF-8 in the grammar");
  }
  for (int i = 0; i < n; ++i) {
    if (at_end() || (static_cast<uint8_t>(peek()) & 0xC0) != 0x80)
      error_at(start, "invalid UTF-8 in the grammar");
    cp = (cp << 6) | (static_cast<uint8_t>(src_[pos_++]) & 0x3F);
  }
  return cp;
}

// A character of a literal or a class: an escape or one code point.
uint32_t Parser::parse_char() {
  if (peek() != '\\') return parse_code_point();
  const size_t start = pos_;
  ++pos_;
  if (at_end()) error_at(start, "unfinished escape at the end of the grammar");
  const char e = src_[pos_++];
  int digits = 0;
  switch (e) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
      return static_cast<uint8_t>(e);
    case 'x':
      digits = 2;
      break;
    case 'u':
      digits = 4;
      break;
    case 'U':
      digits = 8;
      break;
    default:
      error_at(start, fmt::format("unknown escape '\\{}'", std::string_view(&src_[pos_ - 1], 1)));
  }
  uint32_t v = 0;
  for (int i = 0; i < digits; ++i) {
    const int h = hex_value(peek());
    if (h < 0) error_at(start, fmt::format("escape '\\{}' needs {} hex digits", e, digits));
    v = v * 16 + static_cast<uint32_t>(h);
    ++pos_;
  }
  if (v > 0x10FFFF) error_at(start, fmt::format("code point {:#x} is beyond U+10FFFF", v));
  return v;
}

uint32_t Parser::rule_id(const std::string& name, size_t off) {
  auto [it, fresh] = ids_.emplace(name, static_cast<uint32_t>(rules_.size()));
  if (fresh) {
    rules_.emplace_back();
    defined_.push_back(false);
    first_use_.push_back(off);
    g_.names.push_back(name);
  }
  return it->second;
}

uint32_t Parser::new_rule(const std::string& base, Alts alts) {
  // '~' cannot start or appear in a written rule name, so generated names never collide.
  const std::string name = fmt::format("{}~{}", base, ++generated_[base]);
  const uint32_t id = rule_id(name, pos_);
  rules_[id] = std::move(alts);
  defined_[id] = true;
  return id;
}

void Parser::count(size_t n, size_t off) {
  n_elems_ += n;
  if (n_elems_ > lim_.max_elements)
    error_at(off, fmt::format("the grammar expands to more than {} elements", lim_.max_elements));
}

Element rule_ref(uint32_t id) {
  return {ElemKind::Rule, false, id, 0};
}

void Parser::parse_literal(Seq& out) {
  const size_t start = pos_;
  ++pos_;  // "
  while (true) {
    if (at_end() || peek() == '\n' || peek() == '\r')
      error_at(start, "unterminated string literal");
    if (peek() == '"') break;
    const uint32_t cp = parse_char();
    out.push_back({ElemKind::Chars, false, static_cast<uint32_t>(g_.ranges.size()), 1});
    g_.ranges.push_back({cp, cp});
    count(1, start);
  }
  ++pos_;
}

void Parser::parse_class(Seq& out) {
  const size_t start = pos_;
  ++pos_;  // [
  Element e{ElemKind::Chars, false, static_cast<uint32_t>(g_.ranges.size()), 0};
  if (peek() == '^') {
    e.negated = true;
    ++pos_;
  }
  while (true) {
    if (at_end()) error_at(start, "unterminated character class");
    if (peek() == ']') break;
    const size_t at = pos_;
    const uint32_t lo = parse_char();
    uint32_t hi = lo;
    if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
      ++pos_;
      hi = parse_char();
      if (hi < lo) error_at(at, fmt::format("range end U+{:04X} < start U+{:04X}", hi, lo));
    }
    g_.ranges.push_back({lo, hi});
    ++e.count;
  }
  ++pos_;
  out.push_back(e);
  count(1, start);
}

void Parser::parse_repeat_bounds(uint32_t& lo, uint32_t& hi) {
  const size_t start = pos_;
  auto number = [&]() -> uint64_t {
    const size_t at = pos_;
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > lim_.max_repeat)
        error_at(at, fmt::format("repetition count above the limit of {}", lim_.max_repeat));
      ++pos_;
    }
    if (pos_ == at) error_at(at, fmt::format("expected a number, got {}", shown(at)));
    return v;
  };
  ++pos_;  // {
  skip_space(false);
  lo = static_cast<uint32_t>(number());
  skip_space(false);
  hi = lo;
  if (peek() == ',') {
    ++pos_;
    skip_space(false);
    hi = (peek() >= '0' && peek() <= '9') ? static_cast<uint32_t>(number()) : kUnbounded;
    skip_space(false);
  }
  if (peek() != '}')
    error_at(pos_, fmt::format("expected '}}' to close {{m,n}}, got {}", shown(pos_)));
  ++pos_;
  if (hi < lo) error_at(start, fmt::format("repetition {{{},{}}} has max < min", lo, hi));
}

// Replaces out[item_start..] (the last symbol) by its repetition {lo, hi}: lo copies, then
// `x*` as S ::= x S | (empty), or hi - lo nested optionals O ::= x O' | (empty).
void Parser::apply_repeat(const std::string& rule, Seq& out, size_t item_start, uint32_t lo,
                          uint32_t hi, size_t off) {
  Seq item(out.begin() + static_cast<std::ptrdiff_t>(item_start), out.end());
  out.resize(item_start);
  Element x = item.size() == 1 ? item[0] : rule_ref(new_rule(rule, Alts{item}));
  count(lo + 2, off);
  for (uint32_t i = 0; i < lo; ++i) out.push_back(x);
  if (hi == kUnbounded) {
    const uint32_t s = new_rule(rule, {});
    rules_[s] = Alts{Seq{x, rule_ref(s)}, Seq{}};
    out.push_back(rule_ref(s));
  } else if (hi > lo) {
    count(2 * (hi - lo), off);
    Element inner{};
    bool have_inner = false;
    for (uint32_t k = 0; k < hi - lo; ++k) {
      Seq body{x};
      if (have_inner) body.push_back(inner);
      inner = rule_ref(new_rule(rule, Alts{body, Seq{}}));
      have_inner = true;
    }
    out.push_back(inner);
  }
}

Seq Parser::parse_sequence(const std::string& rule, bool nested) {
  Seq out;
  size_t last_start = std::string::npos;  // where the last repeatable symbol begins
  while (!at_end()) {
    const char c = peek();
    const size_t at = pos_;
    if (c == '"') {
      last_start = out.size();
      parse_literal(out);
    } else if (c == '[') {
      last_start = out.size();
      parse_class(out);
    } else if (c == '.') {
      last_start = out.size();
      ++pos_;
      out.push_back({ElemKind::Chars, true, 0, 0});
      count(1, at);
    } else if (c == '(') {
      if (++nesting_ > lim_.max_nesting)
        error_at(at, fmt::format("groups nested deeper than {}", lim_.max_nesting));
      ++pos_;
      skip_space(true);
      Alts alts = parse_alternates(rule, true);
      --nesting_;
      if (peek() != ')') error_at(pos_, fmt::format("expected ')', got {}", shown(pos_)));
      ++pos_;
      last_start = out.size();
      out.push_back(rule_ref(new_rule(rule, std::move(alts))));
      count(1, at);
    } else if (is_name_char(c)) {
      last_start = out.size();
      out.push_back(rule_ref(rule_id(parse_name(), at)));
      count(1, at);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (last_start == std::string::npos)
        error_at(at, fmt::format("'{}' has nothing to repeat (group it: (x*){})", c, c));
      uint32_t lo = 0, hi = kUnbounded;
      if (c == '{') {
        parse_repeat_bounds(lo, hi);
      } else {
        ++pos_;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
      }
      apply_repeat(rule, out, last_start, lo, hi, at);
      last_start = std::string::npos;
    } else {
      break;
    }
    skip_space(nested);
  }
  return out;
}

Alts Parser::parse_alternates(const std::string& rule, bool nested) {
  Alts alts;
  alts.push_back(parse_sequence(rule, nested));
  while (peek() == '|') {
    ++pos_;
    skip_space(true);
    alts.push_back(parse_sequence(rule, nested));
  }
  return alts;
}

// A rule is left-recursive when it can reach itself before consuming a character: through the
// first element of an alternative, or a later one when everything before it can be empty.
void Parser::check_left_recursion() const {
  const size_t n = rules_.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& s : rules_[r]) {
        const bool all = std::all_of(s.begin(), s.end(), [&](const Element& e) {
          return e.kind == ElemKind::Rule && nullable[e.first];
        });
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<uint32_t>> edges(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& s : rules_[r])
      for (const Element& e : s) {
        if (e.kind != ElemKind::Rule) break;
        edges[r].push_back(e.first);
        if (!nullable[e.first]) break;
      }
  // Iterative DFS with colours; the grey path names the cycle.
  std::vector<uint8_t> colour(n, 0);
  std::vector<uint32_t> depth(n, 1);
  std::vector<std::pair<uint32_t, size_t>> path;
  for (uint32_t start = 0; start < n; ++start) {
    if (colour[start]) continue;
    path.push_back({start, 0});
    colour[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == edges[r].size()) {
        colour[r] = 2;
        // Acyclic below r: its depth is final, and bounds the matcher's recursion.
        for (uint32_t e : edges[r]) depth[r] = std::max(depth[r], depth[e] + 1);
        if (depth[r] > lim_.max_depth)
          error_at(first_use_[r], fmt::format("rule '{}' nests more than {} rules deep before "
                                              "its first character",
                                              g_.names[r], lim_.max_depth));
        path.pop_back();
        continue;
      }
      const uint32_t next = edges[r][i++];
      if (colour[next] == 1) {
        std::string cycle;
        bool on = false;
        for (const auto& [p, unused] : path) {
          on = on || p == next;
          if (on) cycle += g_.names[p] + " -> ";
        }
        error_at(first_use_[next], fmt::format("rule '{}' is left-recursive ({}{}); rewrite it "
                                               "right-recursively, e.g. x ::= item x?",
                                               g_.names[next], cycle, g_.names[next]));
      }
      if (colour[next] == 0) {
        colour[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
}

Grammar Parser::run(std::string_view root_name) {
  skip_space(true);
  while (!at_end()) {
    const size_t at = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=")
      error_at(pos_, fmt::format("expected '::=' after rule name '{}', got {}", name, shown(pos_)));
    pos_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name, at);
    if (defined_[id]) error_at(at, fmt::format("rule '{}' is defined twice", name));
    defined_[id] = true;
    first_use_[id] = at;
    rules_[id] = parse_alternates(name, false);
    skip_space(false);
    if (!at_end()) {
      if (peek() != '\n' && peek() != '\r')
        error_at(pos_, fmt::format("expected the end of the rule, got {}", shown(pos_)));
      skip_space(true);
    }
  }
  for (size_t r = 0; r < rules_.size(); ++r)
    if (!defined_[r])
      error_at(first_use_[r], fmt::format("rule '{}' is used but never defined", g_.names[r]));
  const auto root = ids_.find(std::string(root_name));
  if (root == ids_.end()) error_at(pos_, fmt::format("no rule named '{}'", root_name));
  check_left_recursion();
  g_.root = root->second;
  g_.alts.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r)
    for (const Seq& s : rules_[r]) {
      g_.alts[r].push_back(static_cast<uint32_t>(g_.elems.size()));
      g_.elems.insert(g_.elems.end(), s.begin(), s.end());
      g_.elems.push_back({});
    }
  return std::move(g_);
}

}  // namespace

bool Grammar::may_match(const Element& e, uint32_t lo, uint32_t hi) const {
  for (uint32_t i = e.first; i < e.first + e.count; ++i) {
    const CharRange& r = ranges[i];
    if (!e.negated && r.lo <= hi && r.hi >= lo) return true;
    if (e.negated && r.lo <= lo && r.hi >= hi) return false;  // the whole span is excluded
  }
  return e.negated;
}

Grammar parse_gbnf(std::string_view text, std::string_view root, const ParseLimits& limits) {
  return Parser(text, limits).run(root);
}

std::string gbnf_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (b < 0x20)  // control bytes (newlines included) as \xHH: the literal stays one line
      out += fmt::format("\\x{:02X}", b);
    else
      out += c;
  }
  return out;
}

}  // namespace minfer::grammar
