// Internal to the CPU backend: the pieces matmul.cpp's driver combines. Each instruction-set
// variant (scalar, AVX2, AVX-512+VNNI) provides one KernelTable: per weight type a tile
// function computing an nr x nc block of y from nr weight rows and nc activation columns, plus
// the activation quantizers. The driver picks the table at run time (cpu_features()).
//
// The x86 and ARM variants live in translation units compiled with their own -m flags
// (see CMakeLists.txt); everything they define is in an anonymous namespace except the
// kernels_* accessor, so no inline function compiled for AVX-512 can leak into generic code.
//
// Ownership: the tables are immutable statics (kernels_* return references / pointers to them,
// valid for the program's life). Tile and pack functions borrow every pointer in their
// arguments and write only their own rows of y (or their own panel).
// Thread safety: the tables are read-only; the driver runs one tile / panel per thread on
// disjoint output rows, so kernels share nothing writable.
// Failure: none at run time. The driver guarantees the shapes (n a multiple of the block size,
// 1 <= nr <= rb, 1 <= nc <= cb, a panel of panel_bytes(n)) and asks only for weight types the
// tables cover (the CPU backend rejects others with Error(Unsupported) before any kernel runs).
// Cost: a tile is O(nr * nc * n) multiply-adds with no allocation; pack is O(nr * n) bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernels.h"
#include "common/dtype.h"

namespace minfer::cpu::detail {

// Activation block for the 32-element weight types (Q4_0, Q5_0, Q8_0): x ~= d * qs.
// `sum` = sum(qs), used by the kernels for the weight types' zero offsets. `sum16` = 16 x the
// sums of qs[4g], qs[4g + 1] (g = 0..7) and of qs[4g + 2], qs[4g + 3] (|.| <= 32512): Q5_0's
// zero offset (16) per int16 lane of maddubs sums over 4-element groups, which lets the AVX2
// Q5_0 kernels add all 8 groups' pair sums in one wrapping int16 sum (matmul_prepacked_avx2.inc
// q5_0_dot). `off8` = -8 x sum: Q4_0's zero offset term (twice it: Q5_0's), which the x86
// decode kernels broadcast from memory as it is (into an accumulator's first value, or one
// add) instead of forming it from `sum` per block and panel (a shift, a subtraction, and on
// AVX2 a move from a general register and a broadcast). Every quantizer fills all of them
// (q8a_set_offsets where it has no cheaper way).
struct BlockQ8A {
  float d;
  int32_t sum;
  int16_t sum16[2];
  int32_t off8;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8A) == 48);

// BlockQ8A::sum16 and off8 from the block's codes and sum.
inline void q8a_set_offsets(BlockQ8A& b) {
  int32_t s[2] = {0, 0};
  for (int i = 0; i < 32; ++i) s[(i >> 1) & 1] += b.qs[i];
  b.sum16[0] = (int16_t)(16 * s[0]);
  b.sum16[1] = (int16_t)(16 * s[1]);
  b.off8 = -8 * b.sum;
}

enum class ActFormat : uint8_t { F32, Q8A, Q8K };

struct TileArgs {
  const uint8_t* w;    // first weight row of the tile
  size_t w_row_bytes;  // bytes between weight rows
  const uint8_t* x;    // first activation column of the tile (f32 or quantized blocks)
  size_t x_col_bytes;  // bytes between activation columns
  int64_t n;           // elements per row (n_in)
  float* y;            // y[c * ldy + r]
  int64_t ldy;
  int nr;  // rows in this tile, 1..rb
  int nc;  // columns in this tile, 1..cb
};
using TileFn = void (*)(const TileArgs&);
// Quantizes one column of n floats (n a multiple of the block size) into dst blocks.
using QuantFn = void (*)(const float* x, void* dst, int64_t n);

