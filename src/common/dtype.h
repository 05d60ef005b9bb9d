// Tensor element types as stored in GGUF files (numeric values are the GGUF/ggml type ids),
// their block geometry, and the on-disk block layouts of the quantized types.
// Ownership: TypeTraits live in a static table (references and names stay valid for the
// program's life). Thread safety: pure functions and constants. Failure: type_traits() on an
// unknown id returns nullptr (callers turn that into an Error naming the file and tensor);
// type_traits(GgmlType) on a value outside the table and row_size() on a length that is not a
// multiple of the block size are internal errors (MINFER_ASSERT). Cost: a lookup scans the
// 20-entry table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace minfer {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct TypeTraits {
  GgmlType type;
  std::string_view name;  // "f32", "q4_K", ... (llama.cpp spelling)
  int64_t block_size;     // elements per block (1 for plain types)
  size_t type_size;       // bytes per block
  bool quantized;
  bool supported;  // minfer can dequantize / compute with it
};

// nullptr when `id` is not a known GGUF type id.
const TypeTraits* type_traits(uint32_t id);
const TypeTraits& type_traits(GgmlType t);
std::string_view type_name(GgmlType t);
// Case-insensitive lookup by llama.cpp name ("q8_0", "Q4_K", "f16").
std::optional<GgmlType> type_from_name(std::string_view name);

// Bytes of one row of `n` elements; n must be a multiple of the block size.
size_t row_size(GgmlType t, int64_t n);

// ---- block layouts (must match GGUF byte for byte) ----
using f16_t = uint16_t;  // IEEE half, raw bits
using bf16_t = uint16_t;

constexpr int QK4_0 = 32;
constexpr int QK5_0 = 32;
constexpr int QK8_0 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

struct BlockQ4_0 {
  f16_t d;
  uint8_t qs[QK4_0 / 2];
};
struct BlockQ5_0 {
  f16_t d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};
struct BlockQ8_0 {
  f16_t d;
  int8_t qs[QK8_0];
};
struct BlockQ4_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  f16_t d;
};
// Activation-side block for the K-quant integer dot products.
struct BlockQ8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace minfer
