// Row ops (get_rows, rms_norm, add, mul, silu, swiglu), RoPE, KV store, attention and the fused
// QKV epilogue: threading, validation and the portable variants. AVX2 variants: ops_avx2.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops_impl.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/work_split.h"
#include "common/error.h"
#include "common/fp16.h"
#include "common/quant.h"

namespace minfer::cpu {
namespace detail {

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the
// sigmoid form needs one exp and has no cancellation for negative x.
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

void geglu_portable(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float t = 2.0f * kGeluC * (x + 0.044715f * x * x * x);
    y[i] = x / (1.0f + std::exp(-t)) * u[i];
  }
}

void softcap_portable(const float* x, float* y, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) y[i] = cap * std::tanh(x[i] * inv);
}

namespace {

void rms_norm_rows(const float* x, int64_t ldx, const float* w, float* y, int64_t ne0, int64_t r0,
                   int64_t r1, float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ne0;
    float ss = 0.0f;
    for (int64_t i = 0; i < ne0; ++i) ss += xr[i] * xr[i];
    const float sc = 1.0f / std::sqrt(ss / (float)ne0 + eps);
    for (int64_t i = 0; i < ne0; ++i) yr[i] = xr[i] * sc * (w ? w[i] : 1.0f);
  }
}

void silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// Attention scores in place (attention_impl.inc's contract).
inline void vsoftcap(float* x, float cap, int64_t n) {
  softcap_portable(x, x, n, cap);
}

inline float to_f32(float x) {
  return x;
}
inline float to_f32(uint16_t h) {
  return fp16_to_f32(h);
}

template <class T>
inline void vdot_rows(const float* q, const T* k, int64_t ldk, int64_t hd, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    float s = 0.0f;
    for (int64_t i = 0; i < hd; ++i) s += q[i] * to_f32(k[j * ldk + i]);
    out[j] = s;
  }
}
inline float vmax(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}
inline float vexp_sub_sum(float* x, float m, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += (x[i] = std::exp(x[i] - m));
  return s;
}
inline void vscale(float* acc, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] *= s;
}
template <class T>
inline void vaxpy_rows(float* acc, const float* p, const T* v, int64_t ldv, int64_t n, int64_t hd) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < hd; ++i) acc[i] += p[j] * to_f32(v[j * ldv + i]);
}

// Q8_0 rows: ldk / ldv count blocks, hd values (a multiple of 32). The int8 codes meet q (or
// p) in f32 and each block's scale is applied once, to the block's partial sum (K) or to the
// row weight (V).
inline void vdot_rows(const float* q, const BlockQ8_0* k, int64_t ldk, int64_t hd, int64_t n,
                      float* out) {
  for (int64_t j = 0; j < n; ++j) {
    float s = 0.0f;
    for (int64_t b = 0; b < hd / QK8_0; ++b) {
      const BlockQ8_0& blk = k[j * ldk + b];
      float p = 0.0f;
      for (int i = 0; i < QK8_0; ++i) p += q[b * QK8_0 + i] * (float)blk.qs[i];
      s += p * fp16_to_f32(blk.d);
    }
    out[j] = s;
  }
}
inline void vaxpy_rows(float* acc, const float* p, const BlockQ8_0* v, int64_t ldv, int64_t n,
                       int64_t hd) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < hd / QK8_0; ++b) {
      const BlockQ8_0& blk = v[j * ldv + b];
      const float w = p[j] * fp16_to_f32(blk.d);
      for (int i = 0; i < QK8_0; ++i) acc[b * QK8_0 + i] += w * (float)blk.qs[i];
    }
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

#include "backend/cpu/attention_impl.inc"

constexpr OpsTable kScalarOps = {rms_norm_rows,        silu,       swiglu,
                                 attention_units_impl, f32_to_f16, geglu_portable,
                                 softcap_portable};

}  // namespace

int64_t attention_scratch_floats(const AttentionArgs& a) {
  return attention_scratch_floats_impl(a);
}

const OpsTable& ops_scalar() {
  return kScalarOps;
}

const OpsTable& ops_for(SimdLevel cap) {
  if (cap >= SimdLevel::kAvx2 && cpu_features().avx2 && ops_avx2()) return *ops_avx2();
  if (cap >= SimdLevel::kNeon && cpu_features().neon && ops_neon()) return *ops_neon();
  return kScalarOps;
}

}  // namespace detail

