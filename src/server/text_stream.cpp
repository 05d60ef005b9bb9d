#include "server/text_stream.h"

#include <algorithm>

namespace minfer::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // The earliest complete stop string wins (ties: the longer one).
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    if (best == std::string::npos || at < best || (at == best && s.size() > stop_word_.size())) {
      best = at;
      stop_word_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  std::string out;
  out.swap(held_);
  return out;
}

TextStream::TextStream(const tok::Tokenizer& tk, std::vector<std::string> stops,
                       std::vector<int32_t> keep_special)
    : tk_(tk), dec_(tk), stop_(std::move(stops)), keep_special_(std::move(keep_special)) {}

std::string TextStream::push_token(int32_t id) {
  if (!keep_special_.empty() &&
      std::find(keep_special_.begin(), keep_special_.end(), id) != keep_special_.end())
    return stop_.push(dec_.push_bytes(tk_.token_to_piece(id, /*render_special=*/true)));
  dec_.push(id, piece_);
  return stop_.push(piece_);
}

std::string TextStream::push_bytes(std::string_view b) {
  return stop_.push(dec_.push_bytes(b));
}

std::string TextStream::finish() {
  std::string out = stop_.push(dec_.flush());
  return out + stop_.flush();
}

size_t utf8_complete_prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t i = s.size();
  size_t back = 0;
  while (i > 0 && back < 4) {
    const auto c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII)
      size_t need = 1;
      if ((c & 0xE0) == 0xC0)
        need = 2;
      else if ((c & 0xF0) == 0xE0)
        need = 3;
      else if ((c & 0xF8) == 0xF0)
        need = 4;
      return back + 1 >= need ? s.size() : i - 1;
    }
    --i;
    ++back;
  }
  return s.size();
}

std::string sse_data(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  out.append("data: ").append(payload).append("\n\n");
  return out;
}

}  // namespace minfer::server
