// Scalar half / bfloat16 conversions (reference; SIMD paths live in the kernels).
// Ownership: values only. Thread safety: pure. Failure: none (every input has a result: NaN
// stays NaN, overflow rounds to inf). Cost: a few integer ops (a short loop for f16 subnormals).
#pragma once

#include <cstdint>
#include <cstring>

namespace minfer {

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float fp16_to_f32(uint16_t h) {
  // Exact conversion including subnormals, inf and NaN.
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // subnormal: normalise
    exp = 127 - 15 + 1;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      exp--;
    }
    mant &= 0x3ff;
    return f32_from_bits(sign | (exp << 23) | (mant << 13));
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

inline uint16_t f32_to_fp16(float f) {
  // Round to nearest even, as _cvtss_sh / ggml do.
  uint32_t x = f32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (x > 0x7f800000u ? 0x200 : 0));
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // overflow -> inf
  if (x < 0x38800000u) {                                   // subnormal or zero
    if (x < 0x33000000u) return (uint16_t)sign;
    const uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t h = ((x >> 13) - ((127 - 15) << 10));
  const uint32_t rem = x & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits((uint32_t)h << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet NaN
  return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

}  // namespace minfer
