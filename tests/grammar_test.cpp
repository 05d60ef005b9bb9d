// minfer-test-libs: minfer_grammar
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_filter.h"

namespace minfer::grammar {
namespace {

std::shared_ptr<const Grammar> compile(const std::string& text) {
  return std::make_shared<const Grammar>(parse_gbnf(text));
}

// Whether the whole string is a sentence of the grammar (fed in one piece).
bool full_match(const std::string& gbnf, const std::string& s) {
  Matcher m(compile(gbnf));
  return m.accept(s) && m.is_complete();
}

std::string parse_error(const std::string& text) {
  try {
    parse_gbnf(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    return e.what();
  }
  return "(parsed)";
}

// ---- parser ----

TEST(GbnfParse, ValidCorpus) {
  const char* ok[] = {
      "root ::= \"a\"",
      "root ::= \"yes\" | \"no\"",
      "root ::= (\"a\" | \"b\")* \"c\"+ [x-z]? # comment\n",
      "# leading comment\nroot ::= item{2,4}\nitem ::= [0-9]\n",
      "root ::= [^\"\\\\] .{0,3}",
      "root ::=\n  \"{\" (\n    \"x\"\n  )? \"}\"\n",
      "root ::= \"\\x41\\u00e9\\U0001F600\\n\\t\\\"\"",
      "root ::= a\na ::= \"a\" a?\n",
      "root ::= \"\"",
      "root ::= ()",
      "root ::= \"héllo\" [α-ω]",
      "root ::= x{3} x{2,} x{0,1}\r\nx ::= \"x\"\r\n",
      "root ::= my_rule\nmy_rule ::= \"q\"",
  };
  for (const char* g : ok) EXPECT_NO_THROW(parse_gbnf(g)) << g;
}

TEST(GbnfParse, InvalidCorpusNamesLineColumnAndProblem) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case bad[] = {
      {"root ::= \"abc", "grammar:1:10: unterminated string literal"},
      {"root ::= [a-z", "grammar:1:10: unterminated character class"},
      {"root ::= foo", "grammar:1:10: rule 'foo' is used but never defined"},
      {"start ::= \"a\"", "no rule named 'root'"},
      {"root ::= \"a\"\nroot ::= \"b\"", "grammar:2:1: rule 'root' is defined twice"},
      {"root = \"a\"", "grammar:1:6: expected '::=' after rule name 'root'"},
      {"root ::= * \"a\"", "grammar:1:10: '*' has nothing to repeat"},
      {"root ::= \"a\"{3,2}", "max < min"},
      {"root ::= \"a\"{2", "expected '}' to close {m,n}"},
      {"root ::= \"a\"{99999}", "repetition count above the limit of 10000"},
      {"root ::= (\"a\"", "grammar:1:14: expected ')', got end of input"},
      {"root ::= \"\\q\"", "grammar:1:11: unknown escape '\\q'"},
      {"root ::= \"\\x4\"", "escape '\\x' needs 2 hex digits"},
      {"root ::= [z-a]", "range end U+0061 < start U+007A"},
      {"root ::= \"a\" )", "grammar:1:14: expected the end of the rule, got ')'"},
      {"root ::= \"a\"\n| \"b\"", "grammar:2:1: expected a rule name, got '|'"},
      {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "rule 'expr' is left-recursive"},
      {"root ::= a\na ::= b? a \"x\"\nb ::= \"b\"", "rule 'a' is left-recursive"},
      {"root ::= \"a\" \"a\"*?", "'?' has nothing to repeat"},
      {"root ::= \"\xff\"", "invalid UTF-8"},
  };
  for (const Case& c : bad) {
    const std::string msg = parse_error(c.text);
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.text << "\n  got: " << msg;
  }
}

TEST(GbnfParse, NestingAndDepthLimitsAreErrors) {
  const std::string deep_groups =
      "root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')');
  EXPECT_NE(parse_error(deep_groups).find("groups nested deeper than 256"), std::string::npos);
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) chain += fmt::format("r{} ::= r{}\n", i, i + 1);
  chain += "r5000 ::= \"x\"\n";
  EXPECT_NE(parse_error(chain).find("nests more than 4096 rules deep"), std::string::npos);
  // A long chain that consumes a character first is fine: only the leftmost depth counts.
  std::string right = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) right += fmt::format("r{} ::= \"a\" r{}\n", i, i + 1);
  right += "r5000 ::= \"x\"\n";
  EXPECT_NO_THROW(parse_gbnf(right));
  EXPECT_TRUE(full_match(right, std::string(5000, 'a') + "x"));
}

