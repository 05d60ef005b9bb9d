// CPU kernels: plain functions on raw pointers, one per op (and per weight type inside
// matmul / get_rows, dispatched on GgmlType). Each has a reference twin in ref_kernels.h that
// the tests compare against.
//
// Layout conventions (ggml's): a matrix [ne0, ne1] is ne1 rows of ne0 contiguous elements.
//   * activations are f32; ids / positions are int32;
//   * MatMul: W is [n_in, n_out] (n_out rows of n_in elements, any supported weight type),
//     x is [n_in, m] (m columns of n_in floats, column stride ldx), y is [n_out, m] (ldy).
//   * heads: a [head_dim, n_head, n_tok] tensor is addressed with a head stride and a token
//     stride in elements (so strided views of a fused QKV output work without a copy).
//
// Threading: every kernel takes an Exec. Work is split by rows (tokens, output rows or heads)
// over exec.pool's threads; exec.pool == nullptr runs on the calling thread. Kernels must not
// be called from inside a pool job.
// Allocation: none per call after warm-up. Kernels that need scratch (matmul's quantized
// activations, attention's per-thread tiles) grow Exec's arena once and reuse it.
// Dispatch: fast paths are chosen at run time from cpu_features() (AVX2+FMA+F16C, AVX-512/VNNI
// on x86; NEON and NEON+dotprod on AArch64); every path has a portable scalar fallback, so no
// -march flag is required.
// Failure: shape mistakes are internal errors (MINFER_ASSERT); a KV position outside the
// context is bad input and throws Error(InvalidArgument).
// Ownership: kernels keep nothing; every pointer is borrowed for the call, and scratch belongs
// to the caller's Arena (one per executor, owned by whoever owns the Exec).
// Cost: the arithmetic itself (matmul O(n_in * n_out * m), attention O(n_tok * kv_len *
// head_dim * n_head), the rest linear in their data); no heap traffic once the Arena is warm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/dtype.h"
#include "common/rope_mode.h"

namespace minfer::cpu {

class ThreadPool;

// Which instruction sets the running CPU offers (detected once, cached).
struct CpuFeatures {
  bool avx2 = false;      // with FMA and F16C (x86-64-v3-ish)
  bool avx512 = false;    // F, BW, VL
  bool avx_vnni = false;  // AVX-VNNI or AVX512-VNNI usable on ymm
  bool neon = false;      // AArch64 Advanced SIMD (always there on AArch64)
  bool neon_dot = false;  // + SDOT/UDOT (FEAT_DotProd, Linux HWCAP_ASIMDDP)
};
const CpuFeatures& cpu_features();

// Upper bound on SIMD use: kScalar forces the portable paths (tests use this to exercise
// them on machines that have AVX2). The levels are tiers, named per architecture: tier 1 is
// AVX2 on x86 and NEON on AArch64, tier 2 AVX-512 VNNI and NEON + dot product.
enum class SimdLevel : uint8_t {
  kScalar = 0,
  kAvx2 = 1,
  kNeon = 1,
  kAvx512Vnni = 2,
  kNeonDot = 2,
  kBest = 255
};
// The matmul kernel set a level selects on this CPU: its table's name ("scalar", "avx2",
// "avx512-vnni", "neon", "neon-dot"; `minfer --version` prints it for kBest; MINFER_SIMD caps it).
const char* simd_level_name(SimdLevel cap = SimdLevel::kBest);

// Grow-only 64-byte aligned scratch. Not thread-safe; owned by one Exec.
class Arena {
 public:
  Arena() = default;
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  // Returns at least `bytes` bytes; invalidates earlier pointers only when it grows.
  void* get(size_t bytes);
  size_t capacity() const { return cap_; }
  // Number of times the arena grew (tests assert it stops growing after warm-up).
  size_t grow_count() const { return grows_; }

