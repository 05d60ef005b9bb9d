// Regex pre-tokenization for byte-level BPE: splits text into words with Unicode-category
// regexes (PCRE2 in UTF + UCP mode, JIT-compiled when available).
//
// A splitter holds a sequence of patterns; each pattern splits every current word further,
// keeping matches and the unmatched stretches between them as words (llama.cpp's semantics for
// multi-regex pre-tokenizers).
// Ownership: owns the compiled patterns (not copyable). Thread safety: split() is const and
// safe from many threads: PCRE2 code is read-only and match data is per call.
// Failure modes: the constructor throws Error(Internal) if a pattern does not compile;
// split() falls back from JIT to the interpreter when the JIT stack is exhausted and throws
// Error(Internal) on any other PCRE2 failure. Input must be valid UTF-8 (callers sanitise).
// Cost: linear in the text for these patterns.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace minfer::tok {

class RegexSplitter {
 public:
  explicit RegexSplitter(const std::vector<std::string>& patterns);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the words of `text` (views into it) to `words`.
  void split(std::string_view text, std::vector<std::string_view>& words) const;

 private:
  struct Pattern;
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

// The patterns llama.cpp uses for each pre-tokenizer.
std::vector<std::string> pre_tokenizer_patterns(PreTokenizer pre);

}  // namespace minfer::tok
