// AVX2 + FMA row kernels (this file alone is compiled with -mavx2 -mfma -mf16c). Everything is
// in an anonymous namespace except ops_avx2(); no std templates are instantiated here, so no
// AVX2-compiled inline function can be picked by the linker for generic code.
#include "backend/cpu/ops_impl.h"

#if defined(__x86_64__) && defined(MINFER_X86_KERNELS)
#include <immintrin.h>

#include <cmath>

namespace minfer::cpu::detail {
namespace {

inline float hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// exp(x) for 8 lanes: Cody-Waite range reduction + degree-5 polynomial (rel. error ~1e-7).
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

inline __m256 silu8(__m256 x) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|): no overflow, absolute error ~1e-7.
inline __m256 tanh8(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign, x);
  const __m256 e = exp8(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  return _mm256_or_ps(t, _mm256_and_ps(sign, x));
}

// gelu_tanh(x) = x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) (ops.cpp's scalar form).
inline __m256 gelu8(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 t = _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.7978845608028654f),
                                 _mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x));
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), t));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void geglu(const float* g, const float* u, float* y, int64_t n) {
  // A lambda, not a function pointer: glu_rows's instantiation stays local to this AVX2 file.
  const auto step = [](const float* gv, const float* uv, float* yv) {
    _mm256_storeu_ps(yv, _mm256_mul_ps(gelu8(_mm256_loadu_ps(gv)), _mm256_loadu_ps(uv)));
  };
  glu_rows<8>(step, g, u, y, n);
}

void softcap(const float* x, float* y, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  const __m256 vc = _mm256_set1_ps(cap), vi = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(vc, tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi))));
  for (; i < n; ++i) y[i] = cap * std::tanh(x[i] * inv);
}

// Attention scores in place (attention_impl.inc's contract).
inline void vsoftcap(float* x, float cap, int64_t n) {
  softcap(x, x, n, cap);
}

void rms_norm_rows(const float* x, int64_t ldx, const float* w, float* y, int64_t ne0, int64_t r0,
                   int64_t r1, float eps) {
  const int64_t n8 = ne0 & ~int64_t{7};
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ne0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n8; i += 16) {
      const __m256 v0 = _mm256_loadu_ps(xr + i), v1 = _mm256_loadu_ps(xr + i + 8);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
      a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i < n8; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      a0 = _mm256_fmadd_ps(v, v, a0);
    }
    float ss = hsum8(_mm256_add_ps(a0, a1));
    for (; i < ne0; ++i) ss += xr[i] * xr[i];
    const float sc = 1.0f / std::sqrt(ss / (float)ne0 + eps);
    const __m256 vs = _mm256_set1_ps(sc);
    for (i = 0; i < n8; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), vs);
      if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
      _mm256_storeu_ps(yr + i, v);
    }
    for (; i < ne0; ++i) yr[i] = xr[i] * sc * (w ? w[i] : 1.0f);
  }
}

void silu(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  const auto step = [](const float* gv, const float* uv, float* yv) {
    _mm256_storeu_ps(yv, _mm256_mul_ps(silu8(_mm256_loadu_ps(gv)), _mm256_loadu_ps(uv)));
  };
  glu_rows<8>(step, g, u, y, n);
}

// f32 / f16 KV rows: these widen 8 (or 1) elements of either to f32 (F16C vcvtph2ps). Q8_0
// rows have their own helpers below (i8x8, dot8, vaxpy_rows).
inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float load1(const float* p) {
  return *p;
}
inline float load1(const uint16_t* p) {
  return _cvtsh_ss(*p);
}

template <class T>
inline float vdot(const float* a, const T* b, int64_t n) {
  int64_t i = 0;
  float s = 0.0f;
  if (n >= 8) {
    __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(a), load8(b));
    for (i = 8; i + 8 <= n; i += 8)
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(b + i), acc);
    s = hsum8(acc);
  }
  for (; i < n; ++i) s += a[i] * load1(b + i);
  return s;
}

// Lane r of the result = the sum of a[r]'s lanes (transpose-reduce of eight accumulators).
inline __m256 hsum8x8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

