// Matmul driver (activation quantization, tiling, thread split) and the portable scalar
// kernels. The SIMD tile kernels are in matmul_x86.inc.
//
// Thread split: per column chunk, the row tiles (rb weight rows) or panels are split by
// WorkSplit (work_split.h): each thread starts on its own contiguous share and, once done, takes
// chunks from the back of a slower thread's share, so the threads finish together (a static
// split left one waiting at the end of every decode matmul). Each row is still computed by one
// thread with one kernel and order of summation, so results do not depend on the schedule.
//
// Tiling: columns are walked in chunks of kColChunk so the chunk's quantized activations stay in L2
// while the thread's weight rows stream past; inside a chunk each rb x cb tile reuses every weight
// block across cb columns from registers. For m == 1 (decode) this degenerates to a GEMV that
// streams every weight byte exactly once; there every thread quantizes the one activation
// column itself (private_x) so the job has no barrier, and the Q4_0/Q5_0 GEMV tiles take two
// blocks per step (matmul_x86.inc gemv_q4q5_0).
//
// Prefill with Q4_0/Q5_0/Q8_0/Q4_K/Q6_K on AVX-512 VNNI (m >= kPackedMinCols) takes the
// packed-panel path instead (run_packed, matmul_packed_x86.inc): 16 weight rows are re-laid out
// per column chunk so one VNNI instruction serves all 16 rows. On AVX2, Q4_0/Q8_0/Q4_K/Q5_K/Q6_K
// prefill packs per column chunk into the 8-row load-time layout (matmul_prepacked_avx2.inc)
// when the weight was not packed at load. The tiles stay for decode, small batches and the
// other types and instruction sets.
//
// A weight packed once at load (MatmulArgs::packed, packed_weights.h: Q8_0 / Q4_0 / Q5_0 / Q4_K /
// Q5_K / Q6_K on AVX-512 VNNI and on AVX2; docs/KERNELS.md) takes run_packed for every m, decode
// included, reading its compact panels in place (matmul_prepacked_x86.inc,
// matmul_prepacked_avx2.inc, matmul_prepacked_avx512.inc): each weight byte is read once per
// call for up to 8 columns at a time (a panel stays in L1/L2 across the column steps), and never
// re-packed. One column (decode) takes the layout's gemv kernel where it has one
// (matmul_prepacked_gemv_x86.inc), one panel at a time, prefetching 8 KiB ahead; a thread's
// claims of panels are contiguous ranges of memory, so each thread reads one stream. A small
// batch's first call on each panel (the one that reads it from memory) takes the layout's
// gemm_stream where it has one (AVX2: the gemm with that prefetch in its first pass). A wide column
// chunk (kExpandMinCols) over a layout with an expand step (AVX-512 Q5_0 / Q6_K) unpacks each panel
// once into the per-call layout and runs the per-call gemm on it, instead of unpacking the compact
// codes again every 8 columns.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/work_split.h"
#include "common/error.h"
#include "common/fp16.h"

namespace minfer::cpu {
namespace detail {
namespace {

void quant_q8a_scalar(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8A*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    b[i].d = d;
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = (int)std::nearbyint(x[j] * id);
      b[i].qs[j] = (int8_t)q;
      s += q;
    }
    b[i].sum = s;
    q8a_set_offsets(b[i]);
  }
}

void quant_q8k_scalar(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float amax = 0;
    for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    b[i].d = amax / 127.0f;
    for (int j = 0; j < QK_K; ++j) b[i].qs[j] = (int8_t)std::nearbyint(x[j] * id);
    for (int g = 0; g < QK_K / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += b[i].qs[16 * g + j];
      b[i].bsums[g] = (int16_t)s;
    }
  }
}

void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// ---- scalar dot products: one weight row . one activation column ----

