// K-quant reference blocks (256-element super-blocks), used by quant.cpp's dispatch.
// Exposed so kernels and tests can reuse the 6-bit scale/min (un)packing of Q4_K / Q5_K.
// Ownership: callers own both buffers (nb blocks each side). Thread safety: pure.
// Failure: none checked; callers pass whole blocks. Cost: O(n).
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace minfer::kquant {

// Q4_K / Q5_K pack 8 six-bit scales and 8 six-bit mins into 12 bytes:
//   bytes 0-3:  low 6 bits = scale[0..3], top 2 bits = scale[4..7] >> 4
//   bytes 4-7:  low 6 bits = min[0..3],   top 2 bits = min[4..7] >> 4
//   bytes 8-11: low nibble = scale[4..7] & 15, high nibble = min[4..7] & 15
inline void get_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}
void pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]);

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb);
void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb);
void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb);
void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb);

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb);
void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb);
void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb);
void quant_q8_k(const float* x, BlockQ8_K* b, int64_t nb);

}  // namespace minfer::kquant
