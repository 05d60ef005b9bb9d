// Reference (plain scalar) quantization and dequantization, one row at a time.
// These are the ground truth the fast kernels in src/backend/cpu are tested against,
// and what the model generator uses to write quantized weights.
// Ownership: none; src / dst are borrowed for the call and must not overlap.
// Thread safety: pure (no shared state): any number of threads may convert rows at once.
// Failure: rows whose length is not a multiple of the block size, or a type without a
// reference quantizer, are internal errors (MINFER_ASSERT) — callers validate user-provided
// shapes first (the GGUF reader checks every tensor's row length against its block size).
// Cost: O(n) per row, scalar, no allocation. Not for hot loops: the CPU backend has its own
// fast kernels.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace minfer {

// dst receives n floats. Supported: F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// True when quantize_row supports `t`.
bool can_quantize(GgmlType t);

// dst receives row_size(t, n) bytes. Supported at least: F32, F16, BF16, Q8_0, Q4_0, Q5_0,
// Q4_K, Q8_K (and Q5_K, Q6_K where implemented; see can_quantize).
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace minfer
