#include "eager/kv_cache.h"

#include "common/error.h"
#include "kv/cache_type.h"

namespace minfer::eager {

KvCache::KvCache(const KvCacheParams& params) : params_(params) {
  if (!kv_cache_type_supported(params.type)) {
    fail(ErrorKind::Unsupported, "eager KV cache: element type {} (want f32, f16 or q8_0)",
         type_name(params.type));
  }
  if (params.n_layer < 0 || params.n_ctx <= 0 || params.n_kv_embd <= 0 ||
      params.n_kv_embd % type_traits(params.type).block_size != 0) {
    fail(ErrorKind::InvalidArgument,
         "eager KV cache: bad shape (layers {}, n_ctx {}, width {} of {} values a block)",
         params.n_layer, params.n_ctx, params.n_kv_embd, type_traits(params.type).block_size);
  }
  const Shape ne{params.n_kv_embd, params.n_ctx, 1, 1};
  size_t bytes = 0;
  if (__builtin_mul_overflow(row_size(params.type, params.n_kv_embd),
                             static_cast<size_t>(params.n_ctx), &bytes))
    fail(ErrorKind::InvalidArgument, "eager KV cache: {} tokens x {} values overflow size_t",
         params.n_ctx, params.n_kv_embd);
  k_.reserve(static_cast<size_t>(params.n_layer));
  v_.reserve(static_cast<size_t>(params.n_layer));
  for (int64_t l = 0; l < params.n_layer; ++l) {
    // Standalone: session lifetime, never recycled, not in the pool's accounting.
    k_.push_back(Tensor::over(BufferPool::make_standalone(bytes), params.type, ne));
    v_.push_back(Tensor::over(BufferPool::make_standalone(bytes), params.type, ne));
  }
}

void KvCache::set_len(int64_t len) {
  MINFER_ASSERT(len >= 0 && len <= params_.n_ctx, "KV length outside [0, n_ctx]");
  len_ = len;
}

Tensor KvCache::k_view(int64_t layer, int64_t n) const {
  return k_region(layer).narrow(1, 0, n);
}

Tensor KvCache::v_view(int64_t layer, int64_t n) const {
  return v_region(layer).narrow(1, 0, n);
}

void KvCache::store(const cpu::Exec& ex, int64_t layer, const float* k, int64_t ldk, const float* v,
                    int64_t ldv, int64_t n_tok, const int32_t* pos) {
  MINFER_ASSERT(layer >= 0 && layer < params_.n_layer, "KV store: layer out of range");
  const int64_t w = params_.n_kv_embd;
  // The kernel validates every position before writing anything and converts f32 rows to the
  // cache's type (f16: round to nearest even, F16C in the fast path).
  cpu::kv_store(
      ex, k, ldk, v, ldv, w, n_tok, pos,
      cpu::KvRegions{k_region(layer).raw(), v_region(layer).raw(), params_.type, params_.type},
      params_.n_ctx);
}

uint64_t KvCache::bytes() const {
  return 2ull * static_cast<uint64_t>(params_.n_layer) * row_size(params_.type, params_.n_kv_embd) *
         static_cast<uint64_t>(params_.n_ctx);
}

}  // namespace minfer::eager
