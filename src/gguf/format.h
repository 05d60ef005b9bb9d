// Internal to src/gguf: on-disk constants shared by the reader and the writer.
// Ownership: constants and pure functions. Thread safety: pure. Failure: none (unknown type
// ids give 0 / false; the callers turn that into Error(InvalidFile)). Cost: a switch.
#pragma once

#include <cstdint>
#include <type_traits>

#include "gguf/gguf.h"

namespace minfer::gguf::detail {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;

// The one mapping from a fixed-size GGUF value type to the C type it is stored as (little
// endian, unaligned; Bool is one byte). Calls f(T{}) and returns true for those types; returns
// false for String, Array and unknown ids. The reader, the writer and the predicates below all
// go through it, so a type is described once.
template <typename F>
bool visit_scalar_type(ValueType t, F&& f) {
  switch (t) {
    case ValueType::U8:
      f(uint8_t{});
      return true;
    case ValueType::I8:
      f(int8_t{});
      return true;
    case ValueType::U16:
      f(uint16_t{});
      return true;
    case ValueType::I16:
      f(int16_t{});
      return true;
    case ValueType::U32:
      f(uint32_t{});
      return true;
    case ValueType::I32:
      f(int32_t{});
      return true;
    case ValueType::U64:
      f(uint64_t{});
      return true;
    case ValueType::I64:
      f(int64_t{});
      return true;
    case ValueType::F32:
      f(float{});
      return true;
    case ValueType::F64:
      f(double{});
      return true;
    case ValueType::Bool:
      f(uint8_t{});
      return true;
    default:
      return false;
  }
}

// Bytes of one stored scalar; 0 for String / Array (variable size) and unknown ids.
inline uint64_t scalar_size(uint32_t t) {
  uint64_t n = 0;
  visit_scalar_type(static_cast<ValueType>(t), [&](auto zero) { n = sizeof(zero); });
  return n;
}

inline bool is_known_type(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::F64);
}

inline bool is_integer(ValueType t) {
  bool r = false;
  visit_scalar_type(t, [&](auto zero) { r = std::is_integral_v<decltype(zero)>; });
  return r && t != ValueType::Bool;
}

inline bool is_unsigned(ValueType t) {
  bool r = false;
  visit_scalar_type(t, [&](auto zero) { r = std::is_unsigned_v<decltype(zero)>; });
  return r && t != ValueType::Bool;
}

inline bool is_float(ValueType t) {
  bool r = false;
  visit_scalar_type(t, [&](auto zero) { r = std::is_floating_point_v<decltype(zero)>; });
  return r;
}

}  // namespace minfer::gguf::detail
