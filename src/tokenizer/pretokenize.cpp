#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/error.h"

namespace minfer::tok {

namespace {

// GPT-2's word regex without its final "\s+" alternative: with the splitter's semantics an
// unmatched whitespace stretch becomes a word anyway, so the result is the same.
constexpr const char* kGpt2Words =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Letters of the scripts with case (Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, ...):
// DeepSeek LLM's tokenizer.json spells them out as ranges rather than \p{L}, so CJK and other
// scripts are left to the later patterns.
constexpr const char* kDeepseekLlmLetters =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+";

// CJK ideographs, the block before them and Hangul syllables: one word per run.
constexpr const char* kCjkRuns = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";

}  // namespace

std::vector<std::string> pre_tokenizer_patterns(PreTokenizer pre) {
  // These are the Split patterns of each model's tokenizer.json, in order. Case-insensitive
  // contractions are spelled out as classes ('[sS]) instead of a (?i:...) group so the
  // patterns read the same in every regex dialect.
  switch (pre) {
    case PreTokenizer::Gpt2:
      return {kGpt2Words};
    case PreTokenizer::Llama3:
      return {
          R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+)"
          R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    case PreTokenizer::Qwen2:
      return {
          R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+)"
          R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    case PreTokenizer::Qwen35:
      // Qwen2's with combining marks (\p{M}) part of words, not of punctuation runs: Hindi or
      // Thai vowel signs stay attached to their letters.
      return {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"
              R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+)"
              R"(|\s+(?!\S)|\s+)"};
    case PreTokenizer::DeepseekLlm:
      return {R"([\r\n])",
              kDeepseekLlmLetters,
              "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
              R"(\s+$)",
              kCjkRuns,
              R"(\p{N}+)"};
    case PreTokenizer::DeepseekCoder:
      return {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkRuns, R"(\p{N})"};
    case PreTokenizer::Falcon:
      // Punctuation runs first (with the ASCII symbols Rust counts as punctuation), then
      // GPT-2's words, then digit runs cut into threes.
      return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Words, R"([0-9][0-9][0-9])"};
    case PreTokenizer::Starcoder:
      return {R"(\p{N})", kGpt2Words};
    case PreTokenizer::Gemma4:
      // No word splitting: merges run over whole lines ("▁" stands for spaces, so they cross
      // word boundaries). Runs of newlines are words of their own.
      return {R"([^\n]+|[\n]+)"};
    case PreTokenizer::Default:
      // llama.cpp's fallback for BPE vocabularies without a known pre-tokenizer.
      return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Words, R"(\p{N}+)", R"([0-9][0-9][0-9])"};
  }
  return {};
}

struct RegexSplitter::Pattern {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Pattern() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns) {
    auto pat = std::make_unique<Pattern>();
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // UCP: \s, \d and friends use Unicode properties, as the reference tokenizers do.
    pat->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
    if (!pat->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail(ErrorKind::Internal, "pre-tokenizer regex does not compile at {}: {} ({})", err_off,
           reinterpret_cast<const char*>(msg), p);
    }
    // JIT is an optimisation only: when the platform lacks it we use the interpreter.
    pat->jit = pcre2_jit_compile(pat->code, PCRE2_JIT_COMPLETE) == 0;
    patterns_.push_back(std::move(pat));
  }
}

RegexSplitter::~RegexSplitter() = default;

namespace {

struct MatchData {
  explicit MatchData(const pcre2_code* code)
      : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!md) fail(ErrorKind::OutOfMemory, "pcre2_match_data_create failed");
  }
  ~MatchData() { pcre2_match_data_free(md); }
  pcre2_match_data* md;
};

// One word -> matches and the gaps between them.
void split_one(const pcre2_code* code, bool jit, pcre2_match_data* md, std::string_view word,
               std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(word.data());
  size_t pos = 0;
  size_t gap_start = 0;
  while (pos < word.size()) {
    // Input was validated by the caller, so skip PCRE2's own UTF check on every call.
    uint32_t opts = PCRE2_NO_UTF_CHECK;
    int rc =
        pcre2_match(code, subject, word.size(), pos, opts | (jit ? 0 : PCRE2_NO_JIT), md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, word.size(), pos, opts | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail(ErrorKind::Internal, "pre-tokenizer regex match failed: {}",
           reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0];
    size_t end = ov[1];
    if (start > gap_start) out.push_back(word.substr(gap_start, start - gap_start));
    if (end == start) {
      // An empty match would loop forever: step over one character and leave it to the gap.
      pos = start + 1;
      while (pos < word.size() && (static_cast<uint8_t>(word[pos]) & 0xC0) == 0x80) ++pos;
      gap_start = start;
      continue;
    }
    out.push_back(word.substr(start, end - start));
    pos = gap_start = end;
  }
  if (gap_start < word.size()) out.push_back(word.substr(gap_start));
}

}  // namespace

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& words) const {
  if (text.empty()) return;
  std::vector<std::string_view> cur{text};
  std::vector<std::string_view> next;
  for (const auto& pat : patterns_) {
    MatchData md(pat->code);
    next.clear();
    for (std::string_view w : cur) split_one(pat->code, pat->jit, md.md, w, next);
    cur.swap(next);
  }
  words.insert(words.end(), cur.begin(), cur.end());
}

}  // namespace minfer::tok