// Eight dot products q . k_j at once (hd % 8 == 0): one accumulator per row, then a
// transpose-reduce, so short heads (head_dim 8..64) do not pay a horizontal sum per position.
template <class T>
inline __m256 dot8(const float* q, const T* k, int64_t ldk, int64_t hd) {
  __m256 a[8];
  for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < hd; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(qv, load8(k + r * ldk + i), a[r]);
  }
  return hsum8x8(a);
}

// ---- Q8_0 rows: ldk / ldv count blocks; hd is a multiple of 32 (checked by the caller) ----

// 8 int8 codes widened to f32 (vpmovsxbd + vcvtdq2ps).
inline __m256 i8x8(const int8_t* c) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}
inline __m256 block_scale(const BlockQ8_0& b) {
  return _mm256_set1_ps(_cvtsh_ss(b.d));
}
// Lane sums of q[0..32) * codes, before the block's scale.
inline __m256 dot32(const __m256* qv, const int8_t* c) {
  __m256 s = _mm256_mul_ps(qv[0], i8x8(c));
  s = _mm256_fmadd_ps(qv[1], i8x8(c + 8), s);
  s = _mm256_fmadd_ps(qv[2], i8x8(c + 16), s);
  return _mm256_fmadd_ps(qv[3], i8x8(c + 24), s);
}
inline void load32(const float* q, __m256* qv) {
  for (int i = 0; i < 4; ++i) qv[i] = _mm256_loadu_ps(q + 8 * i);
}

inline float vdot(const float* q, const BlockQ8_0* k, int64_t hd) {
  __m256 acc = _mm256_setzero_ps(), qv[4];
  for (int64_t b = 0; b < hd / QK8_0; ++b) {
    load32(q + b * QK8_0, qv);
    acc = _mm256_fmadd_ps(dot32(qv, k[b].qs), block_scale(k[b]), acc);
  }
  return hsum8(acc);
}

// As dot8 above: each block of q is loaded once for the eight rows, and each row's block sum
// is scaled once (one FMA per block) into that row's accumulator.
inline __m256 dot8(const float* q, const BlockQ8_0* k, int64_t ldk, int64_t hd) {
  __m256 a[8], qv[4];
  for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < hd / QK8_0; ++b) {
    load32(q + b * QK8_0, qv);
    for (int r = 0; r < 8; ++r) {
      const BlockQ8_0& blk = k[r * ldk + b];
      a[r] = _mm256_fmadd_ps(dot32(qv, blk.qs), block_scale(blk), a[r]);
    }
  }
  return hsum8x8(a);
}

template <class T>
inline void vdot_rows(const float* q, const T* k, int64_t ldk, int64_t hd, int64_t n, float* out) {
  int64_t j = 0;
  if (hd % 8 == 0)
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, dot8(q, k + j * ldk, ldk, hd));
  for (; j < n; ++j) out[j] = vdot(q, k + j * ldk, hd);
}

inline float vmax(const float* x, int64_t n) {
  int64_t i = 0;
  float m = -INFINITY;
  if (n >= 8) {
    __m256 v = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(x + i));
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    m = _mm_cvtss_f32(r);
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

inline float vexp_sub_sum(float* x, float m, int64_t n) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    acc = _mm256_add_ps(acc, e);
    _mm256_storeu_ps(x + i, e);
  }
  float s = hsum8(acc);
  for (; i < n; ++i) s += (x[i] = std::exp(x[i] - m));
  return s;
}

inline void vscale(float* acc, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(vs, _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] *= s;
}

// acc (hd floats) stays in registers across the tile when hd is 8..64 and a multiple of 8.
// Short heads use kU independent accumulator sets: one FMA chain per head would be bound by
// FMA latency (4 cycles per kv position for head_dim 8).
template <int kVecs, class T>
inline void axpy_rows_reg(float* acc, const float* p, const T* v, int64_t ldv, int64_t n) {
  constexpr int kU = kVecs >= 4 ? 1 : 4 / kVecs;
  __m256 o[kU][kVecs];
  for (int i = 0; i < kVecs; ++i) o[0][i] = _mm256_loadu_ps(acc + 8 * i);
  for (int u = 1; u < kU; ++u)
    for (int i = 0; i < kVecs; ++i) o[u][i] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + kU <= n; j += kU) {
    for (int u = 0; u < kU; ++u) {
      const __m256 pj = _mm256_set1_ps(p[j + u]);
      const T* vr = v + (j + u) * ldv;
      for (int i = 0; i < kVecs; ++i) o[u][i] = _mm256_fmadd_ps(pj, load8(vr + 8 * i), o[u][i]);
    }
  }
  for (; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const T* vr = v + j * ldv;
    for (int i = 0; i < kVecs; ++i) o[0][i] = _mm256_fmadd_ps(pj, load8(vr + 8 * i), o[0][i]);
  }
  for (int u = 1; u < kU; ++u)
    for (int i = 0; i < kVecs; ++i) o[0][i] = _mm256_add_ps(o[0][i], o[u][i]);
  for (int i = 0; i < kVecs; ++i) _mm256_storeu_ps(acc + 8 * i, o[0][i]);
}

