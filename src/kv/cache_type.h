// KV cache element types as the user names them (llama.cpp's --cache-type-k / --cache-type-v),
// and what a cache of those types costs.
//
// Graph mode keeps the K/V regions in the allocator (alloc/allocator.h) and eager mode in
// eager/kv_cache.h; both size them from these types, and the CPU kernels (backend/cpu/kernels.h,
// kv_store / attention) read and write them. This layer is the one place that says which
// types a user may ask for: f32 and f16 (f16, llama.cpp's default, halves the bytes; rows are
// rounded to nearest even on the way in and widened to f32 inside attention).
//
// Thread safety: pure functions. Cost: trivial.
// Failure: parse_kv_cache_type throws Error(InvalidArgument) naming the flag and the value.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/dtype.h"

namespace minfer {

// True for the element types a KV cache may have (f32, f16).
bool kv_cache_type_supported(GgmlType t);

// "f32" / "F16" / ... (case-insensitive) -> the type. `flag` names the option in the error,
// e.g. "--cache-type-k 'q5_1': KV cache type not supported (use f32 or f16)".
GgmlType parse_kv_cache_type(std::string_view flag, std::string_view value);

// Bytes of a whole cache: per layer, n_ctx rows of n_kv_embd elements of K and of V.
uint64_t kv_cache_bytes(int64_t n_layer, int64_t n_kv_embd, int64_t n_ctx, GgmlType type_k,
                        GgmlType type_v);

}  // namespace minfer