namespace {

// Elementwise jobs below this many elements per thread run on one thread.
constexpr int64_t kMinElemsPerThread = 16384;

void check_positions(const char* op, const int32_t* pos, int64_t n, int64_t n_ctx) {
  for (int64_t t = 0; t < n; ++t)
    if (pos[t] < 0 || pos[t] >= n_ctx)
      fail(ErrorKind::InvalidArgument,
           "{}: token {} has position {} outside the context [0, {}) (context full?)", op, t,
           pos[t], n_ctx);
}

// Both gathers refuse an id outside the table before reading anything.
void check_row_ids(const int32_t* ids, int64_t n_ids, int64_t n_rows) {
  for (int64_t i = 0; i < n_ids; ++i)
    if (ids[i] < 0 || ids[i] >= n_rows)
      fail(ErrorKind::InvalidArgument, "get_rows: id {} (row {}) outside [0, {})", ids[i], i,
           n_rows);
}

}  // namespace

void get_rows(const Exec& ex, GgmlType type, const void* table, int64_t ne0, int64_t n_rows,
              const int32_t* ids, int64_t n_ids, float* out) {
  check_row_ids(ids, n_ids, n_rows);
  const size_t rs = row_size(type, ne0);
  const auto* base = static_cast<const uint8_t*>(table);
  // Dequantizing a handful of rows is cheap; the scalar dequantizer is fast enough here.
  parallel_rows(ex, n_ids, kMinElemsPerThread / (ne0 > 0 ? ne0 : 1) + 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      ref::dequantize_row(type, base + rs * ids[i], out + i * ne0, ne0);
  });
}

void get_rows_read(GgmlType type, const void* table, int64_t ne0, int64_t n_rows,
                   const int32_t* ids, int64_t n_ids, float* out, const RowReadFn& read,
                   std::vector<uint8_t>& scratch) {
  check_row_ids(ids, n_ids, n_rows);
  const size_t rs = row_size(type, ne0);
  const auto* base = static_cast<const uint8_t*>(table);
  // Serial: a decode step gathers one row; a prefill's rows are a small part of its step.
  if (scratch.size() < rs) scratch.resize(rs);
  for (int64_t i = 0; i < n_ids; ++i) {
    read(base + rs * static_cast<size_t>(ids[i]), scratch.data(), rs);
    ref::dequantize_row(type, scratch.data(), out + i * ne0, ne0);
  }
}

void rms_norm(const Exec& ex, const float* x, int64_t ldx, const float* w, float* y, int64_t ne0,
              int64_t rows, float eps) {
  const auto& ops = detail::ops_for(ex.simd);
  parallel_rows(ex, rows, kMinElemsPerThread / (ne0 > 0 ? ne0 : 1) + 1,
                [&](int64_t b, int64_t e) { ops.rms_norm_rows(x, ldx, w, y, ne0, b, e, eps); });
}

template <bool kMul>
static void binary(const Exec& ex, const float* a, const float* b, float* y, int64_t ne0,
                   int64_t rows, int64_t b_rows) {
  MINFER_ASSERT(b_rows >= 1, "binary op: broadcast source has no rows");
  parallel_rows(ex, rows, kMinElemsPerThread / (ne0 > 0 ? ne0 : 1) + 1,
                [&](int64_t r0, int64_t r1) {
                  for (int64_t r = r0; r < r1; ++r) {
                    const float* ar = a + r * ne0;
                    const float* br = b + (r % b_rows) * ne0;
                    float* yr = y + r * ne0;
                    for (int64_t i = 0; i < ne0; ++i) yr[i] = kMul ? ar[i] * br[i] : ar[i] + br[i];
                  }
                });
}

void add(const Exec& ex, const float* a, const float* b, float* y, int64_t ne0, int64_t rows,
         int64_t b_rows) {
  binary<false>(ex, a, b, y, ne0, rows, b_rows);
}

void mul(const Exec& ex, const float* a, const float* b, float* y, int64_t ne0, int64_t rows,
         int64_t b_rows) {
  binary<true>(ex, a, b, y, ne0, rows, b_rows);
}

void silu(const Exec& ex, const float* x, float* y, int64_t n) {
  const auto& ops = detail::ops_for(ex.simd);
  parallel_rows(ex, n, kMinElemsPerThread,
                [&](int64_t b, int64_t e) { ops.silu(x + b, y + b, e - b); });
}

void swiglu(const Exec& ex, const float* g, const float* u, float* y, int64_t n) {
  const auto& ops = detail::ops_for(ex.simd);
  parallel_rows(ex, n, kMinElemsPerThread,
                [&](int64_t b, int64_t e) { ops.swiglu(g + b, u + b, y + b, e - b); });
}

