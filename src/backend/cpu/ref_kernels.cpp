#include "backend/cpu/ref_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/fp16.h"

namespace minfer::cpu::ref {
namespace {

void get_scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void deq_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * ((b[i].qs[j] & 0xF) - 8);
      y[j + 16] = d * ((b[i].qs[j] >> 4) - 8);
    }
  }
}

void deq_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
      y[j] = d * (((b[i].qs[j] & 0xF) | (h0 << 4)) - 16);
      y[j + 16] = d * (((b[i].qs[j] >> 4) | (h1 << 4)) - 16);
    }
  }
}

void deq_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = d * b[i].qs[j];
  }
}

void deq_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int j = 0; j < 4; ++j, q += 32) {  // 64 values per pass: low nibbles, high nibbles
      int sc0, m0, sc1, m1;
      get_scale_min_k4(2 * j, b[i].scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, b[i].scales, &sc1, &m1);
      for (int l = 0; l < 32; ++l) *y++ = d * sc0 * (q[l] & 0xF) - dmin * m0;
      for (int l = 0; l < 32; ++l) *y++ = d * sc1 * (q[l] >> 4) - dmin * m1;
    }
  }
}

void deq_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    for (int j = 0; j < 4; ++j, ql += 32) {
      int sc0, m0, sc1, m1;
      get_scale_min_k4(2 * j, b[i].scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, b[i].scales, &sc1, &m1);
      const uint8_t u0 = 1 << (2 * j), u1 = 2 << (2 * j);
      for (int l = 0; l < 32; ++l)
        *y++ = d * sc0 * ((ql[l] & 0xF) + ((qh[l] & u0) ? 16 : 0)) - dmin * m0;
      for (int l = 0; l < 32; ++l)
        *y++ = d * sc1 * ((ql[l] >> 4) + ((qh[l] & u1) ? 16 : 0)) - dmin * m1;
    }
  }
}

void deq_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int n = 0; n < 2; ++n, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const int64_t bs = type_traits(type).block_size;
  MINFER_ASSERT(n % bs == 0, "row length not a multiple of the block size");
  const int64_t nb = n / bs;
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::Q4_0:
      deq_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
      return;
    case GgmlType::Q5_0:
      deq_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
      return;
    case GgmlType::Q8_0:
      deq_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
      return;
    case GgmlType::Q4_K:
      deq_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
      return;
    case GgmlType::Q5_K:
      deq_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
      return;
    case GgmlType::Q6_K:
      deq_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
      return;
    case GgmlType::Q8_K: {
      const auto* b = static_cast<const BlockQ8_K*>(src);
      for (int64_t i = 0; i < nb; ++i)
        for (int j = 0; j < QK_K; ++j) dst[i * QK_K + j] = b[i].d * b[i].qs[j];
      return;
    }
    default:
      MINFER_ASSERT(false, "ref::dequantize_row: unsupported type");
  }
}

void get_rows(GgmlType type, const void* table, int64_t ne0, int64_t n_rows, const int32_t* ids,
              int64_t n_ids, float* out) {
  const size_t rs = row_size(type, ne0);
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= n_rows)
      fail(ErrorKind::InvalidArgument, "get_rows: id {} outside [0, {})", ids[i], n_rows);
    dequantize_row(type, static_cast<const uint8_t*>(table) + rs * ids[i], out + i * ne0, ne0);
  }
}

void rms_norm(const float* x, int64_t ldx, const float* w, float* y, int64_t ne0, int64_t rows,
              float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    double ss = 0;
    for (int64_t i = 0; i < ne0; ++i) ss += (double)xr[i] * xr[i];
    const double s = 1.0 / std::sqrt(ss / ne0 + eps);
    for (int64_t i = 0; i < ne0; ++i) y[r * ne0 + i] = (float)(xr[i] * s * (w ? w[i] : 1.0f));
  }
}

void add(const float* a, const float* b, float* y, int64_t ne0, int64_t rows, int64_t b_rows) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < ne0; ++i) y[r * ne0 + i] = a[r * ne0 + i] + b[(r % b_rows) * ne0 + i];
}