template <class T>
inline void vaxpy_rows(float* acc, const float* p, const T* v, int64_t ldv, int64_t n, int64_t hd) {
  switch (hd) {
    case 8:
      return axpy_rows_reg<1>(acc, p, v, ldv, n);
    case 16:
      return axpy_rows_reg<2>(acc, p, v, ldv, n);
    case 32:
      return axpy_rows_reg<4>(acc, p, v, ldv, n);
    case 64:
      return axpy_rows_reg<8>(acc, p, v, ldv, n);
    default:
      break;
  }
  for (int64_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const T* vr = v + j * ldv;
    int64_t i = 0;
    for (; i + 8 <= hd; i += 8)
      _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pj, load8(vr + i), _mm256_loadu_ps(acc + i)));
    for (; i < hd; ++i) acc[i] += p[j] * load1(vr + i);
  }
}

// Q8_0 V rows: the block's scale folds into the row weight (p[j] * d), then one FMA per 8 codes.
// Heads of 32 and 64 values keep acc in registers across the tile (4 / 8 accumulators: enough
// independent FMA chains, as axpy_rows_reg with kU == 1).
template <int kBlocks>
inline void axpy_rows_q8_reg(float* acc, const float* p, const BlockQ8_0* v, int64_t ldv,
                             int64_t n) {
  __m256 o[4 * kBlocks];
  for (int i = 0; i < 4 * kBlocks; ++i) o[i] = _mm256_loadu_ps(acc + 8 * i);
  for (int64_t j = 0; j < n; ++j) {
    for (int b = 0; b < kBlocks; ++b) {
      const BlockQ8_0& blk = v[j * ldv + b];
      const __m256 w = _mm256_mul_ps(_mm256_set1_ps(p[j]), block_scale(blk));
      for (int i = 0; i < 4; ++i)
        o[4 * b + i] = _mm256_fmadd_ps(w, i8x8(blk.qs + 8 * i), o[4 * b + i]);
    }
  }
  for (int i = 0; i < 4 * kBlocks; ++i) _mm256_storeu_ps(acc + 8 * i, o[i]);
}

inline void vaxpy_rows(float* acc, const float* p, const BlockQ8_0* v, int64_t ldv, int64_t n,
                       int64_t hd) {
  if (hd == 32) return axpy_rows_q8_reg<1>(acc, p, v, ldv, n);
  if (hd == 64) return axpy_rows_q8_reg<2>(acc, p, v, ldv, n);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < hd / QK8_0; ++b) {
      const BlockQ8_0& blk = v[j * ldv + b];
      const __m256 w = _mm256_mul_ps(_mm256_set1_ps(p[j]), block_scale(blk));
      float* ab = acc + b * QK8_0;
      for (int i = 0; i < 4; ++i)
        _mm256_storeu_ps(ab + 8 * i,
                         _mm256_fmadd_ps(w, i8x8(blk.qs + 8 * i), _mm256_loadu_ps(ab + 8 * i)));
    }
  }
}

// Round to nearest even, bit-identical to common/fp16.h's f32_to_fp16 (and ggml's F16C path).
void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

#include "backend/cpu/attention_impl.inc"

constexpr OpsTable kAvx2 = {rms_norm_rows, silu,  swiglu, attention_units_impl,
                            f32_to_f16,    geglu, softcap};

}  // namespace

const OpsTable* ops_avx2() {
  return &kAvx2;
}

}  // namespace minfer::cpu::detail

#else
namespace minfer::cpu::detail {
const OpsTable* ops_avx2() {
  return nullptr;
}
}  // namespace minfer::cpu::detail
#endif