TEST(GbnfParse, ElementLimitIsAnError) {
  ParseLimits lim;
  lim.max_elements = 100;
  EXPECT_THROW(parse_gbnf("root ::= \"a\"{200}", "root", lim), Error);
  EXPECT_NO_THROW(parse_gbnf("root ::= \"a\"{50}", "root", lim));
}

TEST(GbnfParse, Escape) {
  EXPECT_EQ(gbnf_escape("a\"b\\c\n\x01é"), "a\\\"b\\\\c\\x0A\\x01é");
  EXPECT_TRUE(full_match("root ::= \"" + gbnf_escape("q\"\\\n\t\x01z") + "\"", "q\"\\\n\t\x01z"));
}

// ---- matcher ----

TEST(GrammarMatcher, AlternativesAndSequences) {
  const std::string g = R"(root ::= ("yes" | "no") "!"?)";
  EXPECT_TRUE(full_match(g, "yes"));
  EXPECT_TRUE(full_match(g, "no!"));
  EXPECT_FALSE(full_match(g, "ye"));
  EXPECT_FALSE(full_match(g, "yes!!"));
  EXPECT_FALSE(full_match(g, "maybe"));
  Matcher m(compile(g));
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.accept("n"));
  EXPECT_FALSE(m.accept("x"));  // rejected, state unchanged
  EXPECT_TRUE(m.accept("o"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.can_continue());  // "!" may follow
  EXPECT_TRUE(m.accept("!"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.can_continue());
}

TEST(GrammarMatcher, Repetitions) {
  EXPECT_TRUE(full_match("root ::= \"a\"*", ""));
  EXPECT_TRUE(full_match("root ::= \"a\"*", "aaaaaaaaaaaaaaaa"));
  EXPECT_FALSE(full_match("root ::= \"a\"+", ""));
  EXPECT_TRUE(full_match("root ::= \"ab\"+", "ababab"));
  EXPECT_FALSE(full_match("root ::= \"ab\"+", "aba"));
  const std::string r = "root ::= [0-9]{2,4}";
  EXPECT_FALSE(full_match(r, "1"));
  EXPECT_TRUE(full_match(r, "12"));
  EXPECT_TRUE(full_match(r, "1234"));
  EXPECT_FALSE(full_match(r, "12345"));
  EXPECT_TRUE(full_match("root ::= \"x\"{3}", "xxx"));
  EXPECT_FALSE(full_match("root ::= \"x\"{3}", "xx"));
  EXPECT_TRUE(full_match("root ::= \"x\"{2,} \"y\"", "xxxxxy"));
  EXPECT_FALSE(full_match("root ::= \"x\"{2,} \"y\"", "xy"));
  EXPECT_TRUE(full_match("root ::= (\"a\" | \"b\"){0,2} \"c\"", "bac"));
}

TEST(GrammarMatcher, CharClassesAndAny) {
  const std::string g = R"(root ::= [a-c0-9_] [^a-z] .)";
  EXPECT_TRUE(full_match(g, "b!z"));
  EXPECT_TRUE(full_match(g, "_Aé"));
  EXPECT_FALSE(full_match(g, "dAx"));
  EXPECT_FALSE(full_match(g, "aax"));
}

TEST(GrammarMatcher, RecursionAndNesting) {
  const std::string g = "root ::= list\nlist ::= \"[\" (list (\",\" list)*)? \"]\"";
  EXPECT_TRUE(full_match(g, "[]"));
  EXPECT_TRUE(full_match(g, "[[],[[]],[]]"));
  EXPECT_FALSE(full_match(g, "[[]"));
  EXPECT_FALSE(full_match(g, "[],"));
  std::string deep(500, '[');
  deep += std::string(500, ']');
  EXPECT_TRUE(full_match(g, deep));
}

TEST(GrammarMatcher, Utf8SplitAcrossCalls) {
  // "é" is C3 A9, "😀" is F0 9F 98 80.
  Matcher m(compile("root ::= \"é\" [😀-😂]"));
  EXPECT_TRUE(m.accept("\xC3"));
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.accept("\xA9\xF0\x9F"));
  EXPECT_FALSE(m.accept("\x98\x90"));  // U+1F610 is outside the class
  EXPECT_TRUE(m.accept("\x98"));
  EXPECT_FALSE(m.is_complete());  // a character is still partial
  EXPECT_TRUE(m.accept("\x81"));
  EXPECT_TRUE(m.is_complete());
  // A lead byte no stack can match is refused at once, not at the end of the character.
  Matcher ascii(compile("root ::= [a-z]+"));
  EXPECT_FALSE(ascii.check("\xC3"));
  EXPECT_FALSE(ascii.check("\x80"));  // a stray continuation byte
  EXPECT_TRUE(ascii.check("abc"));
  // Lead bytes whose smallest code point is past the class: E0 and F0 start no ASCII (their
  // value bits are zero, but an overlong encoding is not UTF-8), nor do C0 / C1.
  for (const char* lead : {"\xC0", "\xC1", "\xE0", "\xF0", "\xF4\x90"})
    EXPECT_FALSE(ascii.check(lead)) << int(uint8_t(lead[0]));
  Matcher any(compile("root ::= .+"));
  EXPECT_FALSE(any.check("\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(any.check("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_TRUE(any.check("\xF4\x8F\xBF\xBF"));
}

TEST(GrammarMatcher, LongRepetitionKeepsStacksShallow) {
  Matcher m(compile("root ::= \"\\\"\" [^\"]* \"\\\"\""));
  ASSERT_TRUE(m.accept("\""));
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(m.accept("x"));
  EXPECT_LT(m.n_nodes(), 16u);  // the tail call of x* pushes nothing
  EXPECT_TRUE(m.accept("\""));
  EXPECT_TRUE(m.is_complete());
}

// Compaction keeps only the live stacks and changes no answer: a matcher compacting at every
// accept against one that never does, over nested JSON.
TEST(GrammarMatcher, CompactionChangesNoAnswer) {
  const auto g = compile(json_object_gbnf());
  Matcher small(g, /*compact_nodes=*/8), big(g);
  std::string doc = "{\"a\": [";
  for (int i = 0; i < 30; ++i) doc += "{\"k\": [1, \"x\", {\"é\": null}], \"b\": true}, ";
  doc += "[]], \"z\": -1.5e3}";
  const std::string probes[] = {"{", "}", "]", ",", "\"", "1", "x", " "};
  for (size_t i = 0; i < doc.size(); ++i) {
    for (const std::string& p : probes) ASSERT_EQ(small.check(p), big.check(p)) << i << p;
    ASSERT_TRUE(small.accept(doc.substr(i, 1))) << i;
    ASSERT_TRUE(big.accept(doc.substr(i, 1))) << i;
    ASSERT_EQ(small.is_complete(), big.is_complete()) << i;
  }
  EXPECT_TRUE(small.is_complete());
  EXPECT_LT(small.n_nodes(), 64u);
  EXPECT_GT(big.n_nodes(), small.n_nodes());
}

TEST(GrammarMatcher, ResetStartsOver) {
  Matcher m(compile("root ::= \"ab\""));
  EXPECT_TRUE(m.accept("ab"));
  EXPECT_FALSE(m.accept("a"));
  m.reset();
  EXPECT_TRUE(m.accept("a"));
}

// ---- composed grammars ----

// Text without a word: checked against a brute-force find over every short string of the
// word's characters and one other, for words with and without borders (KMP's fallbacks).
TEST(GbnfCompose, ExcludingAcceptsExactlyTheTextWithoutTheWord) {
  for (const std::string word : {"</p>", "aab", "abab", "aa", "x", "</｜p｜>"}) {
    SCOPED_TRACE(word);
    const std::string gbnf = "root ::= v\n" + gbnf_excluding("v", word);
    std::vector<std::string> alphabet = {"z"};
    for (size_t i = 0; i < word.size();) {
      const size_t n = static_cast<uint8_t>(word[i]) < 0x80 ? 1 : 3;  // ASCII or a 3-byte char
      alphabet.push_back(word.substr(i, n));
      i += n;
    }
    std::vector<std::string> texts = {""};
    for (int len = 0; len < 6; ++len) {
      const size_t n = texts.size();
      for (size_t t = 0; t < n; ++t)
        for (const std::string& c : alphabet)
          if (texts[t].size() < 12) texts.push_back(texts[t] + c);
    }
    Matcher m(compile(gbnf));
    for (const std::string& t : texts) {
      m.reset();
      ASSERT_EQ(m.accept(t) && m.is_complete(), t.find(word) == std::string::npos) << t;
    }
    EXPECT_TRUE(full_match(gbnf, "a < b and </q> \n"));
  }
  EXPECT_THROW(gbnf_excluding("v", ""), Error);
  EXPECT_THROW(gbnf_excluding("v", "\xC3"), Error);
}

TEST(GbnfCompose, SpliceWrapsACompiledGrammar) {
  const Grammar inner = parse_gbnf("root ::= \"{\" x \"}\"\nx ::= [0-9]+");
  // Rule names may repeat the inner grammar's: names are for messages only.
  const auto g = std::make_shared<const Grammar>(
      splice_gbnf("root ::= [ \\n]* ( \"<t>\" | hole )\nhole ::= \"?\"\nx ::= \"x\"", "hole",
                  inner));
  auto accepts = [&](const std::string& s) {
    Matcher m(g);
    return m.accept(s) && m.is_complete();
  };
  EXPECT_TRUE(accepts("{12}"));
  EXPECT_TRUE(accepts("\n\n{3}"));
  EXPECT_TRUE(accepts(" <t>"));
  EXPECT_FALSE(accepts("?"));  // the hole's own definition is unreachable
  EXPECT_FALSE(accepts("x"));
  EXPECT_FALSE(accepts("{x}"));
  EXPECT_THROW(splice_gbnf("root ::= \"a\"", "hole", inner), Error);
}

// ---- token filter ----

std::shared_ptr<const VocabIndex> toy_vocab() {
  // 0 "<eos>" (end), 1 "" (a control token), then pieces.
  std::vector<std::string> pieces = {"",   "",  "y",    "ye",   "yes",  "n", "no", "s",
                                     "es", "x", "yes!", "\xC3", "\xA9", "é", "no"};
  const int32_t eog[] = {0};
  return std::make_shared<const VocabIndex>(std::move(pieces), eog);
}

std::vector<int32_t> allowed_ids(TokenFilter& f) {
  std::vector<float> logits(static_cast<size_t>(f.vocab().n_vocab()), 1.0f);
  const size_t n = f.mask(logits);
  std::vector<int32_t> out;
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isinf(logits[i])) out.push_back(static_cast<int32_t>(i));
  EXPECT_EQ(out.size(), n);
  for (int32_t id : out) EXPECT_TRUE(f.allows(id)) << id;  // mask and allows agree
  return out;
}

TEST(TokenFilter, MasksWhatTheGrammarRejects) {
  TokenFilter f(compile(R"(root ::= "yes" | "no")"), toy_vocab());
  EXPECT_EQ(allowed_ids(f), (std::vector<int32_t>{2, 3, 4, 5, 6, 14}));
  EXPECT_FALSE(f.allows(0));  // end of generation: not yet
  EXPECT_FALSE(f.allows(1));  // control tokens never
  EXPECT_FALSE(f.allows(-1));
  EXPECT_FALSE(f.allows(99));
  ASSERT_TRUE(f.accept(3));  // "ye"
  EXPECT_EQ(allowed_ids(f), (std::vector<int32_t>{7}));
  EXPECT_FALSE(f.accept(9));
  ASSERT_TRUE(f.accept(7));
  EXPECT_TRUE(f.is_complete());
  EXPECT_EQ(allowed_ids(f), (std::vector<int32_t>{0}));  // only the end token
  EXPECT_TRUE(f.accept(0));
}

TEST(TokenFilter, Utf8AcrossTokens) {
  TokenFilter f(compile(R"(root ::= "é" "s")"), toy_vocab());
  EXPECT_EQ(allowed_ids(f), (std::vector<int32_t>{11, 13}));  // "\xC3" and "é"
  ASSERT_TRUE(f.accept(11));
  EXPECT_EQ(allowed_ids(f), (std::vector<int32_t>{12}));  // "\xA9" finishes it
  ASSERT_TRUE(f.accept(12));
  EXPECT_EQ(allowed_ids(f), (std::vector<int32_t>{7}));
}

TEST(TokenFilter, NothingAllowedWhenDoneWithoutAnEndToken) {
  std::vector<std::string> pieces = {"a", "b"};
  TokenFilter f(compile("root ::= \"a\""),
                std::make_shared<const VocabIndex>(pieces, std::span<const int32_t>{}));
  ASSERT_TRUE(f.accept(0));
  std::vector<float> logits(2, 0.0f);
  EXPECT_EQ(f.mask(logits), 0u);
}

TEST(TokenFilter, BannedAllowedTokensDoNotCount) {
  TokenFilter f(compile(R"(root ::= "yes" | "no")"), toy_vocab());
  ASSERT_TRUE(f.accept(4));
  std::vector<float> logits(15, 1.0f);
  logits[0] = -INFINITY;  // the only allowed token, banned (logit_bias false / ignore_eos)
  EXPECT_EQ(f.mask(logits), 0u);
}

// mask() (the trie walk over cached set transitions) and allows() (the plain byte steps) agree
// on every token of a random vocabulary with split UTF-8, at many states of the JSON grammar,
// masks repeated on one filter included (the transition cache is reused).
TEST(TokenFilter, MaskAgreesWithAllowsOnARandomVocabulary) {
  const char* atoms[] = {"{",    "}",    "\"",       ":",        ",",    " ",    "\n",  "a",
                         "b",    "1",    "0",        "-",        ".",    "e",    "[",   "]",
                         "\\",   "u",    "t",        "r",        "n",    "é",    "中",  "😀",
                         "\xC3", "\xA9", "\xF0\x9F", "\x98\x80", "\x01", "true", "null"};
  std::mt19937 rng(5);
  std::vector<std::string> pieces = {""};  // 0: the end token
  for (int i = 0; i < 3000; ++i) {
    std::string p;
    for (int n = 1 + int(rng() % 4); n > 0; --n) p += atoms[rng() % std::size(atoms)];
    pieces.push_back(p);
  }
  const int32_t eog[] = {0};
  auto vocab = std::make_shared<const VocabIndex>(pieces, eog);
  TokenFilter f(compile(json_object_gbnf()), vocab);
  std::vector<float> logits(pieces.size());
  int steps = 0;
  for (int step = 0; step < 60; ++step, ++steps) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    const size_t n = f.mask(logits);
    size_t agree = 0;
    std::vector<int32_t> ok;
    for (int32_t id = 0; id < int32_t(pieces.size()); ++id) {
      const bool a = f.allows(id);
      agree += a == !std::isinf(logits[size_t(id)]);
      if (a && id != 0) ok.push_back(id);
    }
    ASSERT_EQ(agree, pieces.size()) << "step " << step;
    ASSERT_LE(ok.size(), n);
    if (ok.empty()) break;
    ASSERT_TRUE(f.accept(ok[rng() % ok.size()]));
  }
  EXPECT_GT(steps, 20);
}

