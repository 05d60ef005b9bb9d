// KV cache element types as the user names them (llama.cpp's --cache-type-k / --cache-type-v),
// and what a cache of those types costs.
//
// Graph mode keeps the K/V regions in the allocator (alloc/allocator.h) and eager mode in
// eager/kv_cache.h; both size them from these types, and the CPU kernels (backend/cpu/kernels.h,
// kv_store / attention) read and write them. This layer is the one place that says which
// types a user may ask for: f32, f16 and q8_0. f16 (llama.cpp's default) halves the bytes; rows
// are rounded to nearest even on the way in and widened to f32 inside attention. q8_0 stores
// each row as GGML Q8_0 blocks (32 values: an f16 scale and 32 int8, 34 bytes, 8.5 bits a
// value): 53% of f16. A block must not straddle two heads (attention reads one head's values
// at a time), so q8_0 needs the model's head_dim to be a multiple of 32
// (check_kv_cache_type_fits).
//
// Ownership: none (values in, values out). Thread safety: pure functions. Cost: trivial.
// Failure: parse_kv_cache_type and check_kv_cache_type_fits throw Error(InvalidArgument)
// naming the flag and the value.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/dtype.h"

namespace minfer {

// True for the element types a KV cache may have (f32, f16, q8_0).
bool kv_cache_type_supported(GgmlType t);

// "f32" / "F16" / "q8_0" ... (case-insensitive) -> the type. `flag` names the option in the
// error, e.g. "--cache-type-k 'q5_1': KV cache type not supported (use f32, f16 or q8_0)".
GgmlType parse_kv_cache_type(std::string_view flag, std::string_view value);

// Throws Error(InvalidArgument) when a cache of type `t` cannot hold this model's rows: for a
// block type (q8_0) both head_dim and n_kv_embd must be multiples of its 32-value block. The
// message names `flag`, the type, the model's head_dim and why, e.g. "--cache-type-k 'q8_0':
// the model's head_dim 8 is not a multiple of 32 (q8_0 stores each head's K/V values in
// blocks of 32 with one scale per block); use f16 or f32". f32 / f16 always fit.
void check_kv_cache_type_fits(std::string_view flag, GgmlType t, int64_t head_dim,
                              int64_t n_kv_embd);

// Bytes of a whole cache: per layer, n_ctx rows of n_kv_embd elements of K and of V
// (row_size: q8_0 is 34 bytes per 32 values). n_kv_embd must fit the types (see above).
uint64_t kv_cache_bytes(int64_t n_layer, int64_t n_kv_embd, int64_t n_ctx, GgmlType type_k,
                        GgmlType type_v);

}  // namespace minfer
