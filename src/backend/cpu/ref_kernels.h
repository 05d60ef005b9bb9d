// Reference kernels: the plain, obviously-correct scalar versions of every op in kernels.h.
// The fast kernels are tested against these (normalised MSE <= 5e-4 for matmul, 1e-7 for the
// rest). Same layouts and argument meanings as kernels.h.
// Ownership: every pointer is borrowed for the call; outputs are written in place.
// Thread safety: no shared state; each call runs on the calling thread only.
// Failure: Error(InvalidArgument) for data out of range (a get_rows id outside the table, a KV
// position outside the context, a q8_0 row that is not whole blocks); Error(Unsupported) for a
// KV type other than f32 / f16 / q8_0; other shape and type mismatches are internal errors
// (MINFER_ASSERT).
// Cost: unoptimised scalar loops (matmul dequantizes W and accumulates in double), allocation
// allowed; for tests only, never on the hot path.
#pragma once

#include <cstdint>

#include "backend/cpu/kernels.h"

namespace minfer::cpu::ref {

// Our own dequantizer for every weight type (written from the block layouts in dtype.h,
// independently of common/quant.cpp, which the tests cross-check).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

void get_rows(GgmlType type, const void* table, int64_t ne0, int64_t n_rows, const int32_t* ids,
              int64_t n_ids, float* out);
void rms_norm(const float* x, int64_t ldx, const float* w, float* y, int64_t ne0, int64_t rows,
              float eps);
void add(const float* a, const float* b, float* y, int64_t ne0, int64_t rows, int64_t b_rows);
void mul(const float* a, const float* b, float* y, int64_t ne0, int64_t rows, int64_t b_rows);
void silu(const float* x, float* y, int64_t n);
void swiglu(const float* g, const float* u, float* y, int64_t n);
// gelu_tanh in double, by the textbook formula 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
void geglu(const float* g, const float* u, float* y, int64_t n);
void scale(const float* x, float* y, int64_t n, float s);
void softcap(const float* x, float* y, int64_t n, float cap);  // in double
// Dequantizes W and accumulates in double with unquantized activations.
void matmul(const MatmulArgs& a);
void rope(const float* x, const HeadLayout& lx, float* y, const HeadLayout& ly, const int32_t* pos,
          const RopeParams& p);
// KV rows (ref_kv.cpp): F16 regions through common/fp16.h's scalar conversions, Q8_0 rows
// through common/quant.h's quantize_row (the fast kernel uses the same quantizer).
void kv_store(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t n_kv_embd,
              int64_t n_tok, const int32_t* pos, const KvRegions& kv, int64_t n_ctx);
inline void kv_store(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t n_kv_embd,
                     int64_t n_tok, const int32_t* pos, float* k_region, float* v_region,
                     int64_t n_ctx) {
  kv_store(k, ldk, v, ldv, n_kv_embd, n_tok, pos, KvRegions{k_region, v_region}, n_ctx);
}
// Naive: full score row per query (soft-capped in double, positions outside the window
// skipped), max-subtracted softmax in double; K/V of any supported
// type widened element by element.
void attention(const AttentionArgs& a);
void qkv_bias_rope_store(const QkvRopeStoreArgs& a);

}  // namespace minfer::cpu::ref
