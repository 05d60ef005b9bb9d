// An incremental JSON value scanner for text that grows at its end (a model's output arriving
// piece by piece): it tells whether the text from a start position is a complete JSON value
// (Done, and where it ends), a valid prefix of one (More) or neither (Bad), and when fed the
// same text grown longer it resumes where it stopped, so scanning a value of n bytes that
// arrives in any number of pieces costs O(n) in all.
//
// It checks JSON's grammar (RFC 8259) without building values; what it cannot see without
// decoding (lone surrogate escapes, numbers beyond a double, invalid UTF-8 inside strings) is
// left to nlohmann-json, which the tool-call parser runs once on a complete value. A number
// that reaches the end of the text may go on, so it is More until a byte after it arrives.
//
// Ownership: a value (the open containers' stack). Thread safety: none. Failure: none thrown;
// Bad is final. Cost: O(bytes fed); memory O(nesting depth), bounded by the text only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace minfer::server {

// Done: a complete item; More: the text ends inside a valid prefix of one; Bad: invalid.
enum class Scan { Done, More, Bad };

class JsonScanner {
 public:
  // A value that starts at text position `begin` (its first byte, not whitespace).
  explicit JsonScanner(size_t begin = 0) : at_(begin) {}

  // Scans `text` (the whole text, which must extend every text fed before) from where the last
  // call stopped. Done and Bad are final.
  Scan feed(std::string_view text);
  Scan status() const { return status_; }
  // Done: one past the value's last byte.
  size_t end() const { return end_; }

 private:
  enum class Want : uint8_t { Value, ValueOrClose, Key, KeyOrClose, Colon, CommaOrClose };
  enum class Lex : uint8_t { None, Str, Esc, Hex, Lit, Num };
  bool value_done(size_t end);
  bool step_none(char c, size_t i);
  bool step_num(char c);

  std::vector<char> open_;  // the containers the scan is in: '{' or '['
  Want want_ = Want::Value;
  Lex lex_ = Lex::None;
  bool key_ = false;  // Lex::Str: the string is an object key
  uint8_t sub_ = 0;   // Hex: digits seen; Lit: bytes matched; Num: the number's state
  std::string_view lit_;
  size_t at_;
  size_t end_ = 0;
  Scan status_ = Scan::More;
};

// Scans a whole JSON value at s[i] (not whitespace) in one go.
Scan scan_json_value(std::string_view s, size_t i, size_t* end);

}  // namespace minfer::server
