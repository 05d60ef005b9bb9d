// Grammars built from parts (grammar.h): text without a word, and one grammar inside another.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "grammar/grammar.h"

namespace minfer::grammar {

namespace {

// The UTF-8 characters of `word`, each as its bytes.
std::vector<std::string> characters(std::string_view word) {
  std::vector<std::string> out;
  for (size_t i = 0; i < word.size();) {
    const auto b = static_cast<uint8_t>(word[i]);
    const size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
    if ((b & 0xC0) == 0x80 || b >= 0xF8 || i + n > word.size())
      fail(ErrorKind::InvalidArgument, "gbnf_excluding: invalid UTF-8 in the word");
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<uint8_t>(word[i + k]) & 0xC0) != 0x80)
        fail(ErrorKind::InvalidArgument, "gbnf_excluding: invalid UTF-8 in the word");
    out.emplace_back(word.substr(i, n));
    i += n;
  }
  return out;
}

// A character inside [...]: the class's own syntax characters and control bytes escaped.
std::string class_char(const std::string& c) {
  if (c.size() == 1 && (c[0] == ']' || c[0] == '[' || c[0] == '\\' || c[0] == '-' || c[0] == '^'))
    return "\\" + c;
  if (c.size() == 1 && static_cast<uint8_t>(c[0]) < 0x20)
    return fmt::format("\\x{:02X}", static_cast<uint8_t>(c[0]));
  return c;
}

}  // namespace

std::string gbnf_excluding(std::string_view name, std::string_view word) {
  const std::vector<std::string> w = characters(word);
  if (w.empty()) fail(ErrorKind::InvalidArgument, "gbnf_excluding: empty word");
  const size_t k = w.size();
  // KMP: border[i] is the longest proper border of w[0..i].
  std::vector<size_t> border(k, 0);
  for (size_t i = 1, j = 0; i < k; ++i) {
    while (j > 0 && w[i] != w[j]) j = border[j - 1];
    if (w[i] == w[j]) ++j;
    border[i] = j;
  }
  std::vector<std::string> distinct = w;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::string others = "[^";
  for (const std::string& c : distinct) others += class_char(c);
  others += "]";
  auto state = [&](size_t i) {
    return i == 0 ? std::string(name) : fmt::format("{}-k{}", name, i);
  };
  // State i: the text ends with w[0..i) (and no earlier match). Each character moves to the
  // longest prefix it extends; the one that would complete the word has no alternative.
  std::string rules;
  for (size_t i = 0; i < k; ++i) {
    std::string alts = others + " " + state(0);
    for (const std::string& c : distinct) {
      size_t j = i;
      while (j > 0 && w[j] != c) j = border[j - 1];
      if (w[j] == c) ++j;
      if (j == k) continue;
      alts += " | \"" + gbnf_escape(c) + "\" " + state(j);
    }
    rules += state(i) + " ::= ( " + alts + " )?\n";
  }
  return rules;
}

Grammar splice_gbnf(std::string_view outer, std::string_view hole, const Grammar& inner) {
  Grammar g = parse_gbnf(outer);
  const auto it = std::find(g.names.begin(), g.names.end(), hole);
  if (it == g.names.end())
    fail(ErrorKind::InvalidArgument, "splice_gbnf: no rule '{}' in the outer grammar", hole);
  const auto hole_id = static_cast<uint32_t>(it - g.names.begin());
  const auto rule_off = static_cast<uint32_t>(g.alts.size());
  const auto elem_off = static_cast<uint32_t>(g.elems.size());
  const auto range_off = static_cast<uint32_t>(g.ranges.size());
  for (Element& e : g.elems)
    if (e.kind == ElemKind::Rule && e.first == hole_id) e.first = inner.root + rule_off;
  g.ranges.insert(g.ranges.end(), inner.ranges.begin(), inner.ranges.end());
  for (Element e : inner.elems) {
    if (e.kind == ElemKind::Chars) e.first += range_off;
    if (e.kind == ElemKind::Rule) e.first += rule_off;
    g.elems.push_back(e);
  }
  for (std::vector<uint32_t> alts : inner.alts) {
    for (uint32_t& a : alts) a += elem_off;
    g.alts.push_back(std::move(alts));
  }
  g.names.insert(g.names.end(), inner.names.begin(), inner.names.end());
  return g;
}

}  // namespace minfer::grammar
