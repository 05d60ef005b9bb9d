// Internal to the CPU backend: row kernels with an AVX2 variant (ops_avx2.cpp, compiled with
// -mavx2 -mfma -mf16c), a NEON one (ops_neon.cpp, AArch64) and a portable one (ops.cpp). The
// caller picks by cpu_features().
// Ownership: the tables are immutable statics; the functions borrow every pointer for the call.
// Thread safety: read-only tables; callers split work so that threads write disjoint rows (and
// attention items), each with its own scratch.
// Failure: none at run time; the public kernels in ops.cpp (kernels.h) validate KV types,
// positions and shapes first.
// Cost: O(elements) per call, attention O(n_kv positions x head_dim) per item; no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels.h"

namespace minfer::cpu::detail {

struct OpsTable {
  void (*rms_norm_rows)(const float* x, int64_t ldx, const float* w, float* y, int64_t ne0,
                        int64_t r0, int64_t r1, float eps);
  void (*silu)(const float* x, float* y, int64_t n);
  void (*swiglu)(const float* g, const float* u, float* y, int64_t n);
  // Attention for the units [u0, u1) of n_tok * n_head (unit t * n_head + h: query token t,
  // head h; attention_impl.inc); scratch is this thread's attention_scratch_floats() floats.
  // K/V of a.k_type / a.v_type (F32, F16 or Q8_0) are read directly, dot products and sums in
  // f32.
  void (*attention_units)(const AttentionArgs& a, float* scratch, int64_t u0, int64_t u1);
  // y[i] = x[i] rounded to half (nearest even): KV rows on their way into an F16 region.
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);
  // Gemma: y = gelu_tanh(g) * u, and y = cap * tanh(x / cap) (kernels.h).
  void (*geglu)(const float* g, const float* u, float* y, int64_t n);
  void (*softcap)(const float* x, float* y, int64_t n, float cap);
};

// Per-thread scratch floats attention_units needs.
int64_t attention_scratch_floats(const AttentionArgs& a);

// y = f(g) * u over n elements for a W-lane ISA: step(g, u, y) computes W elements (unaligned
// pointers) with the ISA's vector formula. The tail (n % W elements) goes through the same step
// on a zero-padded copy, so an element's value does not depend on where a range starts or ends:
// the fused gate/up path (rows of [gate | up], one call per row) then matches the flat call of
// the separate path to the bit, whatever the row length and thread split. One copy for every
// ISA (ops_avx2.cpp, ops_neon.cpp); callers pass a lambda from their anonymous namespace, so
// each instantiation has internal linkage and is never shared across ISA-flagged files.
template <int W, class Step>
inline void glu_rows(Step step, const float* g, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) step(g + i, u + i, y + i);
  if (i == n) return;
  const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
  alignas(W * sizeof(float)) float gb[W] = {}, ub[W] = {}, yb[W];
  std::memcpy(gb, g + i, bytes);
  std::memcpy(ub, u + i, bytes);
  step(gb, ub, yb);
  std::memcpy(y + i, yb, bytes);
}

const OpsTable& ops_scalar();
// The portable Gemma row kernels (ops.cpp): the scalar table's geglu and softcap; softcap is
// also the NEON softcap's tail (n % 4 elements).
void geglu_portable(const float* g, const float* u, float* y, int64_t n);
void softcap_portable(const float* x, float* y, int64_t n, float cap);
const OpsTable* ops_avx2();  // nullptr when not compiled in
const OpsTable* ops_neon();  // AArch64 (ops_neon.cpp); nullptr elsewhere
const OpsTable& ops_for(SimdLevel cap);

}  // namespace minfer::cpu::detail