void geglu(const Exec& ex, const float* g, const float* u, float* y, int64_t n) {
  const auto& ops = detail::ops_for(ex.simd);
  parallel_rows(ex, n, kMinElemsPerThread,
                [&](int64_t b, int64_t e) { ops.geglu(g + b, u + b, y + b, e - b); });
}

namespace {

// Rows of [gate | up]: the flat index range [0, n * rows) of the GLU outputs is split among the
// threads as swiglu() splits its n * rows elements, then cut at row ends. The row kernels
// compute their tails with the vector formula (ops_avx2.cpp), so the cuts change no bits.
template <class Glu>
void glu_halves(const Exec& ex, Glu glu, const float* x, float* y, int64_t n, int64_t rows) {
  parallel_rows(ex, n * rows, kMinElemsPerThread, [&](int64_t b, int64_t e) {
    for (int64_t r = b / n; r < rows && r * n < e; ++r) {
      const int64_t i0 = std::max(b, r * n) - r * n, i1 = std::min(e, (r + 1) * n) - r * n;
      const float* xr = x + r * 2 * n;
      float* yr = y + r * 2 * n;
      if (yr != xr) std::memcpy(yr + i0, xr + i0, static_cast<size_t>(i1 - i0) * sizeof(float));
      glu(xr + i0, xr + n + i0, yr + n + i0, i1 - i0);
    }
  });
}

}  // namespace

void swiglu_halves(const Exec& ex, const float* x, float* y, int64_t n, int64_t rows) {
  glu_halves(ex, detail::ops_for(ex.simd).swiglu, x, y, n, rows);
}

void geglu_halves(const Exec& ex, const float* x, float* y, int64_t n, int64_t rows) {
  glu_halves(ex, detail::ops_for(ex.simd).geglu, x, y, n, rows);
}

void scale(const Exec& ex, const float* x, float* y, int64_t n, float s) {
  // A plain loop the compiler vectorises (at the baseline ISA): one multiply per element.
  parallel_rows(ex, n, kMinElemsPerThread, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] * s;
  });
}

void softcap(const Exec& ex, const float* x, float* y, int64_t n, float cap) {
  MINFER_ASSERT(cap > 0.0f, "softcap: cap must be > 0");
  const auto& ops = detail::ops_for(ex.simd);
  parallel_rows(ex, n, kMinElemsPerThread,
                [&](int64_t b, int64_t e) { ops.softcap(x + b, y + b, e - b, cap); });
}

// ---- RoPE ----

namespace {

// cos/sin of each pair's angle, times the magnitude (kernels.h has the formula), in double
// (positions reach the tens of thousands; float theta would lose ~1e-3 rad there). `dims` are
// the YaRN correction dims (rope_yarn_corr_dims), read only when ext_factor != 0.
void rope_table(int32_t pos, const RopeParams& p, const double dims[2], float* cs) {
  const int64_t half = p.n_rot / 2;
  double mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
  for (int64_t i = 0; i < half; ++i) {
    double extrap = (double)pos * std::pow((double)p.freq_base, -2.0 * i / p.n_rot);
    if (p.freq_factors) extrap /= p.freq_factors[i];
    double theta = p.freq_scale * extrap;
    if (p.ext_factor != 0.0f) {
      const double y = (i - dims[0]) / std::max(0.001, dims[1] - dims[0]);
      const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
      theta = theta * (1.0 - mix) + extrap * mix;
    }
    cs[2 * i] = (float)(std::cos(theta) * mscale);
    cs[2 * i + 1] = (float)(std::sin(theta) * mscale);
  }
}

// rope_table through a one-entry memo per thread: every layer of a decode step ropes the same
// position with the same parameters (Qwen2.5-0.5B: 24 tables of 32 pow/cos/sin in double per
// step, ~2 us each, became 1), and a hit copies the very floats a recomputation would give.
// Tables with freq_factors are not memoised: their values live behind a pointer.
void rope_table_memo(int32_t pos, const RopeParams& p, const double dims[2], float* cs) {
  struct Memo {
    bool valid = false;
    int32_t pos = 0, n_rot = 0;
    float freq_base = 0, freq_scale = 0, ext_factor = 0, attn_factor = 0;
    double dims[2] = {0, 0};
    std::vector<float> cs;  // grows once per thread, then reused
  };
  thread_local Memo m;
  const auto n = static_cast<size_t>(p.n_rot);
  if (p.freq_factors == nullptr && m.valid && m.pos == pos && m.n_rot == p.n_rot &&
      m.freq_base == p.freq_base && m.freq_scale == p.freq_scale &&
      m.ext_factor == p.ext_factor && m.attn_factor == p.attn_factor && m.dims[0] == dims[0] &&
      m.dims[1] == dims[1]) {
    std::memcpy(cs, m.cs.data(), n * sizeof(float));
    return;
  }
  rope_table(pos, p, dims, cs);
  if (p.freq_factors != nullptr) return;
  m.cs.assign(cs, cs + n);
  m.pos = pos;
  m.n_rot = p.n_rot;
  m.freq_base = p.freq_base;
  m.freq_scale = p.freq_scale;
  m.ext_factor = p.ext_factor;
  m.attn_factor = p.attn_factor;
  m.dims[0] = dims[0];
  m.dims[1] = dims[1];
  m.valid = true;
}

void rope_head(const float* x, float* y, int64_t hd, const float* cs, const RopeParams& p) {
  const int64_t half = p.n_rot / 2;
  if (p.mode == RopeMode::Neox) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half], c = cs[2 * i], s = cs[2 * i + 1];
      y[i] = a * c - b * s;
      y[i + half] = a * s + b * c;
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1], c = cs[2 * i], s = cs[2 * i + 1];
      y[2 * i] = a * c - b * s;
      y[2 * i + 1] = a * s + b * c;
    }
  }
  if (x != y)
    for (int64_t i = p.n_rot; i < hd; ++i) y[i] = x[i];
}

}  // namespace

