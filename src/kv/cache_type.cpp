#include "kv/cache_type.h"

#include <string>

#include "common/error.h"

namespace minfer {

bool kv_cache_type_supported(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::Q8_0;
}

GgmlType parse_kv_cache_type(std::string_view flag, std::string_view value) {
  const std::optional<GgmlType> t = type_from_name(value);
  if (!t) {
    fail(ErrorKind::InvalidArgument, "{} '{}': unknown KV cache type (use f32, f16 or q8_0)", flag,
         value);
  }
  if (!kv_cache_type_supported(*t)) {
    fail(ErrorKind::InvalidArgument, "{} '{}': KV cache type not supported (use f32, f16 or q8_0)",
         flag, value);
  }
  return *t;
}

void check_kv_cache_type_fits(std::string_view flag, GgmlType t, int64_t head_dim,
                              int64_t n_kv_embd) {
  const int64_t block = type_traits(t).block_size;
  if (block == 1) return;
  if (head_dim <= 0 || head_dim % block != 0) {
    fail(ErrorKind::InvalidArgument,
         "{} '{}': the model's head_dim {} is not a multiple of {} ({} stores each head's K/V "
         "values in blocks of {} with one scale per block, and a block cannot span two heads); "
         "use f16 or f32",
         flag, type_name(t), head_dim, block, type_name(t), block);
  }
  if (n_kv_embd <= 0 || n_kv_embd % block != 0) {
    fail(ErrorKind::InvalidArgument,
         "{} '{}': the model's K/V row of {} values is not a multiple of {}; use f16 or f32", flag,
         type_name(t), n_kv_embd, block);
  }
}

uint64_t kv_cache_bytes(int64_t n_layer, int64_t n_kv_embd, int64_t n_ctx, GgmlType type_k,
                        GgmlType type_v) {
  // Every factor comes from a file or a flag: checked, so a hostile size is an error instead of
  // a wrapped (small) figure that a RAM check would wave through.
  const uint64_t row = row_size(type_k, n_kv_embd) + row_size(type_v, n_kv_embd);
  uint64_t b = row;
  if (n_layer < 0 || n_ctx < 0 || __builtin_mul_overflow(b, static_cast<uint64_t>(n_layer), &b) ||
      __builtin_mul_overflow(b, static_cast<uint64_t>(n_ctx), &b))
    fail(ErrorKind::InvalidArgument,
         "KV cache of {} layers x {} tokens x {} bytes a row overflows 64-bit byte counts", n_layer,
         n_ctx, row);
  return b;
}

}  // namespace minfer
