// Eager KV cache: per layer, one K and one V region [n_kv_embd, n_ctx] (a row per position),
// allocated once for the session and OUTSIDE the pool's recycling path (standalone storages:
// never in a free list, never counted in the pool's budget or outstanding count).
//
// reset() only sets the length to 0: it neither zeroes nor frees. Stale rows past len are
// simply overwritten by the next store, which is correct because attention reads a token at
// position p only over positions [0, p], all stored by now. The session's graphs address the
// regions as the builder's contiguous KV nodes (kv_block_size 0: row = position; KvStore,
// Attention, QkvBiasRopeStore get k_region / v_region from GraphRunner); k_view / v_view are
// the zero-copy views of positions [0, n) (a narrow of the region, holding it alive through
// the storage refcount) and store() is the same kv_store kernel, for tools and tests.
//
// Element types: F32, F16 (half the bytes; store() converts rows on the way in) and Q8_0
// (34 bytes per 32 values; store() quantizes rows; n_kv_embd a multiple of 32, and the session
// checks head_dim). The CPU attention kernel reads each directly, so all are bit-identical to
// graph mode with the same KV types.
// Pages are committed lazily by the OS as rows are written, so a long context costs address
// space until it is used.
//
// Ownership: the cache owns its 2 * n_layer regions; k_view / v_view share them through the
// storage refcount, so a view may outlive reset() but sees the rows written after it.
// Thread safety: none (one session, one thread drives it; kernels fan out internally).
// Failure: a store past n_ctx throws Error(InvalidArgument) naming the position and n_ctx;
// an unsupported element type throws Error(Unsupported).
// Cost: construction is 2 * n_layer heap blocks; store is a row copy (or conversion).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/kernels.h"
#include "common/dtype.h"
#include "eager/tensor.h"

namespace minfer::eager {

struct KvCacheParams {
  int64_t n_layer = 0;
  int64_t n_ctx = 0;
  int64_t n_kv_embd = 0;
  GgmlType type = GgmlType::F32;  // F32, F16 or Q8_0
};

class KvCache {
 public:
  explicit KvCache(const KvCacheParams& params);

  const KvCacheParams& params() const { return params_; }
  // Positions [0, len) hold valid rows.
  int64_t len() const { return len_; }
  // Forget every row (keeps the buffers; no zeroing).
  void reset() { len_ = 0; }
  // Declares rows [0, len) valid (after a forward stored them). len <= n_ctx.
  void set_len(int64_t len);

  // The whole region of a layer, [n_kv_embd, n_ctx].
  const Tensor& k_region(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const Tensor& v_region(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }
  // Zero-copy views of positions [0, n): [n_kv_embd, n]. n <= n_ctx.
  Tensor k_view(int64_t layer, int64_t n) const;
  Tensor v_view(int64_t layer, int64_t n) const;

  // Writes n_tok rows of K and V (f32, token strides ldk / ldv in floats) at positions pos[t].
  void store(const cpu::Exec& ex, int64_t layer, const float* k, int64_t ldk, const float* v,
             int64_t ldv, int64_t n_tok, const int32_t* pos);

  // Bytes of all regions (K and V, every layer).
  uint64_t bytes() const;

 private:
  KvCacheParams params_;
  int64_t len_ = 0;
  std::vector<Tensor> k_, v_;
};

}  // namespace minfer::eager