float dot_f32(const uint8_t* w, const uint8_t* x, int64_t n) {
  const float* a = reinterpret_cast<const float*>(w);
  const float* b = reinterpret_cast<const float*>(x);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
float dot_f16(const uint8_t* w, const uint8_t* x, int64_t n) {
  const uint16_t* a = reinterpret_cast<const uint16_t*>(w);
  const float* b = reinterpret_cast<const float*>(x);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += fp16_to_f32(a[i]) * b[i];
  return s;
}
float dot_bf16(const uint8_t* w, const uint8_t* x, int64_t n) {
  const uint16_t* a = reinterpret_cast<const uint16_t*>(w);
  const float* b = reinterpret_cast<const float*>(x);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += bf16_to_f32(a[i]) * b[i];
  return s;
}
float dot_q8_0(const uint8_t* w, const uint8_t* x, int64_t n) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(w);
  const auto* b = reinterpret_cast<const BlockQ8A*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    int32_t p = 0;
    for (int j = 0; j < 32; ++j) p += a[i].qs[j] * b[i].qs[j];
    s += fp16_to_f32(a[i].d) * b[i].d * (float)p;
  }
  return s;
}
float dot_q4_0(const uint8_t* w, const uint8_t* x, int64_t n) {
  const auto* a = reinterpret_cast<const BlockQ4_0*>(w);
  const auto* b = reinterpret_cast<const BlockQ8A*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    int32_t p = 0;
    for (int j = 0; j < 16; ++j)
      p += (a[i].qs[j] & 0xF) * b[i].qs[j] + (a[i].qs[j] >> 4) * b[i].qs[j + 16];
    s += fp16_to_f32(a[i].d) * b[i].d * (float)(p - 8 * b[i].sum);
  }
  return s;
}
float dot_q5_0(const uint8_t* w, const uint8_t* x, int64_t n) {
  const auto* a = reinterpret_cast<const BlockQ5_0*>(w);
  const auto* b = reinterpret_cast<const BlockQ8A*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    uint32_t qh;
    std::memcpy(&qh, a[i].qh, 4);
    int32_t p = 0;
    for (int j = 0; j < 16; ++j) {
      const int u0 = (a[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int u1 = (a[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      p += u0 * b[i].qs[j] + u1 * b[i].qs[j + 16];
    }
    s += fp16_to_f32(a[i].d) * b[i].d * (float)(p - 16 * b[i].sum);
  }
  return s;
}
// Q4_K and Q5_K share everything but the 5th bit.
template <bool kFive>
float dot_q45_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  const auto* b = reinterpret_cast<const BlockQ8_K*>(x);
  const size_t bsz = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* blk = w + i * bsz;
    uint16_t dh, mh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&mh, blk + 2, 2);
    const uint8_t* scales = blk + 4;
    const uint8_t* qh = kFive ? blk + 16 : nullptr;
    const uint8_t* qs = kFive ? blk + 48 : blk + 16;
    int32_t sum_sc = 0, sum_m = 0;
    for (int sb = 0; sb < 8; ++sb) {
      int sc, m;
      scale_min_k4(sb, scales, &sc, &m);
      const uint8_t* q = qs + 32 * (sb / 2);
      int32_t p = 0;
      for (int l = 0; l < 32; ++l) {
        int u = (sb & 1) ? (q[l] >> 4) : (q[l] & 0xF);
        if (kFive) u |= ((qh[l] >> sb) & 1) << 4;
        p += u * b[i].qs[32 * sb + l];
      }
      sum_sc += sc * p;
      sum_m += m * (b[i].bsums[2 * sb] + b[i].bsums[2 * sb + 1]);
    }
    s += b[i].d * (fp16_to_f32(dh) * (float)sum_sc - fp16_to_f32(mh) * (float)sum_m);
  }
  return s;
}
float dot_q6_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  const auto* a = reinterpret_cast<const BlockQ6_K*>(w);
  const auto* b = reinterpret_cast<const BlockQ8_K*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int32_t acc = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = a[i].ql + 64 * h;
      const uint8_t* qh = a[i].qh + 32 * h;
      for (int g = 0; g < 4; ++g) {
        for (int half = 0; half < 2; ++half) {
          int32_t p = 0;
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const uint8_t lo = g & 1 ? ql[l + 32] : ql[l];
            const int u = ((g < 2 ? lo & 0xF : lo >> 4) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
            p += u * b[i].qs[128 * h + 32 * g + l];
          }
          acc += a[i].scales[8 * h + 2 * g + half] * p;
        }
      }
    }
    s += fp16_to_f32(a[i].d) * b[i].d * (float)acc;
  }
  return s;
}

