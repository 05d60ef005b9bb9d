// Reference K-quants: Q4_K, Q5_K, Q6_K (weights) and Q8_K (activations), written from the
// GGUF block definitions in dtype.h.
//
// Layouts (element e of a 256-element super-block):
//  * Q4_K: 8 sub-blocks of 32, x = d*sc[s]*q - dmin*m[s], q in 0..15 (s = e/32). qs holds four
//    64-element chunks c of 32 bytes: element c*64+l (l<32) is the low nibble of qs[c*32+l],
//    element c*64+32+l the high nibble. Scales/mins: 12-byte packing, see quant_k.h.
//  * Q5_K: as Q4_K with q in 0..31; the fifth bit of element c*64+l is bit 2c of qh[l] and of
//    element c*64+32+l bit 2c+1 of qh[l].
//  * Q6_K: 16 sub-blocks of 16, x = d*scales[e/16]*(q-32), q in 0..63. Two 128-element halves
//    h; within a half, element g*32+l (g<4, l<32) keeps its low 4 bits in ql[h*64 + (g&1)*32 + l]
//    (low nibble for g<2, high nibble for g>=2) and its top 2 bits in qh[h*32+l] bits 2g..2g+1.
//  * Q8_K: x = d*q with a float d; bsums[i] = sum of qs[16i..16i+15].
//
// Quantizers: per sub-block an affine fit (scale, min >= 0) by least squares over a few
// candidate step sizes, then the scales and mins are themselves quantized to 6 bits against
// the super-block's d and dmin, and the elements are re-quantized against the final values.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/fp16.h"
#include "common/quant_k.h"

namespace minfer::kquant {
namespace {

int clampi(int v, int lo, int hi) {
  return std::min(hi, std::max(lo, v));
}

// Nearest level for a value that is >= -0.5 in exact arithmetic (truncation = rounding there);
// clamped to [0, nmax]. Cheaper than lround in the fit's inner loops.
inline int level(float v, int nmax) {
  return clampi(static_cast<int>(v + 0.5f), 0, nmax);
}

// Best (a, m) with x ~= a*q - m, q integer in [0, nmax], a >= 0, m >= 0: for a few candidate
// step sizes, assign levels, refit (a, m) by least squares, keep the lowest squared error.
void fit_affine(const float* x, int n, int nmax, float* out_a, float* out_m) {
  float lo = 0.0f, hi = x[0], sx = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sx += x[i];
  }
  *out_a = 0.0f;
  *out_m = -lo;
  if (hi <= lo) return;  // constant non-positive block: x = -m exactly
  float best = INFINITY;
  for (int k = -1; k <= 1; ++k) {
    float a = (hi - lo) / (static_cast<float>(nmax) + 0.5f * static_cast<float>(k));
    float m = -lo;
    float ia = 1.0f / a;
    float sq = 0, sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const float q = static_cast<float>(level((x[i] + m) * ia, nmax));
      sq += q;
      sqq += q * q;
      sqx += q * x[i];
    }
    const float det = static_cast<float>(n) * sqq - sq * sq;
    float na = a, nb = -m;
    if (det > 0) {
      na = (static_cast<float>(n) * sqx - sq * sx) / det;
      nb = (sqq * sx - sq * sqx) / det;
    }
    if (nb > 0) {
      nb = 0;
      na = sqq > 0 ? sqx / sqq : a;
    }
    if (na > 0) {
      a = na;
      m = -nb;
      ia = 1.0f / a;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float e = a * static_cast<float>(level((x[i] + m) * ia, nmax)) - m - x[i];
      err += e * e;
    }
    if (err < best) {
      best = err;
      *out_a = a;
      *out_m = m;
    }
  }
}

// Fits 8 sub-blocks of 32 and quantizes their scales/mins to 6 bits. Writes d, dmin, the packed
// scales, and the final per-element levels L[256] in 0..nmax.
void quant_k_affine(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out,
                    uint8_t scales[12], uint8_t L[QK_K]) {
  float a[8], m[8], amax = 0.0f, mmax = 0.0f;
  for (int s = 0; s < 8; ++s) {
    fit_affine(x + 32 * s, 32, nmax, &a[s], &m[s]);
    amax = std::max(amax, a[s]);
    mmax = std::max(mmax, m[s]);
  }
  *d_out = f32_to_fp16(amax / 63.0f);
  *dmin_out = f32_to_fp16(mmax / 63.0f);
  const float d = fp16_to_f32(*d_out), dmin = fp16_to_f32(*dmin_out);
  uint8_t ls[8], lm[8];
  for (int s = 0; s < 8; ++s) {
    ls[s] =
        static_cast<uint8_t>(d > 0 ? clampi(static_cast<int>(std::lround(a[s] / d)), 0, 63) : 0);
    lm[s] = static_cast<uint8_t>(
        dmin > 0 ? clampi(static_cast<int>(std::lround(m[s] / dmin)), 0, 63) : 0);
  }
  pack_scale_min(ls, lm, scales);
  for (int s = 0; s < 8; ++s) {
    const float ds = d * ls[s], dm = dmin * lm[s];
    const float ids = ds > 0 ? 1.0f / ds : 0.0f;
    for (int i = 0; i < 32; ++i)
      L[32 * s + i] = static_cast<uint8_t>(ds > 0 ? level((x[32 * s + i] + dm) * ids, nmax) : 0);
  }
}

}  // namespace

void pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t q[12]) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

namespace {

// Q4_K and Q5_K share their super-block: 8 sub-blocks of 32 values, each with a 6-bit scale
// and min (packed in `scales`), value = d * scale * code - dmin * min; the low and high nibbles
// of qs[32 c + l] are values l and l + 32 of sub-block pair c. Q5_K's codes have a fifth bit
// from qh (bit 2c for the low nibble's value, 2c + 1 for the high one's).
template <class Block>
void dequant_k_affine(const Block* b, float* y, int64_t nb) {
  constexpr bool kFive = std::is_same_v<Block, BlockQ5_K>;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min(2 * c, b[i].scales, &sc0, &m0);
      get_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
      const uint8_t* q = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        int lo = q[l] & 0x0f, hi = q[l] >> 4;
        if constexpr (kFive) {
          lo |= ((b[i].qh[l] >> (2 * c)) & 1) << 4;
          hi |= ((b[i].qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        y[l] = d * sc0 * static_cast<float>(lo) - dmin * m0;
        y[l + 32] = d * sc1 * static_cast<float>(hi) - dmin * m1;
      }
      y += 64;
    }
  }
}

}  // namespace

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  dequant_k_affine(b, y, nb);
}

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  uint8_t L[QK_K];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    quant_k_affine(x, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  dequant_k_affine(b, y, nb);
}

void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  uint8_t L[QK_K];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    quant_k_affine(x, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        b[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
        b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* sc = b[i].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is + 0] * static_cast<float>(q0);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q1);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q2);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q3);
      }
      y += 128;
    }
  }
}

void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    // Per sub-block of 16: the largest-magnitude element maps to level -32.
    float scale[16], smax = 0.0f, sabs = 0.0f;
    for (int s = 0; s < 16; ++s) {
      float v = 0.0f, amax = 0.0f;
      for (int j = 0; j < 16; ++j) {
        if (std::fabs(x[16 * s + j]) > amax) {
          amax = std::fabs(x[16 * s + j]);
          v = x[16 * s + j];
        }
      }
      scale[s] = v / -32.0f;
      if (std::fabs(scale[s]) > sabs) {
        sabs = std::fabs(scale[s]);
        smax = scale[s];
      }
    }
    // The largest-magnitude scale maps to -128 (int8 has one more negative level).
    b[i].d = f32_to_fp16(smax / -128.0f);
    const float d = fp16_to_f32(b[i].d);
    uint8_t L[QK_K];
    for (int s = 0; s < 16; ++s) {
      const int sc = d != 0.0f ? clampi(static_cast<int>(std::lround(scale[s] / d)), -128, 127) : 0;
      b[i].scales[s] = static_cast<int8_t>(sc);
      const float ds = d * static_cast<float>(sc);
      for (int j = 0; j < 16; ++j) {
        const int q =
            ds != 0.0f ? clampi(static_cast<int>(std::lround(x[16 * s + j] / ds)), -32, 31) : 0;
        L[16 * s + j] = static_cast<uint8_t>(q + 32);
      }
    }
    std::memset(b[i].ql, 0, sizeof(b[i].ql));
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int h = 0; h < 2; ++h) {
      for (int g = 0; g < 4; ++g) {
        for (int l = 0; l < 32; ++l) {
          const int q = L[128 * h + 32 * g + l];
          uint8_t& lo = b[i].ql[64 * h + (g & 1) * 32 + l];
          lo |= static_cast<uint8_t>(g < 2 ? (q & 15) : ((q & 15) << 4));
          b[i].qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * g));
        }
      }
    }
  }
}

void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K)
    for (int j = 0; j < QK_K; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
}

void quant_q8_k(const float* x, BlockQ8_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float v = 0.0f, amax = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        v = x[j];
      }
    }
    std::memset(b[i].bsums, 0, sizeof(b[i].bsums));
    if (amax == 0.0f) {
      b[i].d = 0.0f;
      std::memset(b[i].qs, 0, sizeof(b[i].qs));
      continue;
    }
    // The largest-magnitude element maps to -127, so every q is in [-127, 127]: SIMD dot
    // products may negate q8 values (sign tricks), which -128 would overflow. Round half to even.
    const float iscale = -127.0f / v;
    for (int j = 0; j < QK_K; ++j) {
      const int q = std::min(127, static_cast<int>(std::nearbyint(iscale * x[j])));
      b[i].qs[j] = static_cast<int8_t>(q);
      b[i].bsums[j / 16] = static_cast<int16_t>(b[i].bsums[j / 16] + q);
    }
    b[i].d = 1.0f / iscale;
  }
}

}  // namespace minfer::kquant
