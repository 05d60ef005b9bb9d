// AArch64 NEON row kernels: RMSNorm, SiLU / SwiGLU, f32 -> f16 and the attention helpers that
// attention_impl.inc is built from. NEON is baseline on AArch64, so this file takes no extra
// flags. Everything is in an anonymous namespace except ops_neon().
// Ownership, thread safety, failure and cost: as ops_impl.h (borrowed pointers, disjoint rows
// per thread, no run-time failure, no allocation).
#include "backend/cpu/ops_impl.h"

#if defined(__aarch64__) && defined(MINFER_ARM_KERNELS)
#include <arm_neon.h>

#include <cmath>

#include "common/fp16.h"

namespace minfer::cpu::detail {
namespace {

// exp(x) for 4 lanes: Cody-Waite range reduction + degree-5 polynomial (rel. error ~1e-7),
// the same scheme and constants as ops_avx2.cpp's exp8.
inline float32x4_t exp4(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.3f)), vdupq_n_f32(88.3f));
  const float32x4_t fx = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
  x = vfmsq_f32(x, fx, vdupq_n_f32(0.693359375f));
  x = vfmsq_f32(x, fx, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t y = vdupq_n_f32(1.9875691500e-4f);
  y = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), y, x);
  y = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), y, x);
  y = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), y, x);
  y = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), y, x);
  y = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), y, x);
  y = vfmaq_f32(vaddq_f32(x, vdupq_n_f32(1.0f)), y, vmulq_f32(x, x));
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(fx), vdupq_n_s32(127)), 23);
  return vmulq_f32(y, vreinterpretq_f32_s32(e));
}

inline float32x4_t silu4(float32x4_t x) {
  return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), exp4(vnegq_f32(x))));
}

void rms_norm_rows(const float* x, int64_t ldx, const float* w, float* y, int64_t ne0, int64_t r0,
                   int64_t r1, float eps) {
  const int64_t n4 = ne0 & ~int64_t{3};
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ne0;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n4; i += 8) {
      const float32x4_t v0 = vld1q_f32(xr + i), v1 = vld1q_f32(xr + i + 4);
      a0 = vfmaq_f32(a0, v0, v0);
      a1 = vfmaq_f32(a1, v1, v1);
    }
    for (; i < n4; i += 4) a0 = vfmaq_f32(a0, vld1q_f32(xr + i), vld1q_f32(xr + i));
    float ss = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < ne0; ++i) ss += xr[i] * xr[i];
    const float sc = 1.0f / std::sqrt(ss / (float)ne0 + eps);
    for (i = 0; i < n4; i += 4) {
      float32x4_t v = vmulq_n_f32(vld1q_f32(xr + i), sc);
      if (w) v = vmulq_f32(v, vld1q_f32(w + i));
      vst1q_f32(yr + i, v);
    }
    for (; i < ne0; ++i) yr[i] = xr[i] * sc * (w ? w[i] : 1.0f);
  }
}

void silu(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, silu4(vld1q_f32(x + i)));
  for (; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

// tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|): no overflow, absolute error ~1e-7 (as
// ops_avx2.cpp's tanh8).
inline float32x4_t tanh4(float32x4_t x) {
  const float32x4_t e = exp4(vmulq_n_f32(vabsq_f32(x), -2.0f));
  const float32x4_t one = vdupq_n_f32(1.0f);
  const float32x4_t t = vdivq_f32(vsubq_f32(one, e), vaddq_f32(one, e));
  const uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x80000000u));
  return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(t), sign));
}

// gelu_tanh(x) = x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) (ops.cpp's portable form).
inline float32x4_t gelu4(float32x4_t x) {
  const float32x4_t x3 = vmulq_f32(vmulq_f32(x, x), x);
  const float32x4_t t = vmulq_n_f32(vfmaq_n_f32(x, x3, 0.044715f), 2.0f * 0.7978845608028654f);
  return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), exp4(vnegq_f32(t))));
}

// Gemma's GeGLU: gelu_tanh(g) * u.
void geglu(const float* g, const float* u, float* y, int64_t n) {
  // A lambda, not a function pointer: glu_rows's instantiation stays local to this file.
  const auto step = [](const float* gv, const float* uv, float* yv) {
    vst1q_f32(yv, vmulq_f32(gelu4(vld1q_f32(gv)), vld1q_f32(uv)));
  };
  glu_rows<4>(step, g, u, y, n);
}

// Gemma's soft-capping: cap * tanh(x / cap); the tail as the portable form.
void softcap(const float* x, float* y, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(y + i, vmulq_n_f32(tanh4(vmulq_n_f32(vld1q_f32(x + i), inv)), cap));
  if (i < n) softcap_portable(x + i, y + i, n - i, cap);
}