// ---- JSON ----

namespace json_tests {

using json = nlohmann::ordered_json;

bool schema_accepts(const json& schema, const std::string& text) {
  return full_match(json_schema_to_gbnf(schema), text);
}

std::string schema_error(const json& schema) {
  try {
    parse_gbnf(json_schema_to_gbnf(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "(converted)";
}

TEST(JsonGrammar, ObjectModeAcceptsObjectsOnly) {
  const std::string g = json_object_gbnf();
  EXPECT_TRUE(full_match(g, R"({"a": [1, -2.5e3, "x\n\u00e9", true, null, {}], "b": {"c": []}})"));
  EXPECT_TRUE(full_match(g, " {}\n"));
  EXPECT_TRUE(full_match(g, "{\"é😀\": 0}"));
  EXPECT_FALSE(full_match(g, "[1]"));
  EXPECT_FALSE(full_match(g, R"({"a":})"));
  EXPECT_FALSE(full_match(g, R"({"a": 01})"));
  EXPECT_FALSE(full_match(g, "{\"a\": \"\x01\"}"));  // raw control characters in strings
  EXPECT_FALSE(full_match(g, R"({"a": 1,})"));
  EXPECT_FALSE(full_match(g, "{}" + std::string(2, ' ')));  // whitespace is bounded
  EXPECT_TRUE(full_match(g, "{\n  \"a\": 1\n}"));
  EXPECT_FALSE(full_match(g, "{\n" + std::string(17, ' ') + "\"a\": 1}"));
  EXPECT_TRUE(full_match(json_value_gbnf(), "\"just a string\""));
}

TEST(JsonGrammar, SchemaObjectRequiredAndOptional) {
  const json s = json::parse(R"({
    "type": "object", "title": "person",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                   "nick": {"type": "string", "description": "optional"}},
    "required": ["name", "age"], "additionalProperties": false})");
  EXPECT_TRUE(schema_accepts(s, R"({"name":"x","age":3})"));
  EXPECT_TRUE(schema_accepts(s, R"({ "name": "x", "age": -3, "tags": ["a", "b"], "nick": "n" })"));
  EXPECT_TRUE(schema_accepts(s, R"({"name":"x","age":3,"nick":"n"})"));
  EXPECT_FALSE(schema_accepts(s, R"({"name":"x"})"));
  EXPECT_FALSE(schema_accepts(s, R"({"name":"x","age":3.5})"));
  EXPECT_FALSE(schema_accepts(s, R"({"name":"x","age":3,"other":1})"));
  EXPECT_FALSE(schema_accepts(s, R"({"name":"x","age":3,"tags":["a","b","c"]})"));
  EXPECT_FALSE(schema_accepts(s, R"({"age":3,"name":"x"})"));  // the schema's order
}

TEST(JsonGrammar, SchemaLeadingOptionalProperties) {
  const json s = json::parse(R"({"type": "object", "properties":
      {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}}})");
  for (const char* ok : {"{}", R"({"b":true})", R"({"a":1,"c":null})", R"({"c":null})",
                         R"({"a":1,"b":false,"c":null})"})
    EXPECT_TRUE(schema_accepts(s, ok)) << ok;
  for (const char* bad : {R"({,"b":true})", R"({"b":true,})", R"({"b":true,"a":1})"})
    EXPECT_FALSE(schema_accepts(s, bad)) << bad;
}