template <float (*Dot)(const uint8_t*, const uint8_t*, int64_t)>
void tile_scalar(const TileArgs& t) {
  for (int c = 0; c < t.nc; ++c)
    for (int r = 0; r < t.nr; ++r)
      t.y[c * t.ldy + r] = Dot(t.w + r * t.w_row_bytes, t.x + c * t.x_col_bytes, t.n);
}

constexpr KernelTable kScalar = {
    "scalar",
    {ActFormat::F32, tile_scalar<dot_f32>, 1, 1},
    {ActFormat::F32, tile_scalar<dot_f16>, 1, 1},
    {ActFormat::F32, tile_scalar<dot_bf16>, 1, 1},
    {ActFormat::Q8A, tile_scalar<dot_q4_0>, 1, 1},
    {ActFormat::Q8A, tile_scalar<dot_q5_0>, 1, 1},
    {ActFormat::Q8A, tile_scalar<dot_q8_0>, 1, 1},
    {ActFormat::Q8K, tile_scalar<dot_q45_k<false>>, 1, 1},
    {ActFormat::Q8K, tile_scalar<dot_q45_k<true>>, 1, 1},
    {ActFormat::Q8K, tile_scalar<dot_q6_k>, 1, 1},
    quant_q8a_scalar,
    quant_q8k_scalar,
};

}  // namespace

const KernelTable& kernels_scalar() {
  return kScalar;
}

const KernelTable& select_table(SimdLevel cap) {
  const CpuFeatures& f = cpu_features();
  if (cap >= SimdLevel::kAvx512Vnni && f.avx512 && f.avx_vnni && kernels_avx512())
    return *kernels_avx512();
  if (cap >= SimdLevel::kAvx2 && f.avx2 && kernels_avx2()) return *kernels_avx2();
  if (cap >= SimdLevel::kNeonDot && f.neon_dot && kernels_neon_dot()) return *kernels_neon_dot();
  if (cap >= SimdLevel::kNeon && f.neon && kernels_neon()) return *kernels_neon();
  return kernels_scalar();
}

const TypeKernel* type_kernel(const KernelTable& t, GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return &t.f32;
    case GgmlType::F16:
      return &t.f16;
    case GgmlType::BF16:
      return &t.bf16;
    case GgmlType::Q4_0:
      return &t.q4_0;
    case GgmlType::Q5_0:
      return &t.q5_0;
    case GgmlType::Q8_0:
      return &t.q8_0;
    case GgmlType::Q4_K:
      return &t.q4_k;
    case GgmlType::Q5_K:
      return &t.q5_k;
    case GgmlType::Q6_K:
      return &t.q6_k;
    default:
      return nullptr;
  }
}

}  // namespace detail

