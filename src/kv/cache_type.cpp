#include "kv/cache_type.h"

#include <string>

#include "common/error.h"

namespace minfer {

bool kv_cache_type_supported(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16;
}

GgmlType parse_kv_cache_type(std::string_view flag, std::string_view value) {
  const std::optional<GgmlType> t = type_from_name(value);
  if (!t) {
    fail(ErrorKind::InvalidArgument, "{} '{}': unknown KV cache type (use f32 or f16)", flag,
         value);
  }
  if (!kv_cache_type_supported(*t)) {
    fail(ErrorKind::InvalidArgument, "{} '{}': KV cache type not supported (use f32 or f16)", flag,
         value);
  }
  return *t;
}

uint64_t kv_cache_bytes(int64_t n_layer, int64_t n_kv_embd, int64_t n_ctx, GgmlType type_k,
                        GgmlType type_v) {
  const uint64_t row = row_size(type_k, n_kv_embd) + row_size(type_v, n_kv_embd);
  return static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(n_ctx) * row;
}

}  // namespace minfer