void mul(const float* a, const float* b, float* y, int64_t ne0, int64_t rows, int64_t b_rows) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < ne0; ++i) y[r * ne0 + i] = a[r * ne0 + i] * b[(r % b_rows) * ne0 + i];
}

void silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (float)(x[i] / (1.0 + std::exp(-(double)x[i])));
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (float)(g[i] / (1.0 + std::exp(-(double)g[i])) * u[i]);
}

void geglu(const float* g, const float* u, float* y, int64_t n) {
  const double c = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i];
    y[i] = (float)(0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x))) * u[i]);
  }
}

void scale(const float* x, float* y, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

void softcap(const float* x, float* y, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) y[i] = (float)(cap * std::tanh((double)x[i] / cap));
}

void matmul(const MatmulArgs& a) {
  const size_t rs = row_size(a.wtype, a.n_in);
  std::vector<float> wr(a.n_in);
  for (int64_t o = 0; o < a.n_out; ++o) {
    dequantize_row(a.wtype, static_cast<const uint8_t*>(a.w) + rs * o, wr.data(), a.n_in);
    for (int64_t j = 0; j < a.m; ++j) {
      double s = 0;
      for (int64_t i = 0; i < a.n_in; ++i) s += (double)wr[i] * a.x[j * a.ldx + i];
      a.y[j * a.ldy + o] = (float)s;
    }
  }
}

void rope(const float* x, const HeadLayout& lx, float* y, const HeadLayout& ly, const int32_t* pos,
          const RopeParams& p) {
  const int64_t hd = lx.head_dim, nr = p.n_rot;
  MINFER_ASSERT(nr % 2 == 0 && nr <= hd, "rope: n_rot must be even and <= head_dim");
  // YaRN correction range, straight from its definition: pair i turns pos_max / wavelength_i
  // times over the original context; the ramp runs from beta_fast turns down to beta_slow.
  const double two_pi = 2.0 * std::acos(-1.0);
  const auto pair_for_turns = [&](double turns) {
    return nr * std::log(p.n_ctx_orig / (turns * two_pi)) / (2.0 * std::log((double)p.freq_base));
  };
  const double lo = std::max(0.0, std::floor(pair_for_turns(p.beta_fast)));
  const double hi = std::min(nr - 1.0, std::ceil(pair_for_turns(p.beta_slow)));
  std::vector<float> tmp(hd);
  for (int64_t t = 0; t < lx.n_tok; ++t) {
    for (int64_t h = 0; h < lx.n_head; ++h) {
      const float* xs = x + t * lx.ts() + h * lx.hs();
      for (int64_t i = 0; i < hd; ++i) tmp[i] = xs[i];
      for (int64_t i = 0; i < nr / 2; ++i) {
        const double ff = p.freq_factors ? p.freq_factors[i] : 1.0;
        const double extrap = (double)pos[t] * std::pow((double)p.freq_base, -2.0 * i / nr) / ff;
        const double interp = p.freq_scale * extrap;
        double theta = interp, mag = p.attn_factor;
        if (p.ext_factor != 0.0f) {
          const double ramp = 1.0 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
          const double mix = ramp * p.ext_factor;
          theta = interp * (1.0 - mix) + extrap * mix;
          mag *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
        }
        const double c = std::cos(theta) * mag, s = std::sin(theta) * mag;
        const int64_t i0 = p.mode == RopeMode::Neox ? i : 2 * i;
        const int64_t i1 = p.mode == RopeMode::Neox ? i + nr / 2 : 2 * i + 1;
        const double a = xs[i0], b = xs[i1];
        tmp[i0] = (float)(a * c - b * s);
        tmp[i1] = (float)(a * s + b * c);
      }
      float* ys = y + t * ly.ts() + h * ly.hs();
      for (int64_t i = 0; i < hd; ++i) ys[i] = tmp[i];
    }
  }
}

// kv_store, attention and qkv_bias_rope_store: ref_kv.cpp.

}  // namespace minfer::cpu::ref