void rope_yarn_corr_dims(const RopeParams& p, double dims[2]) {
  // ggml_rope_yarn_corr_dim: the pair index whose wavelength fits `beta` times into n_ctx_orig.
  const auto corr = [&](double beta) {
    return p.n_rot * std::log((double)p.n_ctx_orig / (beta * 2.0 * M_PI)) /
           (2.0 * std::log((double)p.freq_base));
  };
  dims[0] = std::max(0.0, std::floor(corr(p.beta_fast)));
  dims[1] = std::min((double)p.n_rot - 1.0, std::ceil(corr(p.beta_slow)));
}

void rope(const Exec& ex, const float* x, const HeadLayout& lx, float* y, const HeadLayout& ly,
          const int32_t* pos, const RopeParams& p) {
  MINFER_ASSERT(p.n_rot % 2 == 0 && p.n_rot > 0 && p.n_rot <= lx.head_dim,
                "rope: n_rot must be even, positive and <= head_dim");
  MINFER_ASSERT(ex.arena != nullptr, "rope: needs an Exec arena");
  // Decode-sized ropes (one token) run on the calling thread: a dispatch costs more.
  const bool serial = lx.n_tok * lx.n_head * lx.head_dim < kMinElemsPerThread;
  const int nth = serial ? 1 : ex.n_threads();
  float* cs_all = static_cast<float*>(ex.arena->get(sizeof(float) * p.n_rot * nth));
  double dims[2];
  rope_yarn_corr_dims(p, dims);
  const Exec ex1{nullptr, ex.arena, ex.simd};
  parallel(serial ? ex1 : ex, [&](int ith, int nth_) {
    int64_t b, e;
    split_range(lx.n_tok, ith, nth_, &b, &e);
    float* cs = cs_all + ith * p.n_rot;
    for (int64_t t = b; t < e; ++t) {
      rope_table_memo(pos[t], p, dims, cs);
      for (int64_t h = 0; h < lx.n_head; ++h)
        rope_head(x + t * lx.ts() + h * lx.hs(), y + t * ly.ts() + h * ly.hs(), lx.head_dim, cs, p);
    }
  });
}

// ---- KV store ----

bool kv_type_supported(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::Q8_0;
}