// Attention scores in place (attention_impl.inc's contract).
inline void vsoftcap(float* x, float cap, int64_t n) {
  softcap(x, x, n, cap);
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  const auto step = [](const float* gv, const float* uv, float* yv) {
    vst1q_f32(yv, vmulq_f32(silu4(vld1q_f32(gv)), vld1q_f32(uv)));
  };
  glu_rows<4>(step, g, u, y, n);
}

// ---- attention helpers (contract: attention_impl.inc's header) ----

inline float32x4_t load4(const float* p) {
  return vld1q_f32(p);
}
inline float32x4_t load4(const uint16_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
inline float load1(const float* p) {
  return *p;
}
inline float load1(const uint16_t* p) {
  return fp16_to_f32(*p);
}

template <class T>
inline float vdot(const float* a, const T* b, int64_t n) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), load4(b + i));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), load4(b + i + 4));
  }
  for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), load4(b + i));
  float s = vaddvq_f32(vaddq_f32(s0, s1));
  for (; i < n; ++i) s += a[i] * load1(b + i);
  return s;
}

template <class T>
inline void vdot_rows(const float* q, const T* k, int64_t ldk, int64_t hd, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = vdot(q, k + j * ldk, hd);
}

// One Q8_0 block's 32 codes as 8 f32 vectors (code * 1; the scale is applied by the caller).
inline void codes32(const int8_t* c, float32x4_t* v) {
  for (int h = 0; h < 2; ++h) {
    const int8x16_t q = vld1q_s8(c + 16 * h);
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    v[4 * h + 0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    v[4 * h + 1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    v[4 * h + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    v[4 * h + 3] = vcvtq_f32_s32(vmovl_high_s16(hi));
  }
}

inline void vdot_rows(const float* q, const BlockQ8_0* k, int64_t ldk, int64_t hd, int64_t n,
                      float* out) {
  for (int64_t j = 0; j < n; ++j) {
    float32x4_t s = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < hd / QK8_0; ++b) {
      const BlockQ8_0& blk = k[j * ldk + b];
      float32x4_t c[8];
      codes32(blk.qs, c);
      float32x4_t p = vdupq_n_f32(0.0f);
      for (int i = 0; i < 8; ++i) p = vfmaq_f32(p, vld1q_f32(q + b * QK8_0 + 4 * i), c[i]);
      s = vfmaq_n_f32(s, p, fp16_to_f32(blk.d));
    }
    out[j] = vaddvq_f32(s);
  }
}

inline float vmax(const float* x, int64_t n) {
  float32x4_t m = vdupq_n_f32(-INFINITY);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) m = vmaxq_f32(m, vld1q_f32(x + i));
  float r = vmaxvq_f32(m);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

inline float vexp_sub_sum(float* x, float m, int64_t n) {
  float32x4_t s = vdupq_n_f32(0.0f);
  const float32x4_t mv = vdupq_n_f32(m);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(x + i), mv));
    vst1q_f32(x + i, e);
    s = vaddq_f32(s, e);
  }
  float r = vaddvq_f32(s);
  for (; i < n; ++i) r += (x[i] = std::exp(x[i] - m));
  return r;
}

inline void vscale(float* acc, float s, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(acc + i, vmulq_n_f32(vld1q_f32(acc + i), s));
  for (; i < n; ++i) acc[i] *= s;
}

template <class T>
inline void vaxpy_rows(float* acc, const float* p, const T* v, int64_t ldv, int64_t n, int64_t hd) {
  for (int64_t j = 0; j < n; ++j) {
    const T* vr = v + j * ldv;
    const float pj = p[j];
    int64_t i = 0;
    for (; i + 4 <= hd; i += 4)
      vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), load4(vr + i), pj));
    for (; i < hd; ++i) acc[i] += pj * load1(vr + i);
  }
}

inline void vaxpy_rows(float* acc, const float* p, const BlockQ8_0* v, int64_t ldv, int64_t n,
                       int64_t hd) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < hd / QK8_0; ++b) {
      const BlockQ8_0& blk = v[j * ldv + b];
      const float w = p[j] * fp16_to_f32(blk.d);
      float32x4_t c[8];
      codes32(blk.qs, c);
      float* a = acc + b * QK8_0;
      for (int i = 0; i < 8; ++i) vst1q_f32(a + 4 * i, vfmaq_n_f32(vld1q_f32(a + 4 * i), c[i], w));
    }
}

// Round to nearest even (FPCR default), like f32_to_fp16.
void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

#include "backend/cpu/attention_impl.inc"

constexpr OpsTable kNeonOps = {rms_norm_rows, silu,  swiglu, attention_units_impl,
                               f32_to_f16,    geglu, softcap};

}  // namespace

const OpsTable* ops_neon() {
  return &kNeonOps;
}

}  // namespace minfer::cpu::detail
#else
namespace minfer::cpu::detail {
const OpsTable* ops_neon() {
  return nullptr;
}
}  // namespace minfer::cpu::detail
#endif
