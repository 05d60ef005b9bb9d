// Internal to src/gguf: on-disk constants shared by the reader and the writer.
#pragma once

#include <cstdint>

#include "gguf/gguf.h"

namespace minfer::gguf::detail {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;

// Bytes of one stored scalar; 0 for String / Array (variable size) and unknown ids.
inline uint64_t scalar_size(uint32_t t) {
  switch (static_cast<ValueType>(t)) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    default:
      return 0;
  }
}

inline bool is_known_type(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::F64);
}

inline bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

inline bool is_unsigned(ValueType t) {
  return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}

inline bool is_float(ValueType t) {
  return t == ValueType::F32 || t == ValueType::F64;
}

}  // namespace minfer::gguf::detail