namespace {

// `width` is the number of values one unit of work reads or writes at once: a row (kv_store)
// or a head (attention); block types need it to be whole blocks.
void check_kv_types(const char* op, GgmlType k, GgmlType v, int64_t width) {
  for (GgmlType t : {k, v}) {
    if (!kv_type_supported(t))
      fail(ErrorKind::Unsupported, "{}: KV cache types {}/{} (supported: f32, f16, q8_0)", op,
           type_name(k), type_name(v));
    if (width % type_traits(t).block_size != 0)
      fail(ErrorKind::InvalidArgument, "{}: KV cache type {} needs {} to be a multiple of {}", op,
           type_name(t), width, type_traits(t).block_size);
  }
}

// A row of `type` at `dst` gets n floats from x (copied, converted or quantized).
void store_row(const detail::OpsTable& ops, const float* x, uint8_t* dst, GgmlType type,
               int64_t n) {
  if (type == GgmlType::F16) {
    ops.f32_to_f16(x, reinterpret_cast<uint16_t*>(dst), n);
  } else if (type == GgmlType::Q8_0) {
    // The reference quantizer (d = amax / 127, round half away from zero, as ggml's): one row
    // per token is a few hundred values, negligible next to the projections that made it.
    quantize_row(type, x, dst, n);
  } else {
    std::memcpy(dst, x, static_cast<size_t>(n) * 4);
  }
}

// Slots may be negative (padding: not stored) but never past the regions.
void check_slots(const char* op, const int32_t* slot, int64_t n, int64_t n_slots) {
  for (int64_t t = 0; t < n; ++t)
    if (slot[t] >= n_slots)
      fail(ErrorKind::InvalidArgument, "{}: token {} has KV slot {} outside [0, {})", op, t,
           slot[t], n_slots);
}

}  // namespace

void kv_store(const Exec& ex, const float* k, int64_t ldk, const float* v, int64_t ldv,
              int64_t n_kv_embd, int64_t n_tok, const int32_t* slot, const KvRegions& kv,
              int64_t n_slots) {
  check_kv_types("kv_store", kv.k_type, kv.v_type, n_kv_embd);
  check_slots("kv_store", slot, n_tok, n_slots);
  const auto& ops = detail::ops_for(ex.simd);
  const size_t k_row = row_size(kv.k_type, n_kv_embd), v_row = row_size(kv.v_type, n_kv_embd);
  parallel_rows(ex, n_tok, kMinElemsPerThread / (n_kv_embd > 0 ? n_kv_embd : 1) + 1,
                [&](int64_t b, int64_t e) {
                  for (int64_t t = b; t < e; ++t) {
                    if (slot[t] < 0) continue;
                    store_row(ops, k + t * ldk, kv_row_ptr(kv.k, kv.paging, k_row, slot[t]),
                              kv.k_type, n_kv_embd);
                    store_row(ops, v + t * ldv, kv_row_ptr(kv.v, kv.paging, v_row, slot[t]),
                              kv.v_type, n_kv_embd);
                  }
                });
}

// ---- attention ----

void attention(const Exec& ex, const AttentionArgs& a) {
  MINFER_ASSERT(a.n_head_kv > 0 && a.lq.n_head % a.n_head_kv == 0,
                "attention: n_head must be a multiple of n_head_kv");
  MINFER_ASSERT(a.n_kv_embd == a.n_head_kv * a.lq.head_dim, "attention: n_kv_embd mismatch");
  MINFER_ASSERT(ex.arena != nullptr, "attention: needs an Exec arena");
  check_kv_types("attention", a.k_type, a.v_type, a.lq.head_dim);
  if (a.lq.n_tok == 0) return;
  check_positions("attention", a.pos, a.lq.n_tok, a.n_ctx);
  const auto& ops = detail::ops_for(ex.simd);
  // Per-thread scratch, padded to a cache line so threads never share one; the work split's
  // shares follow (64-byte aligned: the arena is, and so is every thread's part).
  const int nth = ex.n_threads();
  const int64_t per = (detail::attention_scratch_floats(a) + 15) & ~int64_t{15};
  const size_t scratch_bytes = sizeof(float) * per * nth;
  auto* mem = static_cast<uint8_t*>(ex.arena->get(scratch_bytes + WorkSplit::bytes(nth)));
  float* scratch = reinterpret_cast<float*>(mem);
  const int64_t n_units = a.lq.n_tok * a.lq.n_head, group = a.lq.n_head / a.n_head_kv;
  // Small problems (decode of a short context, tiny models) run on the calling thread.
  const int64_t work = a.lq.n_tok * a.lq.n_head * a.lq.head_dim * (a.pos[a.lq.n_tok - 1] + 1);
  if (a.lq.n_tok * a.n_head_kv == 1 || nth == 1 || work < (int64_t{1} << 16)) {
    ops.attention_units(a, scratch, 0, n_units);
    return;
  }
  // Dynamic split of the (token, query head) units (work_split.h): a thread that gets less CPU,
  // or wakes late, is robbed of the back of its share, and the job is elastic, so the caller
  // never waits for a worker that has not started (at 1024 positions of Qwen2.5-0.5B that
  // wait was 40% of a loaded decode step). Claims keep a group's heads together (they share
  // each K/V row load) and cover at most ~kMaxClaimMacs multiply-adds, so a descheduled thread
  // holds little back. Each head is computed by one thread in a fixed order: the output does
  // not depend on the schedule.
  constexpr int64_t kMaxClaimMacs = int64_t{1} << 21;
  int64_t n_kv_max = 1;
  for (int64_t t = 0; t < a.lq.n_tok; ++t) n_kv_max = std::max<int64_t>(n_kv_max, a.pos[t] + 1);
  WorkSplit::Params claim;
  claim.align = claim.min_claim = group;
  claim.max_claim = std::max(group, kMaxClaimMacs / (2 * a.lq.head_dim * n_kv_max));
  void* shares = mem + scratch_bytes;
  WorkSplit::init(shares, n_units, nth);
  parallel_elastic(ex, [&](int ith, int nth_job) {
    MINFER_ASSERT(nth_job == nth, "attention: split built for another nth");
    WorkSplit ws(shares, nth, claim);
    int64_t b, e;
    while (ws.next(ith, &b, &e)) ops.attention_units(a, scratch + ith * per, b, e);
  });
}