namespace {

using detail::ActFormat;
using detail::KernelTable;
using detail::select_table;
using detail::type_kernel;
using detail::TypeKernel;

// Columns per chunk: 64 columns of a 4864-wide Q8 activation are ~330 KB, inside L2.
constexpr int64_t kColChunk = 64;
// Below this many multiply-adds a matmul runs on the calling thread.
constexpr int64_t kSerialMacs = 1 << 16;
// Packed-panel path (TypeKernel::packed) from this many columns on: packing a panel costs
// about as much as multiplying it by a column or two, so few-token batches keep the tiles.
constexpr int64_t kPackedMinCols = 8;
// Packed path: quantized activation bytes per column chunk. Every panel of the chunk re-reads
// them, so they should stay in L2 (1 MB per core on Zen 4/5, 2 MB on recent Intel) next to
// the panel (<= 88 KB for n_in = 4864).
constexpr size_t kPackedChunkBytes = size_t{640} << 10;

// Load-time panels with an expand step (PrepackedKernel::expand) take it for column chunks of at
// least this many columns: the per-call kernel's wide codes repay one unpack per panel and
// chunk from about 3 gemm calls on (bench_kernels matmul_bs/{q5_0,q6_K}/4864x896/packed, one
// thread, loaded machine: m = 16 331 us compact against 396 expanded; m = 32 650 against 700).
constexpr int64_t kExpandMinCols = 2 * detail::kPackedMaxCols + 1;

// Most weight bytes one claim of the dynamic split takes (WorkSplit::Params::max_claim): ~10 us
// of one thread's stream, so a thread descheduled in the middle of a claim holds back little,
// while claims (one CAS each) stay rare next to the bytes they cover.
constexpr size_t kMaxClaimBytes = size_t{256} << 10;

bool use_packed(const TypeKernel& k, int64_t m, size_t w_row_bytes) {
  // The panel packer gathers rows with 32-bit byte offsets.
  return k.packed.rows > 0 && m >= std::max<int64_t>(kPackedMinCols, k.packed.min_cols) &&
         (size_t)(k.packed.rows - 1) * w_row_bytes <= (size_t)INT32_MAX;
}

struct MatmulPlan {
  const TypeKernel* k;
  detail::QuantFn quant;  // nullptr: f32 activations used in place
  const uint8_t* xq;      // activations as the kernel reads them
  size_t x_col_bytes;
  size_t w_row_bytes;
  bool packed;
  uint8_t* panels;     // packed path: one panel per thread
  size_t panel_bytes;  // bytes per scratch panel (per-call layout), 64-byte multiple
  bool private_x;      // one quantized copy of the activations per thread (m == 1)
  size_t x_stride;     // bytes between the threads' copies (private_x)
  // Load-time packed weight (PackedWeights): panels read in place, never re-packed.
  const uint8_t* prepacked;
  size_t pre_panel_bytes;  // bytes per load-time panel
  // Chunks of kExpandMinCols columns or more expand each load-time panel into the thread's
  // scratch panel (PrepackedKernel::expand) and take the per-call gemm on it.
  bool expand;
  // Work: n_units (row tiles, or panels on the packed paths) per column chunk of col_chunk
  // columns. The threads split each chunk's units dynamically (WorkSplit: one set of shares per
  // chunk at split + chunk * WorkSplit::bytes(nth), built before the job), or, with split ==
  // nullptr (one thread, no arena), each takes its static split_range share.
  int64_t n_units;
  int64_t col_chunk;
  int64_t n_col_chunks;
  uint8_t* split;
  WorkSplit::Params claim;
};

// fn(b, e) for each range of units thread ith gets in column chunk ci.
template <typename F>
void for_each_claim(const MatmulPlan& p, int64_t ci, int ith, int nth, F&& fn) {
  int64_t b, e;
  if (p.split == nullptr) {
    split_range(p.n_units, ith, nth, &b, &e);
    if (b < e) fn(b, e);
    return;
  }
  WorkSplit ws(p.split + ci * WorkSplit::bytes(nth), nth, p.claim);
  while (ws.next(ith, &b, &e)) fn(b, e);
}

// Quantizes this thread's share of the activation columns; all threads meet at the barrier
// before anyone reads another thread's columns. With private_x (decode: one column) every
// thread quantizes the whole column into its own copy instead: a few KB, well under a
// microsecond, cheaper than the barrier's round trip plus the idle wait of the threads that
// would have had no column to quantize.
void quantize_columns(const Exec& ex, const MatmulArgs& a, const MatmulPlan& p, int ith, int nth) {
  if (!p.quant) return;
  if (p.private_x) {
    p.quant(a.x, const_cast<uint8_t*>(p.xq) + ith * p.x_stride, a.n_in);
    return;
  }
  int64_t c0, c1;
  split_range(a.m, ith, nth, &c0, &c1);
  for (int64_t c = c0; c < c1; ++c)
    p.quant(a.x + c * a.ldx, const_cast<uint8_t*>(p.xq) + c * p.x_col_bytes, a.n_in);
  if (nth > 1) barrier(ex);
}

int64_t tile_rows(const TypeKernel& k, int64_t m) {
  return (m == 1 && k.rb1) ? k.rb1 : k.rb;
}

void run_tiles(const MatmulArgs& a, const MatmulPlan& p, int ith, int nth) {
  const TypeKernel* k = p.k;
  const int64_t rb = tile_rows(*k, a.m), cb = k->cb;
  detail::TileArgs t{};
  t.w_row_bytes = p.w_row_bytes;
  t.x_col_bytes = p.x_col_bytes;
  t.n = a.n_in;
  t.ldy = a.ldy;
  const uint8_t* xq = p.private_x ? p.xq + ith * p.x_stride : p.xq;
  for (int64_t ci = 0; ci < p.n_col_chunks; ++ci) {
    const int64_t cc = ci * p.col_chunk, cend = std::min(a.m, cc + p.col_chunk);
    for_each_claim(p, ci, ith, nth, [&](int64_t t0, int64_t t1) {
      for (int64_t rt = t0; rt < t1; ++rt) {
        const int64_t r = rt * rb;
        t.w = static_cast<const uint8_t*>(a.w) + r * p.w_row_bytes;
        t.nr = (int)std::min(rb, a.n_out - r);
        for (int64_t c = cc; c < cend; c += cb) {
          t.x = xq + c * p.x_col_bytes;
          t.nc = (int)std::min(cb, cend - c);
          t.y = a.y + c * a.ldy + r;
          k->tile(t);
        }
      }
    });
  }
}

// Decode over load-time panels [p0, p1), one panel at a time: one stream per thread. Four panels
// side by side (four streams) read slower on a Zen 5 class EPYC for every layout once the
// one-panel kernels prefetched 8 KiB ahead (docs/BENCHMARKS.md "Decode kernels one panel at a
// time"), so the group kernels are gone.
void run_gemv(const MatmulArgs& a, const MatmulPlan& p, const detail::PackedKernel& pk,
              const uint8_t* xq, int64_t p0, int64_t p1) {
  for (int64_t pi = p0; pi < p1; ++pi) {
    const int64_t r = pi * pk.rows;
    pk.gemv(p.prepacked + pi * p.pre_panel_bytes, a.n_in, xq, a.y + r,
            (int)std::min<int64_t>(pk.rows, a.n_out - r));
  }
}

bool gemv_decode(const MatmulPlan& p, const MatmulArgs& a) {
  return p.prepacked && a.m == 1 && p.k->prepacked.gemv;
}

// Per column chunk, the thread's panels (claimed through for_each_claim): each is packed into
// its own scratch panel (or read in place, load-time layout) and multiplied by the chunk's
// columns.
void run_packed(const MatmulArgs& a, const MatmulPlan& p, int ith, int nth) {
  const detail::PackedKernel& pk = p.prepacked ? p.k->prepacked : p.k->packed;
  uint8_t* panel = p.prepacked && !p.expand ? nullptr : p.panels + ith * p.panel_bytes;
  const uint8_t* xq = p.private_x ? p.xq + ith * p.x_stride : p.xq;
  if (gemv_decode(p, a)) {
    for_each_claim(p, 0, ith, nth, [&](int64_t p0, int64_t p1) { run_gemv(a, p, pk, xq, p0, p1); });
    return;
  }
  const int64_t step = detail::kPackedMaxCols;
  for (int64_t ci = 0; ci < p.n_col_chunks; ++ci) {
    const int64_t cc = ci * p.col_chunk, cend = std::min(a.m, cc + p.col_chunk);
    for_each_claim(p, ci, ith, nth, [&](int64_t p0, int64_t p1) {
      for (int64_t pi = p0; pi < p1; ++pi) {
        const int64_t r = pi * pk.rows;
        const int nr = (int)std::min<int64_t>(pk.rows, a.n_out - r);
        const uint8_t* src = panel;
        bool expanded = false;
        if (p.prepacked) {
          src = p.prepacked + pi * p.pre_panel_bytes;
          if (p.expand && cend - cc >= kExpandMinCols) {
            pk.expand(src, a.n_in, panel);
            src = panel;
            expanded = true;
          }
        } else {
          pk.pack(static_cast<const uint8_t*>(a.w) + r * p.w_row_bytes, p.w_row_bytes, nr, a.n_in,
                  panel);
        }
        for (int64_t c = cc; c < cend; c += step) {
          // A load-time panel's first call of the chunk reads it from memory (gemm_stream).
          const auto gemm = expanded                                   ? p.k->packed.gemm
                            : p.prepacked && c == cc && pk.gemm_stream ? pk.gemm_stream
                                                                       : pk.gemm;
          gemm(src, a.n_in, xq + c * p.x_col_bytes, p.x_col_bytes, (int)std::min(step, cend - c),
               a.y + c * a.ldy + r, a.ldy, nr);
        }
      }
    });
  }
}

// The plan's work units and column chunks (MatmulPlan::n_units ...) for this call's path.
void plan_work(const MatmulArgs& a, MatmulPlan* p) {
  int64_t unit_bytes;
  if (!p->packed) {
    const int64_t rb = tile_rows(*p->k, a.m);
    p->n_units = (a.n_out + rb - 1) / rb;
    p->col_chunk = kColChunk;
    unit_bytes = rb * (int64_t)p->w_row_bytes;
  } else {
    const detail::PackedKernel& pk = p->prepacked ? p->k->prepacked : p->k->packed;
    p->n_units = (a.n_out + pk.rows - 1) / pk.rows;
    unit_bytes = p->prepacked ? (int64_t)p->pre_panel_bytes : pk.rows * (int64_t)p->w_row_bytes;
    if (gemv_decode(*p, a)) {
      p->col_chunk = 1;
    } else {
      // Equal chunks (each panel is packed once per chunk, so a short last chunk would cost a
      // whole extra packing pass), rounded up to whole kernel calls.
      const int64_t step = detail::kPackedMaxCols;
      const int64_t n_chunks = std::max<int64_t>(
          1, (int64_t)((a.m * p->x_col_bytes + kPackedChunkBytes - 1) / kPackedChunkBytes));
      p->col_chunk = ((a.m + n_chunks - 1) / n_chunks + step - 1) / step * step;
    }
  }
  p->n_col_chunks = (a.m + p->col_chunk - 1) / p->col_chunk;
  p->claim.max_claim =
      std::max<int64_t>(1, (int64_t)kMaxClaimBytes / std::max<int64_t>(1, unit_bytes));
}

}  // namespace

