// Streaming text for one request: token ids -> text that is safe to send now.
//
// Two hold-backs, in this order:
//  1. UTF-8: tok::StreamDecoder keeps a character spread over several tokens (byte-fallback
//     pieces) until it is complete, so no chunk ever ends inside a character.
//  2. Stop strings: StopMatcher keeps the longest tail of the text that could still become the
//     start of a stop string; once a stop string appears, the text before it is released and
//     everything from it on is dropped.
// sse_data() frames one Server-Sent Event ("data: <json>\n\n").
//
// Ownership: TextStream keeps a reference to the Tokenizer (must outlive it) and owns its
// buffers. Thread safety: none (one per request, used by the decode loop). Failure: none; bytes
// that can never be valid UTF-8 become U+FFFD. Cost: push is O(held text x stop strings).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace minfer::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends `text` (valid UTF-8); returns what can be released now.
  std::string push(std::string_view text);
  // The held tail, released at the end of generation (no stop string can follow any more).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& stop_word() const { return stop_word_; }  // the stop string that matched
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string stop_word_;
};

class TextStream {
 public:
  // keep_special: control tokens whose text is kept (tool-call markers); other control
  // tokens' text is dropped, as in detokenize().
  TextStream(const tok::Tokenizer& tk, std::vector<std::string> stops,
             std::vector<int32_t> keep_special = {});
  std::string push_token(int32_t id);          // decoder then stop matcher
  std::string push_bytes(std::string_view b);  // same for raw piece bytes (tests)
  std::string finish();                        // end of generation: release what is held
  bool stopped() const { return stop_.stopped(); }
  const std::string& stop_word() const { return stop_.stop_word(); }

 private:
  const tok::Tokenizer& tk_;
  tok::StreamDecoder dec_;
  StopMatcher stop_;
  std::vector<int32_t> keep_special_;
  std::string piece_;
};

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary (a started
// multi-byte sequence at the end is cut off).
size_t utf8_complete_prefix(std::string_view s);

// "data: " + payload + "\n\n" (payload must hold no newline: compact JSON never does).
std::string sse_data(std::string_view payload);

}  // namespace minfer::server