// ---- fused QKV epilogue ----

void qkv_bias_rope_store(const Exec& ex, const QkvRopeStoreArgs& a) {
  check_kv_types("qkv_bias_rope_store", a.k_type, a.v_type, a.head_dim);
  const int32_t* slot = a.slot ? a.slot : a.pos;
  if (a.slot)
    check_slots("qkv_bias_rope_store", slot, a.n_tok, a.n_ctx);
  else
    check_positions("qkv_bias_rope_store", a.pos, a.n_tok, a.n_ctx);
  const auto& ops = detail::ops_for(ex.simd);
  MINFER_ASSERT(ex.arena != nullptr, "qkv_bias_rope_store: needs an Exec arena");
  const int64_t nq = a.n_head * a.head_dim, nkv = a.n_head_kv * a.head_dim;
  const int64_t width = nq + 2 * nkv;
  const int64_t per = (width + a.rope.n_rot + 15) & ~int64_t{15};
  const size_t k_row = row_size(a.k_type, nkv), v_row = row_size(a.v_type, nkv);
  float* scratch = static_cast<float*>(ex.arena->get(sizeof(float) * per * ex.n_threads()));
  double dims[2];
  rope_yarn_corr_dims(a.rope, dims);
  const Exec ex1{nullptr, ex.arena, ex.simd};
  parallel(a.n_tok * width < kMinElemsPerThread ? ex1 : ex, [&](int ith, int nth) {
    int64_t b, e;
    split_range(a.n_tok, ith, nth, &b, &e);
    float* row = scratch + ith * per;
    float* cs = row + width;
    for (int64_t t = b; t < e; ++t) {
      // Work on a private copy: q_out may alias the q part of this very row.
      const float* src = a.qkv + t * a.ld;
      for (int64_t i = 0; i < width; ++i) row[i] = src[i] + (a.bias ? a.bias[i] : 0.0f);
      rope_table_memo(a.pos[t], a.rope, dims, cs);
      for (int64_t h = 0; h < a.n_head; ++h)
        rope_head(row + h * a.head_dim, a.q_out + t * a.lq_out.ts() + h * a.lq_out.hs(), a.head_dim,
                  cs, a.rope);
      if (slot[t] < 0) continue;  // padding row: q is roped, nothing is stored
      uint8_t* kdst = kv_row_ptr(a.k_region, a.paging, k_row, slot[t]);
      if (a.k_type == GgmlType::F32) {  // rope straight into the region row
        float* krow = reinterpret_cast<float*>(kdst);
        for (int64_t h = 0; h < a.n_head_kv; ++h)
          rope_head(row + nq + h * a.head_dim, krow + h * a.head_dim, a.head_dim, cs, a.rope);
      } else {  // rope in the private row, then convert it into the region
        for (int64_t h = 0; h < a.n_head_kv; ++h) {
          float* kh = row + nq + h * a.head_dim;
          rope_head(kh, kh, a.head_dim, cs, a.rope);
        }
        store_row(ops, row + nq, kdst, a.k_type, nkv);
      }
      store_row(ops, row + nq + nkv, kv_row_ptr(a.v_region, a.paging, v_row, slot[t]), a.v_type,
                nkv);
    }
  });
}

}  // namespace minfer::cpu