bool matmul_supported(GgmlType wtype) {
  return type_kernel(detail::kernels_scalar(), wtype) != nullptr;
}

void matmul(const Exec& ex, const MatmulArgs& a) {
  const KernelTable& table = select_table(ex.simd);
  const TypeKernel* k = type_kernel(table, a.wtype);
  MINFER_ASSERT(k != nullptr, "matmul: unsupported weight type");
  MINFER_ASSERT(a.n_in % type_traits(a.wtype).block_size == 0, "matmul: n_in not whole blocks");
  MINFER_ASSERT(a.ldx >= a.n_in && a.ldy >= a.n_out, "matmul: bad leading dimension");
  if (a.m == 0 || a.n_out == 0) return;

  MatmulPlan p{};
  p.k = k;
  p.w_row_bytes = row_size(a.wtype, a.n_in);
  p.xq = reinterpret_cast<const uint8_t*>(a.x);
  p.x_col_bytes = a.ldx * sizeof(float);
  // Tiny products (the 64-wide stories model, decode) cost less than waking the workers.
  const bool serial = a.n_in * a.n_out * a.m < kSerialMacs;
  const int nth = serial ? 1 : ex.n_threads();
  // A weight packed at load for this table's layout serves every m (decode included): the
  // original bytes are then never read (their mapped pages may have been released).
  const bool pre = a.packed && a.packed->layout == &k->prepacked && a.packed->type == a.wtype &&
                   a.packed->n_in == a.n_in && a.packed->n_out == a.n_out;
  p.packed = pre || use_packed(*k, a.m, p.w_row_bytes);
  if (pre) p.prepacked = static_cast<const uint8_t*>(a.packed->data);
  p.expand =
      pre && k->prepacked.expand && k->packed.rows == k->prepacked.rows && a.m >= kExpandMinCols;
  if (pre) p.pre_panel_bytes = k->prepacked.panel_bytes(a.n_in);
  // One scratch request: [quantized columns (one copy per thread with private_x) | one panel
  // per thread | the work split's shares], all 64-byte aligned.
  size_t x_total = 0;
  if (k->act != ActFormat::F32) {
    MINFER_ASSERT(ex.arena != nullptr, "matmul: quantized weights need an Exec arena");
    p.x_col_bytes = k->act == ActFormat::Q8A ? (a.n_in / 32) * sizeof(detail::BlockQ8A)
                                             : (a.n_in / QK_K) * sizeof(BlockQ8_K);
    p.quant = k->act == ActFormat::Q8A ? table.quant_q8a : table.quant_q8k;
    const size_t x_bytes = (p.x_col_bytes * a.m + 63) & ~size_t{63};
    p.private_x = a.m == 1 && nth > 1;
    p.x_stride = p.private_x ? x_bytes : 0;
    x_total = p.private_x ? x_bytes * nth : x_bytes;
    p.panel_bytes =
        (p.packed && !pre) || p.expand ? (k->packed.panel_bytes(a.n_in) + 63) & ~size_t{63} : 0;
  }
  plan_work(a, &p);  // after x_col_bytes: prefill's column chunks depend on it
  const size_t split_bytes =
      nth > 1 && ex.arena ? WorkSplit::bytes(nth) * (size_t)p.n_col_chunks : 0;
  const size_t scratch_bytes = x_total + p.panel_bytes * nth + split_bytes;
  if (scratch_bytes > 0) {
    auto* scratch = static_cast<uint8_t*>(ex.arena->get(scratch_bytes));
    if (p.quant) p.xq = scratch;
    p.panels = scratch + x_total;
    if (split_bytes > 0) {
      p.split = p.panels + p.panel_bytes * nth;
      for (int64_t ci = 0; ci < p.n_col_chunks; ++ci)
        WorkSplit::init(p.split + ci * WorkSplit::bytes(nth), p.n_units, nth);
    }
  }
  MINFER_ASSERT(!p.packed || p.panels != nullptr, "matmul: packed path without scratch");

  auto job = [&](int ith, int nth_job) {
    MINFER_ASSERT(p.split == nullptr || nth_job == nth, "matmul: split built for another nth");
    quantize_columns(ex, a, p, ith, nth_job);
    if (p.packed) {
      run_packed(a, p, ith, nth_job);
    } else {
      run_tiles(a, p, ith, nth_job);
    }
  };
  if (serial) {
    job(0, 1);
  } else if (p.split != nullptr && (p.quant == nullptr || p.private_x)) {
    // No barrier in the job and the work is claimed dynamically: a worker that has not woken
    // by the time the caller is done is not waited for (the caller took its share).
    parallel_elastic(ex, job);
  } else {
    parallel(ex, job);
  }
}

const char* simd_level_name(SimdLevel cap) {
  return select_table(cap).name;
}

}  // namespace minfer::cpu
