// UTF-8 helpers and the GPT-2 byte <-> unicode mapping used by byte-level BPE.
//
// Ownership: results are new strings (or appended to the caller's); byte_level_tables() returns
// a process-lifetime static.
// Thread safety: all functions are pure; the byte tables are built once (static init, thread-safe).
// Failure modes: none throw; invalid UTF-8 is never an error here, it becomes U+FFFD.
// Cost: linear in the input.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace minfer::tok {

// Appends the UTF-8 encoding of code point `cp` (must be <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when the bytes there are not
// one (bad lead byte, missing/bad continuation, overlong form, surrogate, > U+10FFFF).
size_t valid_utf8_len(std::string_view s, size_t i);

// Byte length announced by a lead byte (1 for ASCII and for stray bytes, which callers treat as
// one-byte units). Only meaningful on text that is already valid UTF-8.
inline size_t utf8_len_from_lead(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// Returns `s` with every byte that is not part of a well-formed UTF-8 sequence replaced by
// U+FFFD (one replacement per bad byte). Valid input is returned unchanged.
std::string sanitize_utf8(std::string_view s);
// Same, appended to `out` (no allocation once `out` has the capacity: the streaming decoder's
// per-token path).
void append_sanitized_utf8(std::string_view s, std::string& out);

// Number of bytes at the end of `s` that form an incomplete-but-so-far-valid UTF-8 sequence
// (a lead byte followed by fewer continuation bytes than it announces). 0 when `s` ends on a
// sequence boundary or with bytes that can never become valid. Used by the streaming decoder.
size_t incomplete_utf8_tail(std::string_view s);

// GPT-2 byte-level mapping: every byte value has a printable code point ("Ġ" for a space).
struct ByteLevelTables {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its code point
  std::array<int16_t, 324> cp_to_byte;        // code point (< 324) -> byte, -1 if unmapped
};
const ByteLevelTables& byte_level_tables();

// Decodes a byte-level token text back to raw bytes; code points outside the mapping are
// copied through as their UTF-8 (control-token texts such as "<|im_end|>" survive unchanged).
std::string byte_level_decode(std::string_view text);

}  // namespace minfer::tok