 private:
  void* ptr_ = nullptr;
  size_t cap_ = 0;
  size_t grows_ = 0;
};

struct Exec {
  ThreadPool* pool = nullptr;  // nullptr: single-threaded
  Arena* arena = nullptr;      // required by matmul and attention
  SimdLevel simd = SimdLevel::kBest;
  int n_threads() const;
};

// ---- element-wise / row ops --------------------------------------------------------------

// out[:, i] = row ids[i] of `table` ([ne0, n_rows] of `type`) converted to f32.
// An id outside [0, n_rows) throws Error(InvalidArgument).
void get_rows(const Exec& ex, GgmlType type, const void* table, int64_t ne0, int64_t n_rows,
              const int32_t* ids, int64_t n_ids, float* out);
// As get_rows, for a table whose bytes are fetched through read(src, dst, n) instead of read
// in place: a tied token embedding whose mapped pages the load-time repack released, where a
// page fault per newly seen row costs more than a read from the file (CpuBackend::set_row_source).
// One read per row into `scratch` (grown to one row, then reused), on the calling thread;
// the same values as get_rows. Throws as get_rows, and whatever `read` throws.
using RowReadFn = std::function<void(const void* src, void* dst, size_t n)>;
// A table read through `read`: bytes [begin, begin + bytes) (CpuBackend::set_row_source).
struct RowSource {
  const void* begin = nullptr;
  size_t bytes = 0;
  RowReadFn read;
};
void get_rows_read(GgmlType type, const void* table, int64_t ne0, int64_t n_rows,
                   const int32_t* ids, int64_t n_ids, float* out, const RowReadFn& read,
                   std::vector<uint8_t>& scratch);

// y = x / sqrt(mean(x^2) + eps) [* w], per row of ne0; rows at x + r*ldx, y + r*ne0.
void rms_norm(const Exec& ex, const float* x, int64_t ldx, const float* w, float* y, int64_t ne0,
              int64_t rows, float eps);

// y[r] = a[r] (+|*) b[r % b_rows], rows of ne0 elements. y may equal a.
void add(const Exec& ex, const float* a, const float* b, float* y, int64_t ne0, int64_t rows,
         int64_t b_rows);
void mul(const Exec& ex, const float* a, const float* b, float* y, int64_t ne0, int64_t rows,
         int64_t b_rows);

// y = x * sigmoid(x); y may equal x.
void silu(const Exec& ex, const float* x, float* y, int64_t n);
// y = silu(g) * u; y may equal g or u.
void swiglu(const Exec& ex, const float* g, const float* u, float* y, int64_t n);
// Gemma's GeGLU: y = gelu_tanh(g) * u with gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))), computed in f32 as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) (the same
// function; llama.cpp's CPU GELU instead looks x up in an f16 table, which differs by up to
// ~1e-3 relative). y may equal g or u.
void geglu(const Exec& ex, const float* g, const float* u, float* y, int64_t n);
// Fused gate/up rows: `rows` rows of 2n floats at x, each [gate (n) | up (n)] (one matmul
// against the [W_gate | W_up] rows). Writes each row of y (same layout) as [gate | glu(gate,
// up)]: the second half silu(gate) * up (swiglu_halves) or gelu_tanh(gate) * up
// (geglu_halves), the first half a copy of gate. y may equal x (in place: the gate half is
// left as is). Each value equals swiglu() / geglu() of the same gate and up to the bit, for
// any thread split.
void swiglu_halves(const Exec& ex, const float* x, float* y, int64_t n, int64_t rows);
void geglu_halves(const Exec& ex, const float* x, float* y, int64_t n, int64_t rows);
// y = x * s; y may equal x.
void scale(const Exec& ex, const float* x, float* y, int64_t n, float s);
// Soft-capping: y = cap * tanh(x / cap) (cap > 0); y may equal x.
void softcap(const Exec& ex, const float* x, float* y, int64_t n, float cap);

// ---- matmul ------------------------------------------------------------------------------

struct PackedWeight;  // packed_weights.h

struct MatmulArgs {
  GgmlType wtype = GgmlType::F32;
  const void* w = nullptr;  // n_out rows, each row_size(wtype, n_in) bytes
  int64_t n_in = 0;
  int64_t n_out = 0;
  const float* x = nullptr;  // m columns
  int64_t ldx = 0;           // floats between columns of x (>= n_in)
  int64_t m = 0;
  float* y = nullptr;  // m columns of n_out
  int64_t ldy = 0;     // floats between columns of y (>= n_out)
  // Load-time repacked copy of w (optional). Used instead of w when it was packed for the
  // kernel table this call runs with (same SIMD level and shape); otherwise w is read.
  const PackedWeight* packed = nullptr;
};
// True when matmul() handles this weight type.
bool matmul_supported(GgmlType wtype);
// y = W^T x. Quantized weights use 8-bit activations (Q8_0-style 32-blocks for Q4_0/Q5_0/Q8_0,
// Q8_K-style 256-blocks with sums for the K-quants) and integer dot products; F32/F16/BF16
// use f32 FMA. n_in must be a multiple of the weight type's block size.
void matmul(const Exec& ex, const MatmulArgs& a);

// ---- RoPE, KV store, attention -------------------------------------------------------------

struct RopeParams {
  RopeMode mode = RopeMode::Normal;
  int32_t n_rot = 0;  // rotated dims per head (<= head_dim, even); the rest is copied
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  // YaRN, as ggml_rope_ext: ext_factor 0 and attn_factor 1 are plain (or linearly scaled) RoPE.
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int64_t n_ctx_orig = 0;
  // [n_rot / 2] divisors of each pair's frequency (Llama 3's rope_freqs), or nullptr.
  const float* freq_factors = nullptr;
};
// Strided [head_dim, n_head, n_tok] view. Strides are in floats.
struct HeadLayout {
  int64_t head_dim = 0;
  int64_t n_head = 0;
  int64_t n_tok = 0;
  int64_t head_stride = 0;  // 0 = head_dim
  int64_t tok_stride = 0;   // 0 = head_stride * n_head
  int64_t hs() const { return head_stride ? head_stride : head_dim; }
  int64_t ts() const { return tok_stride ? tok_stride : hs() * n_head; }
};
// Rotates each head of token t by position pos[t]. Normal mode rotates pairs (2i, 2i+1), NeoX
// pairs (i, i + n_rot/2). With e_i = pos * freq_base^(-2i/n_rot) / ff_i (ff_i = freq_factors[i]
// or 1): theta_i = freq_scale * e_i, and the pair is scaled by attn_factor. YaRN (ext_factor !=
// 0): theta_i = freq_scale * e_i * (1 - r_i) + e_i * r_i with r_i = ext_factor * ramp(i) over
// the correction dims [lo, hi] from beta_fast / beta_slow and n_ctx_orig (ggml's
// rope_yarn_corr_dims and rope_yarn_ramp), and the magnitude is attn_factor * (1 + 0.1 ln
// (1 / freq_scale)). `y` has layout `ly` (may be the same memory and layout as x: in place).
void rope(const Exec& ex, const float* x, const HeadLayout& lx, float* y, const HeadLayout& ly,
          const int32_t* pos, const RopeParams& p);
// YaRN's correction dims [lo, hi] (ggml_rope_yarn_corr_dims): the pair indices between which
// the ramp goes from extrapolation (below lo) to interpolation (above hi).
void rope_yarn_corr_dims(const RopeParams& p, double dims[2]);

// ---- KV cache rows -------------------------------------------------------------------------
// A layer's K and V regions are [n_kv_embd, n_ctx]: one row per position, each row
// row_size(type, n_kv_embd) bytes. Element types: F32 (rows copied), F16 (rows converted with
// round-to-nearest-even, as common/fp16.h and ggml; F16C in the fast path) and Q8_0 (rows
// quantized to GGML Q8_0 blocks by common/quant.h's quantize_row: per 32 values an f16 scale
// d = amax / 127 and 32 int8 codes; n_kv_embd and head_dim must be multiples of 32, else
// Error(InvalidArgument)). Attention reads the stored type directly and computes in f32: f16
// widened in registers, Q8_0 codes widened to f32 and each block's scale applied once (to the
// block's partial q.k sum, and folded into the softmax weight for V).
bool kv_type_supported(GgmlType t);

// How slots (physical rows) map to memory. Paged (block_size > 0): slot s lives at
//   base + (s / block_size) * block_stride + (s % block_size) * row_bytes
// (the paged cache's block-major region, kv/cache.h: a block's rows of one layer are
// contiguous, blocks are block_stride bytes apart). block_size 0: one contiguous region, slot s
// at base + s * row_bytes (eager mode and hand-built test graphs).
struct KvPaging {
  int64_t block_size = 0;
  int64_t block_stride = 0;  // bytes
};
inline uint8_t* kv_row_ptr(void* base, const KvPaging& pg, size_t row_bytes, int64_t slot) {
  auto* b = static_cast<uint8_t*>(base);
  if (pg.block_size <= 0) return b + static_cast<size_t>(slot) * row_bytes;
  return b + static_cast<size_t>(slot / pg.block_size) * static_cast<size_t>(pg.block_stride) +
         static_cast<size_t>(slot % pg.block_size) * row_bytes;
}

struct KvRegions {
  void* k = nullptr;
  void* v = nullptr;
  GgmlType k_type = GgmlType::F32;
  GgmlType v_type = GgmlType::F32;
  KvPaging paging{};
};

// Writes k/v rows (n_kv_embd floats each, token stride ldk / ldv) of n_tok tokens into the
// regions at slot[t], converting to the regions' types. A negative slot skips the token (the
// padding rows of a bucketed batch). A slot >= n_slots throws Error(InvalidArgument) before
// anything is written; an unsupported type is an Error(Unsupported).
void kv_store(const Exec& ex, const float* k, int64_t ldk, const float* v, int64_t ldv,
              int64_t n_kv_embd, int64_t n_tok, const int32_t* slot, const KvRegions& kv,
              int64_t n_slots);
// F32 regions (the original signature).
inline void kv_store(const Exec& ex, const float* k, int64_t ldk, const float* v, int64_t ldv,
                     int64_t n_kv_embd, int64_t n_tok, const int32_t* pos, float* k_region,
                     float* v_region, int64_t n_ctx) {
  kv_store(ex, k, ldk, v, ldv, n_kv_embd, n_tok, pos, KvRegions{k_region, v_region}, n_ctx);
}

// Which K/V rows a query token reads. Contiguous (tables == nullptr): position j is slot j.
// Paged: position j of query token t is slot tables[seq[t] * table_stride + j / B] * B + j % B
// (B = paging.block_size): each token reads its own sequence's block table.
struct KvTables {
  const int32_t* seq = nullptr;     // per query token: its row in tables
  const int32_t* tables = nullptr;  // rows of table_stride block ids
  int64_t table_stride = 0;
};

struct AttentionArgs {
  const float* q = nullptr;  // [head_dim, n_head, n_tok] with layout lq
  HeadLayout lq{};
  const void* k = nullptr;  // K region of k_type: a row per slot (see paging / tables)
  const void* v = nullptr;  // V region, same layout, of v_type
  int64_t n_kv_embd = 0;    // = n_head_kv * head_dim
  int64_t n_ctx = 0;        // positions a token may attend to: [0, n_ctx)
  int32_t n_head_kv = 0;
  const int32_t* pos = nullptr;  // query token positions; token t sees kv rows 0..pos[t]
  float scale = 1.0f;
  float* out = nullptr;             // [head_dim * n_head, n_tok] contiguous
  GgmlType k_type = GgmlType::F32;  // F32, F16 or Q8_0 (kv_type_supported)
  GgmlType v_type = GgmlType::F32;
  KvPaging paging{};  // how slots map to memory (default: contiguous)
  KvTables tables{};  // which slots a token reads (default: position j is slot j)
  // Gemma (last, so that positional initialisers of the fields above keep working): each
  // score s = scale * q.k becomes softcap * tanh(s / softcap) before the softmax (0 = none),
  // and with window > 0 token t sees only positions (pos[t] - window, pos[t]] (llama.cpp's
  // LLAMA_SWA_TYPE_STANDARD mask: masked when pos[t] - j >= window). Rows outside the window
  // are not read at all.
  float softcap = 0.0f;
  int64_t window = 0;
};
// Causal grouped-query attention, tiled over kv with an online softmax (no [tok x kv] matrix);
// tiles never cross a block; with a window, tiles start at the window's first position. A
// position outside [0, n_ctx) throws Error(InvalidArgument).
void attention(const Exec& ex, const AttentionArgs& a);

// Fused epilogue of a fused QKV projection: qkv rows are [q | k | v] (n_q + 2 n_kv floats per
// token, token stride ld); adds bias (nullable, n_q + 2 n_kv), ropes q and k, stores k and v at
// pos into the regions and writes roped q to q_out ([head_dim, n_head, n_tok] with layout lq_out,
// which may alias the q part of qkv).
struct QkvRopeStoreArgs {
  float* qkv = nullptr;
  int64_t ld = 0;
  const float* bias = nullptr;
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0, n_tok = 0;
  const int32_t* pos = nullptr;
  RopeParams rope{};
  void* k_region = nullptr;  // of k_type / v_type (see KvRegions)
  void* v_region = nullptr;
  int64_t n_ctx = 0;  // slots in the regions (positions when slot == nullptr)
  float* q_out = nullptr;
  HeadLayout lq_out{};
  GgmlType k_type = GgmlType::F32;
  GgmlType v_type = GgmlType::F32;
  const int32_t* slot = nullptr;  // where token t's k/v go; nullptr: slot = pos (contiguous)
  KvPaging paging{};
};
void qkv_bias_rope_store(const Exec& ex, const QkvRopeStoreArgs& a);

}  // namespace minfer::cpu
