#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/error.h"

namespace minfer::tok {

std::vector<std::string> pre_tokenizer_patterns(PreTokenizer pre) {
  // Case-insensitive contractions are spelled out as classes ('[sS]) because that is how the
  // Llama 3 / Qwen2 patterns are published in their tokenizer.json ((?i:...) group).
  switch (pre) {
    case PreTokenizer::Gpt2:
      return {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"};
    case PreTokenizer::Llama3:
      return {
          R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+)"
          R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    case PreTokenizer::Qwen2:
      return {
          R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+)"
          R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    case PreTokenizer::Default:
      // llama.cpp's fallback for BPE vocabularies without a known pre-tokenizer.
      return {R"([\p{P}\$\+<=>\^~\|]+)",
              R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
              R"(\p{N}+)", R"([0-9][0-9][0-9])"};
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
