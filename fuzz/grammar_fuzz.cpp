// minfer-fuzz-libs: minfer_grammar minfer_common
// libFuzzer target for the grammar layer (src/grammar): the input is GBNF text (or, when it
// parses as JSON, a JSON schema converted to GBNF), then after the first NUL byte the bytes fed
// to the matcher in chunks the input's bytes size. A parse Error is an accepted outcome; a
// crash, a sanitizer report, an abort (MINFER_ASSERT), another exception, a hang, a memory
// blow-up, or the token filter's mask disagreeing with its per-token check is a finding.
// Composed grammars (grammar.h): text that starts "excluding:" names a word (the rest of the
// line); the matcher of gbnf_excluding must accept a valid UTF-8 input exactly when it does
// not contain the word. Every grammar is also spliced into `[ \t]* <it>`, which must accept
// " " + the input whenever the grammar itself accepts the input whole.
//
// Seeds (MINFER_FUZZ_SEED_DIR): a few grammars with matching inputs, the JSON grammar, schemas.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "fuzz_utf8.h"
#include "fuzz_util.h"
#include "grammar/json_schema.h"
#include "grammar/token_filter.h"

namespace {

using namespace minfer::grammar;

std::shared_ptr<const VocabIndex> vocab() {
  static const auto v = [] {
    std::vector<std::string> pieces = {""};  // 0: the end token
    for (const char* p : {"a",    "b",    "ab",       "ba",       "{",    "}",
                          "\"",   ":",    ",",        " ",        "\n",   "0",
                          "1",    "12",   "-",        ".",        "e",    "[",
                          "]",    "\\",   "true",     "null",     "yes",  "no",
                          "\xC3", "\xA9", "\xC3\xA9", "\xE4\xB8", "\xAD", "\xF0\x9F\x98\x80",
                          "{\"",  "\":",  "\",",      " \"",      "x",    "\x01",
                          "\xFF"})
      pieces.push_back(p);
    const int32_t eog[] = {0};
    return std::make_shared<const VocabIndex>(std::move(pieces), eog);
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = minfer::fuzz::seed_dir();
  if (dir.empty()) return 0;
  using std::string_literals::operator""s;
  minfer::fuzz::write_seed(dir, "excluding", "excluding:</｜p｜>\0a</｜p <｜ </｜p｜"s);
  minfer::fuzz::write_seed(dir, "excluding2", "excluding:abab\0aababaabab"s);
  minfer::fuzz::write_seed(dir, "yesno", "root ::= (\"yes\" | \"no\") \"!\"?\0yes!"s);
  minfer::fuzz::write_seed(dir, "json", json_object_gbnf() + "\0{\"a\": [1, 2.5, \"\xC3\xA9\"]}"s);
  minfer::fuzz::write_seed(dir, "repeat", "root ::= [a-c]{2,4} (\"x\" | [^\\n])* \"!\"\0abxx!"s);
  minfer::fuzz::write_seed(
      dir, "schema",
      R"({"type":"object","properties":{"a":{"enum":[1,"x"]},"b":{"type":"array",)"
      R"("items":{"$ref":"#"},"maxItems":2}},"required":["a"]})"
      "\0{\"a\":1}"s);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8 * 1024) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  std::string text(all.substr(0, nul));
  const std::string_view input = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  const auto schema = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  ParseLimits lim;
  lim.max_repeat = 64;
  lim.max_elements = 1 << 16;
  std::shared_ptr<const Grammar> g;
  if (text.starts_with("excluding:")) {
    const std::string word = text.substr(10, std::min<size_t>(text.find('\n', 10), 26) - 10);
    try {
      Matcher x(std::make_shared<const Grammar>(
          parse_gbnf("root ::= v\n" + gbnf_excluding("v", word), "root", lim)));
      if (minfer::fuzz::valid_utf8(input) &&
          (x.accept(input) && x.is_complete()) != (input.find(word) == std::string_view::npos))
        std::abort();
    } catch (const minfer::Error&) {
      if (!word.empty() && minfer::fuzz::valid_utf8(word))
        std::abort();  // a valid word never fails
    }
    return 0;
  }
  try {
    if (!schema.is_discarded() && (schema.is_object() || schema.is_boolean()))
      text = json_schema_to_gbnf(schema);
    g = std::make_shared<const Grammar>(parse_gbnf(text, "root", lim));
  } catch (const minfer::Error&) {
    return 0;
  }
  Matcher m(g);
  TokenFilter f(g, vocab());
  std::vector<float> logits(size_t(vocab()->n_vocab()));
  size_t at = 0;
  for (int step = 0; at < input.size() && step < 64; ++step) {
    const size_t n = 1 + static_cast<uint8_t>(input[at]) % 4;
    const std::string_view chunk = input.substr(at, n);
    at += n;
    const bool checked = m.check(chunk);
    if (m.accept(chunk) != checked) std::abort();
    // The filter: mask and allows agree, then follow the first allowed token.
    std::fill(logits.begin(), logits.end(), 0.0f);
    f.mask(logits);
    int32_t first = -1;
    for (int32_t id = 0; id < vocab()->n_vocab(); ++id) {
      const bool allowed = f.allows(id);
      if (allowed == std::isinf(logits[size_t(id)])) std::abort();
      if (allowed && first < 0) first = id;
    }
    if (first > 0 && !f.accept(first)) std::abort();
  }
  if (minfer::fuzz::valid_utf8(input)) {
    Matcher whole(g);
    if (whole.accept(input) && whole.is_complete()) {
      Matcher spliced(std::make_shared<const Grammar>(
          splice_gbnf("root ::= [ \\t]* hole\nhole ::= \"x\"\n", "hole", *g)));
      if (!spliced.accept(" ") || !spliced.accept(input) || !spliced.is_complete()) std::abort();
    }
  }
  (void)m.is_complete();
  return 0;
}
