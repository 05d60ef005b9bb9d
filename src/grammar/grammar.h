// GBNF grammars (llama.cpp's syntax) compiled to a flat rule table for the matcher.
//
//   auto g = minfer::grammar::parse_gbnf(R"(root ::= ("yes" | "no") "\n"?)");
//
// Syntax (docs/GRAMMAR.md): `name ::= alternatives` one rule per line (a rule continues over
// newlines only inside parentheses or after `::=` / `|`), `|` alternation, sequences, `( )`
// groups, postfix `*` `+` `?` `{m}` `{m,}` `{m,n}`, "string literals", [character classes]
// with ranges and `^` negation, `.` (any character), escapes \n \r \t \\ \" \[ \] \- \xHH
// \uHHHH \UHHHHHHHH, and `#` comments. Rule names are [A-Za-z0-9_-]+. Characters are Unicode
// code points; the source must be UTF-8.
//
// Compiled form: every alternative of every rule is a run of Elements in `elems` ended by an
// End element; repetitions and groups become generated rules (right-recursive, so the matcher
// never needs left recursion, which is refused: llama.cpp refuses it too).
//
// Ownership: a Grammar is a value (vectors); share it read-only (shared_ptr<const Grammar>).
// Thread safety: immutable after parse. Failure: parse_gbnf throws Error(InvalidArgument)
// "grammar:LINE:COL: problem" for syntax errors, undefined or duplicate rules, a missing root,
// left recursion, and grammars past a ParseLimits bound (repetition count, size, group
// nesting, rule depth before a character; no silent truncation). Cost: linear in the text plus the
// expanded repetitions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace minfer::grammar {

enum class ElemKind : uint8_t {
  End,    // end of an alternative
  Chars,  // one code point from ranges[first, first + count) (or not in them, when negated)
  Rule,   // a reference to rule `rule`
};

struct CharRange {
  uint32_t lo, hi;  // inclusive code points
};

struct Element {
  ElemKind kind = ElemKind::End;
  bool negated = false;  // Chars only
  uint32_t first = 0;    // Chars: first range; Rule: the rule id
  uint32_t count = 0;    // Chars: number of ranges
};

struct Grammar {
  std::vector<Element> elems;
  std::vector<CharRange> ranges;
  // Per rule: the index in `elems` where each alternative starts.
  std::vector<std::vector<uint32_t>> alts;
  std::vector<std::string> names;  // per rule (generated rules: "<parent>~<n>")
  uint32_t root = 0;

  bool matches(const Element& e, uint32_t cp) const {
    bool in = false;
    for (uint32_t i = e.first; i < e.first + e.count; ++i)
      if (cp >= ranges[i].lo && cp <= ranges[i].hi) {
        in = true;
        break;
      }
    return in != e.negated;
  }
  // Whether some code point in [lo, hi] may match `e` (a partial UTF-8 sequence).
  bool may_match(const Element& e, uint32_t lo, uint32_t hi) const;
};

// Bounds that keep a hostile grammar from exhausting memory or the stack: the parser and the
// matcher recurse over groups and over rules reached before a character is consumed.
struct ParseLimits {
  uint32_t max_repeat = 10000;       // m and n of {m,n}
  uint32_t max_elements = 1u << 22;  // compiled elements (after expanding repetitions)
  uint32_t max_nesting = 256;        // parenthesised groups inside one another
  uint32_t max_depth = 4096;         // rules entered one inside another before a character
};

Grammar parse_gbnf(std::string_view text, std::string_view root = "root",
                   const ParseLimits& limits = {});

// Escapes `s` as the inside of a GBNF string literal (quotes, backslashes, control bytes).
std::string gbnf_escape(std::string_view s);

// GBNF rules defining `name` as any text that does not contain `word` (UTF-8, not empty): the
// value of an XML-style tool parameter, which ends at the first closing tag. The rules (named
// `name` and `name`-k<i>) follow the word's prefix matched so far, so the language is exact,
// and recurse on the right only. Failure: Error(InvalidArgument) for an empty or invalid word.
std::string gbnf_excluding(std::string_view name, std::string_view word);

// `outer` (GBNF text, root "root") in which its rule `hole` stands for `inner`'s root: a grammar
// compiled elsewhere wrapped in more syntax (the server lets a thinking model's free thinking
// come before a request's grammar). The hole's own definition is kept but unreachable; the
// inner rules keep their names. Failure: as parse_gbnf for `outer`; no rule `hole` is an
// Error(InvalidArgument). Cost: a copy of both grammars.
Grammar splice_gbnf(std::string_view outer, std::string_view hole, const Grammar& inner);

}  // namespace minfer::grammar
