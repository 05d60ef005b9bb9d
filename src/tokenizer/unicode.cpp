#include "tokenizer/unicode.h"

namespace minfer::tok {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t valid_utf8_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  uint32_t min_cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F, min_cp = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F, min_cp = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07, min_cp = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8.
  if (cp < min_cp || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return len;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_sanitized_utf8(s, out);
  return out;
}

void append_sanitized_utf8(std::string_view s, std::string& out) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_utf8_len(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
}

size_t incomplete_utf8_tail(std::string_view s) {
  // A UTF-8 sequence is at most 4 bytes, so only the last 3 bytes can be an unfinished one.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = utf8_len_from_lead(c);
    if (c < 0x80 || need == 1 || need <= back) return 0;
    // Check the partial prefix could still become valid (e.g. E0 must be followed by A0..BF).
    std::string probe(s.substr(n - back));
    const uint8_t filler[] = {0x80, 0xBF};
    for (uint8_t f : filler) {
      std::string t = probe;
      t.append(need - back, static_cast<char>(f));
      if (valid_utf8_len(t, 0) == need) return back;
    }
    return 0;
  }
  return 0;
}

static ByteLevelTables build_byte_level_tables() {
  ByteLevelTables t;
  t.cp_to_byte.fill(-1);
  // Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100.. in order.
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next++;
    append_utf8(t.byte_to_utf8[b], cp);
    t.cp_to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables = build_byte_level_tables();
  return tables;
}

std::string byte_level_decode(std::string_view text) {
  const ByteLevelTables& t = byte_level_tables();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = valid_utf8_len(text, i);
    if (n == 0) {  // not UTF-8 at all: copy the byte through
      out.push_back(text[i++]);
      continue;
    }
    uint32_t cp = static_cast<uint8_t>(text[i]);
    if (n == 2) cp = ((cp & 0x1F) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
    if (n <= 2 && cp < t.cp_to_byte.size() && t.cp_to_byte[cp] >= 0) {
      out.push_back(static_cast<char>(t.cp_to_byte[cp]));
    } else {
      out.append(text.data() + i, n);
    }
    i += n;
  }
  return out;
}

}  // namespace minfer::tok