// Packed-panel GEMM (prefill): `pack` copies `nr` (<= rows) weight rows of n elements into a
// panel in the kernel's own layout (interleaved across rows, codes widened to u8, scales as
// f32; rows past nr are zero); `gemm` multiplies one packed panel by nc (1..kPackedMaxCols)
// activation columns and writes the panel's nr rows of y. The panel is scratch owned by the
// caller (panel_bytes(n) bytes, 64-byte aligned) and reused for every column chunk, so its
// build cost is paid once per panel per chunk instead of once per weight block and column.
// rows == 0: no packed path (the tiles above are used).
inline constexpr int kPackedMaxCols = 8;
struct PackedKernel {
  int rows = 0;
  size_t (*panel_bytes)(int64_t n) = nullptr;
  void (*pack)(const uint8_t* w, size_t w_row_bytes, int nr, int64_t n, void* panel) = nullptr;
  void (*gemm)(const void* panel, int64_t n, const uint8_t* x, size_t x_col_bytes, int nc, float* y,
               int64_t ldy, int nr) = nullptr;
  // As the per-call path (`packed` below): the fewest columns for which packing per call pays
  // (0: matmul.cpp's default). Unused for load-time layouts.
  int min_cols = 0;
  // One column (decode), when set: the panel's nr rows of y[0..nr). Same sums as gemm at
  // nc = 1, but tuned for streaming from memory (matmul_prepacked_gemv_x86.inc); nullptr: gemm.
  void (*gemv)(const void* panel, int64_t n, const uint8_t* x, float* y, int nr) = nullptr;
  // As gemm (same sums), for the first call on a load-time panel, which then comes from memory:
  // it also prefetches ahead as gemv does, since a small batch (2-16 columns, batched decode)
  // is bound by cache lines in flight as decode is; nullptr: gemm. Later calls on the panel
  // (prefill's further columns) find it in L1/L2 and take gemm.
  void (*gemm_stream)(const void* panel, int64_t n, const uint8_t* x, size_t x_col_bytes, int nc,
                      float* y, int64_t ldy, int nr) = nullptr;
  // Load-time layouts only, when set: unpacks one compact panel into the per-call layout of the
  // same type and height (TypeKernel::packed; `out` has its panel_bytes(n), 64-byte aligned),
  // whose gemm then serves the whole column chunk. For wide chunks (matmul.cpp kExpandMinCols),
  // where re-unpacking the compact codes every kPackedMaxCols columns would cost more than one
  // unpack per panel and chunk (AVX-512 Q5_0 / Q6_K, docs/KERNELS.md); nullptr: gemm throughout.
  void (*expand)(const void* panel, int64_t n, void* out) = nullptr;
};

// Load-time layout (PackedWeights, packed_weights.h): the same panel interface, but compact
// (codes keep their bit width, scales stay f16), so the whole matrix is packed once at load
// and every matmul of any width, decode included, reads only the packed copy. Each panel is
// panel_bytes(n) bytes (a 64-byte multiple); panel i of a matrix starts at i * panel_bytes(n).
// pack may be slow (plain C++: it runs once per weight); gemm is the hot kernel.
using PrepackedKernel = PackedKernel;

struct TypeKernel {
  ActFormat act = ActFormat::F32;
  TileFn tile = nullptr;
  int rb = 1;             // max rows per tile
  int cb = 1;             // max columns per tile
  int rb1 = 0;            // rows per tile when m == 1 (GEMV); 0 = rb
  PackedKernel packed{};  // prefill path for m >= kPackedMinCols (matmul.cpp), when rows > 0
  PrepackedKernel prepacked{};  // load-time layout for every m, when rows > 0
};


struct KernelTable {
  const char* name;
  TypeKernel f32, f16, bf16, q4_0, q5_0, q8_0, q4_k, q5_k, q6_k;
  QuantFn quant_q8a;
  QuantFn quant_q8k;
};

const KernelTable& kernels_scalar();
// The table matmul() uses at this SIMD cap (and the running CPU), and a type's entry in it
// (nullptr: type not supported).
const KernelTable& select_table(SimdLevel cap);
const TypeKernel* type_kernel(const KernelTable& t, GgmlType type);
// nullptr when the variant is not compiled in (non-x86 builds).
const KernelTable* kernels_avx2();
const KernelTable* kernels_avx512();
// AArch64 (matmul_neon.inc): baseline NEON and NEON + SDOT; nullptr on other architectures.
const KernelTable* kernels_neon();
const KernelTable* kernels_neon_dot();

}  // namespace minfer::cpu::detail