TEST(JsonGrammar, SchemaEnumConstAnyOfTypesRefs) {
  EXPECT_TRUE(schema_accepts(json::parse(R"({"enum": ["red", 1, null]})"), "\"red\""));
  EXPECT_TRUE(schema_accepts(json::parse(R"({"enum": ["red", 1, null]})"), "null"));
  EXPECT_FALSE(schema_accepts(json::parse(R"({"enum": ["red", 1, null]})"), "\"blue\""));
  EXPECT_TRUE(schema_accepts(json::parse(R"({"const": {"k": [1]}})"), R"({"k":[1]})"));
  const json any = json::parse(R"({"anyOf": [{"type": "number"}, {"type": "string"}]})");
  EXPECT_TRUE(schema_accepts(any, "1.5"));
  EXPECT_FALSE(schema_accepts(any, "true"));
  EXPECT_TRUE(schema_accepts(json::parse(R"({"type": ["boolean", "null"]})"), "null"));
  EXPECT_TRUE(schema_accepts(json::parse(R"({"type": "string", "nullable": true})"), "null"));
  const json len = json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(schema_accepts(len, "\"a\""));
  EXPECT_TRUE(schema_accepts(len, "\"a\\n\""));
  EXPECT_FALSE(schema_accepts(len, "\"abcd\""));
  const json arr = json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2})");
  EXPECT_FALSE(schema_accepts(arr, "[1]"));
  EXPECT_TRUE(schema_accepts(arr, "[1, 2, 3]"));
  const json tree = json::parse(R"({"$ref": "#/$defs/node", "$defs": {"node": {
      "type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}})");
  EXPECT_TRUE(schema_accepts(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(schema_accepts(tree, R"({"v":1,"kids":[{}]})"));
  const json map =
      json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(schema_accepts(map, R"({"x": 1, "y": 2})"));
  EXPECT_FALSE(schema_accepts(map, R"({"x": "1"})"));
}

TEST(JsonGrammar, UnsupportedKeywordsAreNamed) {
  struct Case {
    const char* schema;
    const char* want;
  };
  const Case cases[] = {
      {R"({"type": "object", "properties": {"x": {"type": "string", "pattern": "a+"}}})",
       "json_schema: keyword 'pattern' is not supported at #/properties/x"},
      {R"({"type": "integer", "minimum": 0})", "keyword 'minimum' is not supported at #"},
      {R"({"type": "string", "format": "date"})", "keyword 'format' is not supported"},
      {R"({"allOf": [{"type": "string"}]})", "keyword 'allOf' is not supported"},
      {R"({"type": "object", "properties": {"a": {}}, "additionalProperties": true})",
       "'additionalProperties' other than false next to 'properties' is not supported"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})",
       "required \"b\" is not a property"},
      {R"({"$ref": "#/$defs/missing"})", "'$ref' #/$defs/missing does not name"},
      {R"({"type": "str"})", "type 'str' is not a JSON schema type at #/type"},
      {R"(false)", "the schema false matches nothing"},
      {R"([1])", "a schema must be an object or a boolean"},
  };
  for (const Case& c : cases) {
    const std::string msg = schema_error(json::parse(c.schema));
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.schema << "\n  got: " << msg;
  }
}

}  // namespace json_tests
}  // namespace
}  // namespace minfer::grammar
