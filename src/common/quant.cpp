// Reference (de)quantization: plain types and the 32-element block formats (Q4_0, Q5_0, Q8_0),
// plus the dispatch. The K-quants (256-element super-blocks) live in quant_k.cpp.
//
// Conventions (the format's own, so fast kernels can compare bytes with these):
//  * Q8_0: d = amax / 127, q = round(x / d) computed with d before fp16 rounding.
//  * Q4_0 / Q5_0: d = v / -8 (resp. -16) where v is the element of largest magnitude (with its
//    sign), so v maps exactly to the lowest level; q = trunc(x / d + 8.5) (resp. 16.5),
//    clamped to 15 (resp. 31).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/fp16.h"
#include "common/quant.h"
#include "common/quant_k.h"

namespace minfer {
namespace {

// The element of largest magnitude, with its sign (0 for an all-zero block).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, v = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      v = x[i];
    }
  }
  return v;
}

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK4_0) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[j] = d * static_cast<float>((b[i].qs[j] & 0x0f) - 8);
      y[j + QK4_0 / 2] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
    const float d = signed_absmax(x, QK4_0) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(x[j + QK4_0 / 2] * id + 8.5f));
      b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK5_0) {
    const float d = fp16_to_f32(b[i].d);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * static_cast<float>(lo - 16);
      y[j + QK5_0 / 2] = d * static_cast<float>(hi - 16);
    }
  }
}

void quant_q5_0(const float* x, BlockQ5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK5_0) {
    const float d = signed_absmax(x, QK5_0) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int lo = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int hi = std::min(31, static_cast<int>(x[j + QK5_0 / 2] * id + 16.5f));
      b[i].qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
    }
    std::memcpy(b[i].qh, &qh, 4);
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK8_0) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

int64_t blocks(GgmlType t, int64_t n) {
  const int64_t bs = type_traits(t).block_size;
  MINFER_ASSERT(n >= 0 && n % bs == 0, "row length is not a multiple of the block size");
  return n / bs;
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks(t, n);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case GgmlType::Q4_0:
      dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
      return;
    case GgmlType::Q5_0:
      dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
      return;
    case GgmlType::Q8_0:
      dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
      return;
    case GgmlType::Q4_K:
      kquant::dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
      return;
    case GgmlType::Q5_K:
      kquant::dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
      return;
    case GgmlType::Q6_K:
      kquant::dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
      return;
    case GgmlType::Q8_K:
      kquant::dequant_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb);
      return;
    default:
      MINFER_ASSERT(false, "dequantize_row: no reference dequantizer for this type");
  }
}

bool can_quantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_K:
      return true;
    default:
      return false;
  }
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  const int64_t nb = blocks(t, n);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q4_0:
      quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
      return;
    case GgmlType::Q5_0:
      quant_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
      return;
    case GgmlType::Q8_0:
      quant_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
      return;
    case GgmlType::Q4_K:
      kquant::quant_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
      return;
    case GgmlType::Q5_K:
      kquant::quant_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
      return;
    case GgmlType::Q6_K:
      kquant::quant_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
      return;
    case GgmlType::Q8_K:
      kquant::quant_q8_k(src, static_cast<BlockQ8_K*>(dst), nb);
      return;
    default:
      MINFER_ASSERT(false, "quantize_row: no reference quantizer for this type");
  }
}

}  // namespace minfer
