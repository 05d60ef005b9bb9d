// minfer-test-libs: minfer_backend_cpu minfer_alloc minfer_graph minfer_common
// The packed-panel prefill matmul (matmul_packed_x86.inc, AVX-512 VNNI; on AVX2 the load-time
// layout packed per call): the panel kernel on its own (every panel height 1..16 and column
// count 1..8) and through matmul() on shapes that hit its edges (rows not a multiple of the
// panel, columns not a multiple of the micro-kernel, several column chunks, 1..3 threads), at
// the best level and at AVX2. Exactness is checked against the scalar integer kernels
// on random codes (every bit pattern: Q8_0's -128, Q5_0's fifth bit, 6-bit K-quant scales at 63,
// negative Q6_K scales), accuracy against the
// reference matmul on quantized gaussian weights.
// The load-time packed layout (PackedWeights, matmul_prepacked_x86.inc) likewise: its panel
// kernel per height / width, and matmul() over a PackedWeights entry for odd row counts, every
// column count 1..17 and 40 (decode to prefill), 1..3 threads, with the original bytes poisoned
// after packing (the packed copy alone must carry the weight), at each SIMD level that has a
// layout; its decode kernel (one column) per height and row length, and its expand step (wide
// chunks: the panel unpacked into the per-call layout) per height and width.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/work_split.h"
#include "common/fp16.h"
#include "common/quant.h"
#include "cpu_test_util.h"
#include "numeric_test_util.h"

namespace minfer::cpu {
namespace {

using test::nmse;
using test::randn;

const GgmlType kPackedTypes[] = {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K,
                                 GgmlType::Q6_K};

// Random codes and sub-block scales, small positive f16 super-block scales.
std::vector<uint8_t> random_codes(GgmlType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  std::vector<uint8_t> w(row_size(t, n_in) * n_out);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  for (auto& b : w) b = (uint8_t)byte(rng);
  const size_t bs = type_traits(t).type_size;
  const size_t d_at = t == GgmlType::Q6_K ? offsetof(BlockQ6_K, d) : 0;
  for (size_t o = 0; o < w.size(); o += bs) {
    const uint16_t d = f32_to_fp16(scale(rng)), dmin = f32_to_fp16(scale(rng));
    std::memcpy(&w[o + d_at], &d, 2);
    if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) std::memcpy(&w[o + 2], &dmin, 2);
  }
  return w;
}

bool k_quant(GgmlType t) {
  return type_traits(t).block_size == QK_K;
}

std::vector<uint8_t> quantized(GgmlType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  auto wf = randn(n_in * n_out, seed, 0.02f);
  std::vector<uint8_t> w(row_size(t, n_in) * n_out);
  for (int64_t r = 0; r < n_out; ++r)
    quantize_row(t, wf.data() + r * n_in, w.data() + r * row_size(t, n_in), n_in);
  return w;
}

const detail::TypeKernel& kernel_of(const detail::KernelTable& k, GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return k.q4_0;
    case GgmlType::Q5_0:
      return k.q5_0;
    case GgmlType::Q4_K:
      return k.q4_k;
    case GgmlType::Q5_K:
      return k.q5_k;
    case GgmlType::Q6_K:
      return k.q6_k;
    default:
      return k.q8_0;
  }
}

bool packed_available() {
  const CpuFeatures& f = cpu_features();
  const detail::KernelTable* k = detail::kernels_avx512();
  return f.avx512 && f.avx_vnni && k && k->q4_0.packed.rows > 0;
}

using Ctx = test::CpuCtx;

// pack + gemm for every panel height and column count, against the scalar tile on the same
// quantized activations: identical integer sums, so only float summation order differs.
TEST(MatmulPacked, PanelKernelMatchesScalarEveryHeightAndWidth) {
  if (!packed_available()) GTEST_SKIP() << "no AVX-512 VNNI packed kernels on this CPU/build";
  const detail::KernelTable& fast = *detail::kernels_avx512();
  const detail::KernelTable& scalar = detail::kernels_scalar();
  for (GgmlType t : kPackedTypes) {
    const detail::PackedKernel& pk = kernel_of(fast, t).packed;
    ASSERT_EQ(pk.rows, 16);
    const bool kq = k_quant(t);
    const int64_t n = kq ? QK_K * 2 : 32 * 5;
    const size_t rs = row_size(t, n);
    auto w = random_codes(t, n, 16, 5);
    auto xf = randn(n * 8, 6);
    const size_t xcb = kq ? (n / QK_K) * sizeof(BlockQ8_K) : (n / 32) * sizeof(detail::BlockQ8A);
    std::vector<uint8_t> xq(xcb * 8);
    for (int c = 0; c < 8; ++c)
      (kq ? scalar.quant_q8k : scalar.quant_q8a)(xf.data() + c * n, xq.data() + c * xcb, n);
    std::vector<uint8_t> panel_store(pk.panel_bytes(n) + 64);
    void* panel = panel_store.data() + (64 - (uintptr_t)panel_store.data() % 64) % 64;
    for (int nr = 1; nr <= 16; ++nr) {
      pk.pack(w.data(), rs, nr, n, panel);
      for (int nc = 1; nc <= detail::kPackedMaxCols; ++nc) {
        const int64_t ldy = 19;  // > 16: the kernel must not write past nr rows
        std::vector<float> got(ldy * nc, -7.0f), want(ldy * nc, -7.0f);
        pk.gemm(panel, n, xq.data(), xcb, nc, got.data(), ldy, nr);
        detail::TileArgs ta{w.data(), rs, xq.data(), xcb, n, want.data(), ldy, nr, nc};
        kernel_of(scalar, t).tile(ta);
        for (int c = 0; c < nc; ++c)
          for (int r = 0; r < ldy; ++r) {
            const float g = got[c * ldy + r], e = want[c * ldy + r];
            if (r >= nr) {
              ASSERT_EQ(g, -7.0f) << type_name(t) << " wrote row " << r << " of nr=" << nr;
            } else {
              ASSERT_NEAR(g, e, 1e-4f * (1.0f + std::fabs(e)))
                  << type_name(t) << " nr=" << nr << " nc=" << nc << " r=" << r << " c=" << c;
            }
          }
      }
    }
  }
}

// Types with a per-call packed path at some level (AVX2: the 8-row load-time layout packed per
// column chunk), and the levels matmul() is run at below (the best one and AVX2).
const GgmlType kPerCallTypes[] = {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0,
                                  GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
const SimdLevel kLevels[] = {SimdLevel::kBest, SimdLevel::kAvx2};

// Through matmul(): shapes around the panel height (16 or 8) and micro-kernel width (8), strided
// activations and outputs, 1..3 threads; random codes against the scalar level.
TEST(MatmulPacked, EdgeShapesAgreeWithScalar) {
  for (SimdLevel lv : kLevels)
    for (GgmlType t : kPerCallTypes) {
      const int64_t n_in = k_quant(t) ? QK_K : 96;
      for (int64_t n_out : {1, 15, 16, 17, 33}) {
        for (int64_t m : {8, 9, 16, 23}) {
          auto w = random_codes(t, n_in, n_out, (uint32_t)(n_out * 7 + m));
          const int64_t ldx = n_in + 5, ldy = n_out + 2;
          auto x = randn(ldx * m, (uint32_t)m);
          std::vector<float> want(ldy * m, 0.0f);
          MatmulArgs a{t, w.data(), n_in, n_out, x.data(), ldx, m, want.data(), ldy};
          Ctx scalar(1, SimdLevel::kScalar);
          matmul(scalar.ex, a);
          for (int th = 1; th <= 3; ++th) {
            Ctx c(th, lv);
            std::vector<float> got(ldy * m, 0.0f);
            a.y = got.data();
            matmul(c.ex, a);
            EXPECT_LE(nmse(got, want), 1e-9)
                << simd_level_name(lv) << " " << type_name(t) << " n_out=" << n_out << " m=" << m
                << " threads=" << th;
          }
        }
      }
    }
}

// n_in = 4864 (the Qwen2.5-0.5B FFN width): 120 columns of quantized activations exceed one
// column chunk, so every panel is packed twice; against the reference matmul.
TEST(MatmulPacked, SeveralColumnChunksMatchReference) {
  for (SimdLevel lv : kLevels)
    for (GgmlType t : kPerCallTypes) {
      if (!can_quantize(t)) continue;
      const int64_t n_in = 4864, n_out = 21, m = 120;
      auto w = quantized(t, n_in, n_out, 11);
      auto x = randn(n_in * m, 12);
      std::vector<float> want(n_out * m), got(n_out * m);
      MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, m, want.data(), n_out};
      ref::matmul(a);
      for (int th = 1; th <= 2; ++th) {
        Ctx c(th, lv);
        a.y = got.data();
        matmul(c.ex, a);
        EXPECT_LE(nmse(got, want), 5e-4)
            << simd_level_name(lv) << " " << type_name(t) << " threads=" << th;
      }
    }
}

// Scratch (quantized columns + one panel per thread) is sized once; repeated prefill-sized
// calls must not grow the arena.
TEST(MatmulPacked, ArenaStopsGrowingAfterWarmup) {
  Ctx c(2);
  const int64_t n_in = 256, n_out = 40, m = 24;
  auto w = random_codes(GgmlType::Q4_0, n_in, n_out, 1);
  auto x = randn(n_in * m, 2);
  std::vector<float> y(n_out * m);
  MatmulArgs a{GgmlType::Q4_0, w.data(), n_in, n_out, x.data(), n_in, m, y.data(), n_out};
  matmul(c.ex, a);
  const size_t grows = c.arena.grow_count();
  for (int i = 0; i < 5; ++i) matmul(c.ex, a);
  EXPECT_EQ(c.arena.grow_count(), grows);
}

// ---------------------------------------------------------------- load-time packed weights

// Every x86 level has a layout for each of these (AVX-512 borrows the AVX2 Q5_K one).
const GgmlType kPrepackedTypes[] = {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0,
                                    GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

struct Level {
  const char* name;
  SimdLevel simd;
  const detail::KernelTable* table;
};

std::vector<Level> prepacked_levels() {
  std::vector<Level> v;
  const CpuFeatures& f = cpu_features();
  if (f.avx512 && f.avx_vnni && detail::kernels_avx512())
    v.push_back({"avx512", SimdLevel::kAvx512Vnni, detail::kernels_avx512()});
  if (f.avx2 && detail::kernels_avx2())
    v.push_back({"avx2", SimdLevel::kAvx2, detail::kernels_avx2()});
  return v;
}

TEST(MatmulPrepacked, PanelKernelMatchesScalarEveryHeightAndWidth) {
  const detail::KernelTable& scalar = detail::kernels_scalar();
  int checked = 0;
  for (const Level& lv : prepacked_levels()) {
    for (GgmlType t : kPrepackedTypes) {
      const detail::PrepackedKernel& pk = kernel_of(*lv.table, t).prepacked;
      if (pk.rows == 0) continue;
      const bool kq = k_quant(t);
      const int64_t n = kq ? QK_K * 3 : 32 * 5;
      const size_t rs = row_size(t, n);
      auto w = random_codes(t, n, pk.rows, 15);
      auto xf = randn(n * 8, 16);
      const size_t xcb = kq ? (n / QK_K) * sizeof(BlockQ8_K) : (n / 32) * sizeof(detail::BlockQ8A);
      std::vector<uint8_t> xq(xcb * 8);
      for (int c = 0; c < 8; ++c)
        (kq ? scalar.quant_q8k : scalar.quant_q8a)(xf.data() + c * n, xq.data() + c * xcb, n);
      ASSERT_EQ(pk.panel_bytes(n) % 64, 0u);
      std::vector<uint8_t> store(pk.panel_bytes(n) + 64);
      void* panel = store.data() + (64 - (uintptr_t)store.data() % 64) % 64;
      // expand (wide chunks): the panel unpacked into the per-call layout, whose gemm multiplies.
      const detail::PackedKernel& wide = kernel_of(*lv.table, t).packed;
      std::vector<uint8_t> wide_store(pk.expand ? wide.panel_bytes(n) + 64 : 0);
      void* wide_panel =
          pk.expand ? wide_store.data() + (64 - (uintptr_t)wide_store.data() % 64) % 64 : nullptr;
      if (pk.expand) {
        ASSERT_EQ(wide.rows, pk.rows) << lv.name << " " << type_name(t);
      }
      for (int nr = 1; nr <= pk.rows; ++nr) {
        pk.pack(w.data(), rs, nr, n, panel);
        if (pk.expand) pk.expand(panel, n, wide_panel);
        // gemm, its streaming variant (first call on a panel from memory) and the per-call gemm
        // over the expanded panel, where there are.
        for (int variant = 0; variant < 3; ++variant) {
          const auto gemm = variant == 0   ? pk.gemm
                            : variant == 1 ? pk.gemm_stream
                                           : (pk.expand ? wide.gemm : nullptr);
          if (gemm == nullptr) continue;
          const char* fn = variant == 0 ? "gemm" : variant == 1 ? "gemm_stream" : "expand+gemm";
          const void* src = variant == 2 ? wide_panel : panel;
          for (int nc = 1; nc <= detail::kPackedMaxCols; ++nc) {
            const int64_t ldy = pk.rows + 3;  // the kernel must not write past nr rows
            std::vector<float> got(ldy * nc, -7.0f), want(ldy * nc, -7.0f);
            gemm(src, n, xq.data(), xcb, nc, got.data(), ldy, nr);
            detail::TileArgs ta{w.data(), rs, xq.data(), xcb, n, want.data(), ldy, nr, nc};
            kernel_of(scalar, t).tile(ta);
            for (int c = 0; c < nc; ++c)
              for (int r = 0; r < ldy; ++r) {
                const float g = got[c * ldy + r], e = want[c * ldy + r];
                if (r >= nr) {
                  ASSERT_EQ(g, -7.0f)
                      << lv.name << " " << type_name(t) << " " << fn << " wrote row " << r;
                } else {
                  ASSERT_NEAR(g, e, 1e-4f * (1.0f + std::fabs(e)))
                      << lv.name << " " << type_name(t) << " " << fn << " nr=" << nr
                      << " nc=" << nc;
                }
              }
          }
        }
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no load-time packed layout on this CPU/build";
}

// The decode kernel (PrepackedKernel::gemv) on its own: every layout of each level (all six
// types at AVX2) has one, checked at every panel height, block counts odd and even, and a row
// as long as the Qwen2.5-0.5B FFN (4864: the prefetches run far past the panel); against the
// scalar tile on the same quantized column (random codes: every bit pattern and scale).
TEST(MatmulPrepacked, GemvMatchesScalarEveryHeight) {
  const detail::KernelTable& scalar = detail::kernels_scalar();
  int checked = 0;
  for (const Level& lv : prepacked_levels()) {
    for (GgmlType t : kPrepackedTypes) {
      const detail::PrepackedKernel& pk = kernel_of(*lv.table, t).prepacked;
      if (pk.rows == 0) continue;
      // Both x86 levels decode over every layout they have (one-sequence engines repack).
      ASSERT_NE(pk.gemv, nullptr) << lv.name << " " << type_name(t) << " has no decode kernel";
      const bool kq = k_quant(t);
      for (int64_t n : kq ? std::vector<int64_t>{QK_K, QK_K * 2, 4864}
                          : std::vector<int64_t>{32, 32 * 5, 32 * 6, 4864}) {
        const size_t rs = row_size(t, n);
        auto w = random_codes(t, n, pk.rows, (uint32_t)n);
        auto xf = randn(n, (uint32_t)n + 1);
        const size_t xcb =
            kq ? (n / QK_K) * sizeof(BlockQ8_K) : (n / 32) * sizeof(detail::BlockQ8A);
        std::vector<uint8_t> xq(xcb);
        (kq ? scalar.quant_q8k : scalar.quant_q8a)(xf.data(), xq.data(), n);
        std::vector<uint8_t> store(pk.panel_bytes(n) + 64);
        void* panel = store.data() + (64 - (uintptr_t)store.data() % 64) % 64;
        for (int nr = 1; nr <= pk.rows; ++nr) {
          pk.pack(w.data(), rs, nr, n, panel);
          std::vector<float> got(pk.rows + 3, -7.0f), want(pk.rows + 3, -7.0f);
          pk.gemv(panel, n, xq.data(), got.data(), nr);
          detail::TileArgs ta{w.data(), rs, xq.data(), xcb, n, want.data(), 1, nr, 1};
          kernel_of(scalar, t).tile(ta);
          for (int r = 0; r < pk.rows + 3; ++r) {
            if (r >= nr) {
              ASSERT_EQ(got[r], -7.0f) << lv.name << " " << type_name(t) << " wrote row " << r;
            } else {
              ASSERT_NEAR(got[r], want[r], 1e-4f * (1.0f + std::fabs(want[r])))
                  << lv.name << " " << type_name(t) << " n=" << n << " nr=" << nr << " r=" << r;
            }
          }
        }
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no load-time decode kernel on this CPU/build";
}

// The 32-element types at their integer extremes: every code at its largest or smallest value
// (Q4_0 15 / 0, Q5_0 31 / 0, Q8_0 127 / -128) against activations of +-127 with the signs in
// patterns that match or oppose the codes' per element, per 2-element pair of a group and per
// group, so that each int16 lane of the AVX2 maddubs sums is driven to its bound (AVX2 Q5_0
// adds 8 groups' pair sums, up to 8 x 7874 before its per-lane offset, in wrapping int16). The
// decode kernel and the gemm (both passes) of every level against the scalar tile.
TEST(MatmulPrepacked, ExtremeCodesAndActivationsMatchScalar) {
  const detail::KernelTable& scalar = detail::kernels_scalar();
  // Sign patterns over the 32 elements of a block (true: +), by element index i.
  const std::vector<bool (*)(int)> patterns = {
      [](int) { return true; },         [](int) { return false; },
      [](int i) { return i % 4 < 2; },  [](int i) { return i % 4 >= 2; },
      [](int i) { return i % 2 == 0; }, [](int i) { return (i / 4) % 2 == 0; },
      [](int i) { return i < 16; },     [](int i) { return (i * 7) % 5 < 2; }};
  const int np = (int)patterns.size();
  const int64_t n = 32 * 6;
  int checked = 0;
  for (const Level& lv : prepacked_levels()) {
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0}) {
      const detail::PrepackedKernel& pk = kernel_of(*lv.table, t).prepacked;
      if (pk.rows == 0) continue;
      const size_t rs = row_size(t, n), bs = type_traits(t).type_size;
      // Row r: block b's codes high where pattern (r + b) is +, low elsewhere.
      std::vector<uint8_t> w(rs * pk.rows, 0);
      const uint16_t d = f32_to_fp16(0.01f);
      for (int r = 0; r < pk.rows; ++r)
        for (int64_t b = 0; b < n / 32; ++b) {
          uint8_t* blk = w.data() + r * rs + b * bs;
          std::memcpy(blk, &d, 2);
          for (int i = 0; i < 32; ++i) {
            const bool hi = patterns[(r + b) % np](i);
            if (t == GgmlType::Q8_0) {
              blk[2 + i] = hi ? 127 : 0x80;
            } else {
              uint8_t* qs = blk + (t == GgmlType::Q5_0 ? 6 : 2);
              if (hi) qs[i % 16] |= (uint8_t)(i < 16 ? 0x0F : 0xF0);
              if (hi && t == GgmlType::Q5_0) blk[2 + i / 8] |= (uint8_t)(1u << (i % 8));
            }
          }
        }
      // Column c: block b's activations +-1 (quantized to +-127) by pattern (c + 2b).
      const int nc = detail::kPackedMaxCols;
      std::vector<float> xf(n * nc);
      for (int c = 0; c < nc; ++c)
        for (int64_t i = 0; i < n; ++i)
          xf[c * n + i] = patterns[(c + 2 * (i / 32)) % np]((int)(i % 32)) ? 1.0f : -1.0f;
      const size_t xcb = (n / 32) * sizeof(detail::BlockQ8A);
      std::vector<uint8_t> xq(xcb * nc);
      for (int c = 0; c < nc; ++c) scalar.quant_q8a(xf.data() + c * n, xq.data() + c * xcb, n);
      std::vector<uint8_t> store(pk.panel_bytes(n) + 64);
      void* panel = store.data() + (64 - (uintptr_t)store.data() % 64) % 64;
      pk.pack(w.data(), rs, pk.rows, n, panel);
      std::vector<float> want(pk.rows * nc);
      detail::TileArgs ta{w.data(), rs, xq.data(), xcb, n, want.data(), pk.rows, pk.rows, nc};
      kernel_of(scalar, t).tile(ta);
      auto expect_rows = [&](const float* got, int c, const char* fn) {
        for (int r = 0; r < pk.rows; ++r) {
          const float e = want[c * pk.rows + r];
          EXPECT_NEAR(got[r], e, 1e-4f * (1.0f + std::fabs(e)))
              << lv.name << " " << type_name(t) << " " << fn << " column " << c << " row " << r;
        }
      };
      std::vector<float> got(pk.rows * nc);
      for (int c = 0; c < nc; ++c) {
        pk.gemv(panel, n, xq.data() + c * xcb, got.data(), pk.rows);
        expect_rows(got.data(), c, "gemv");
      }
      for (auto gemm : {pk.gemm, pk.gemm_stream}) {
        if (gemm == nullptr) continue;
        gemm(panel, n, xq.data(), xcb, nc, got.data(), pk.rows, pk.rows);
        for (int c = 0; c < nc; ++c) expect_rows(got.data() + c * pk.rows, c, "gemm");
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no load-time packed layout on this CPU/build";
}

// Every activation quantizer (scalar and each x86 level) writes BlockQ8A::sum, the per-lane
// sum16 (16 x the sums of elements 4g, 4g+1 and of 4g+2, 4g+3) and off8 (-8 x sum) of its own
// codes. The matmul tests cannot tell a swapped or misplaced sum16 on random data (the lanes
// never reach the int16 bound), and they quantize with the scalar quantizer, so an x86 one that
// left off8 unset would go unseen; here the first block is at +-127 with the two lanes' signs
// opposed.
TEST(MatmulPrepacked, Q8aQuantizersFillSum16AndOff8) {
  std::vector<const detail::KernelTable*> tables = {&detail::kernels_scalar()};
  for (const Level& lv : prepacked_levels()) tables.push_back(lv.table);
  const int64_t n = 32 * 7;
  auto xf = randn(n, 5);
  for (int i = 0; i < 32; ++i) xf[i] = i % 4 < 2 ? 1.0f : -1.0f;
  for (const detail::KernelTable* t : tables) {
    std::vector<detail::BlockQ8A> b(n / 32);
    t->quant_q8a(xf.data(), b.data(), n);
    EXPECT_EQ(b[0].sum16[0], 16 * 16 * 127) << t->name;
    for (const detail::BlockQ8A& blk : b) {
      int32_t s = 0, lane[2] = {0, 0};
      for (int i = 0; i < 32; ++i) {
        s += blk.qs[i];
        lane[(i / 2) % 2] += blk.qs[i];
      }
      EXPECT_EQ(blk.sum, s) << t->name;
      EXPECT_EQ(blk.sum16[0], 16 * lane[0]) << t->name;
      EXPECT_EQ(blk.sum16[1], 16 * lane[1]) << t->name;
      EXPECT_EQ(blk.off8, -8 * s) << t->name;
    }
  }
}

// Decode through matmul() over the load-time panels of every layout with a decode kernel: 1-3
// threads split the panels differently, yet every row must come out bit for bit the same, and
// match the scalar reference.
TEST(MatmulPrepacked, DecodeBitsDoNotDependOnThreadCount) {
  int checked = 0;
  for (const Level& lv : prepacked_levels()) {
    for (GgmlType t : kPrepackedTypes) {
      const detail::PrepackedKernel& pk = kernel_of(*lv.table, t).prepacked;
      if (pk.rows == 0 || pk.gemv == nullptr) continue;
      const int64_t n_in = 4864;
      const int64_t n_out = 700;
      auto w = random_codes(t, n_in, n_out, 41);
      PackedWeights pw(lv.simd);
      ASSERT_TRUE(pw.add(t, w.data(), n_in, n_out));
      auto x = randn(n_in, 42);
      std::vector<float> want(n_out);
      MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, 1, want.data(), n_out};
      Ctx scalar(1, SimdLevel::kScalar);
      matmul(scalar.ex, a);
      a.packed = pw.find(w.data());
      std::vector<float> first;
      for (int th = 1; th <= 3; ++th) {
        Ctx c(th, lv.simd);
        std::vector<float> got(n_out, -7.0f);
        a.y = got.data();
        matmul(c.ex, a);
        EXPECT_LE(nmse(got, want), 1e-9) << lv.name << " " << type_name(t) << " th=" << th;
        if (th == 1) first = got;
        for (int64_t r = 0; r < n_out; ++r)
          ASSERT_EQ(got[r], first[r])
              << lv.name << " " << type_name(t) << " th=" << th << " r=" << r;
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no load-time decode kernel on this CPU/build";
}

std::atomic<int> g_steals{0};
// WorkSplit claim hook: thread 1 sleeps after each claim of its own, so the others take the
// back of its share (matmul's dynamic split, work_split.h); steals are counted.
void lagging_worker(int ith, int64_t, int64_t, bool stolen) {
  if (stolen) g_steals.fetch_add(1, std::memory_order_relaxed);
  if (!stolen && ith == 1) std::this_thread::sleep_for(std::chrono::microseconds(300));
}

// The threads of a matmul split its panels / row tiles dynamically (a lagging thread is robbed
// of the back of its share): whatever the schedule, every row is computed by one thread with
// the same kernel and summation order, so the output is bit for bit the one-thread result.
// Decode (grouped gemv and the plain one), small batches, prefill chunks, on the load-time
// panels and on the GGUF layout (row tiles and per-call panels), under a lagging thread and
// with more threads than cores.
TEST(MatmulPrepacked, BitsDoNotDependOnTheSchedule) {
  WorkSplit::set_claim_hook(lagging_worker);
  int checked = 0;
  for (const Level& lv : prepacked_levels()) {
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
      if (kernel_of(*lv.table, t).prepacked.rows == 0) continue;
      const int64_t n_in = 1024, n_out = 1000;
      auto w = random_codes(t, n_in, n_out, 51);
      PackedWeights pw(lv.simd);
      ASSERT_TRUE(pw.add(t, w.data(), n_in, n_out));
      for (int64_t m : {1, 3, 40}) {
        auto x = randn(n_in * m, 52);
        for (const PackedWeight* pk : {pw.find(w.data()), (const PackedWeight*)nullptr}) {
          MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, m, nullptr, n_out};
          a.packed = pk;
          std::vector<float> one(n_out * m);
          a.y = one.data();
          Ctx c1(1, lv.simd);
          matmul(c1.ex, a);
          for (int th : {2, 3, 7}) {
            Ctx c(th, lv.simd);
            g_steals = 0;
            // Up to 3 tries for the steal (a descheduled caller may miss it), bits every time.
            for (int attempt = 0; attempt < 3 && (attempt == 0 || g_steals == 0); ++attempt) {
              std::vector<float> got(n_out * m, -7.0f);
              a.y = got.data();
              matmul(c.ex, a);
              for (int64_t i = 0; i < n_out * m; ++i)
                ASSERT_EQ(got[i], one[i])
                    << lv.name << " " << type_name(t) << " m=" << m << " packed=" << (pk != nullptr)
                    << " th=" << th << " i=" << i;
            }
            EXPECT_GT(g_steals.load(), 0) << lv.name << " " << type_name(t) << " m=" << m
                                          << " packed=" << (pk != nullptr) << " th=" << th;
          }
        }
      }
      ++checked;
    }
  }
  WorkSplit::set_claim_hook(nullptr);
  if (checked == 0) GTEST_SKIP() << "no load-time packed layout on this CPU/build";
}

// matmul() over PackedWeights: odd row counts (tails of a panel), widths from decode (1) to
// past two micro-kernel calls (17), several threads; the original bytes are poisoned after
// packing, so a kernel that still read them would fail.
TEST(MatmulPrepacked, MatmulUsesOnlyThePackedCopy) {
  int checked = 0;
  for (const Level& lv : prepacked_levels()) {
    for (GgmlType t : kPrepackedTypes) {
      if (kernel_of(*lv.table, t).prepacked.rows == 0) continue;
      const int64_t n_in = k_quant(t) ? QK_K * 2 : 96;
      for (int64_t n_out : {1, 7, 15, 16, 17, 33, 75}) {
        auto w = random_codes(t, n_in, n_out, (uint32_t)n_out);
        PackedWeights pw(lv.simd);
        ASSERT_TRUE(pw.add(t, w.data(), n_in, n_out));
        ASSERT_EQ(pw.bytes(), PackedWeights::packed_bytes(lv.simd, t, n_in, n_out));
        const PackedWeight* pk = pw.find(w.data());
        ASSERT_NE(pk, nullptr);
        const auto orig = w;
        for (int64_t m : {1, 2, 3, 5, 8, 9, 16, 17, 40}) {  // 17, 40: expand where there is one
          const int64_t ldx = n_in + 3, ldy = n_out + 2;
          auto x = randn(ldx * m, (uint32_t)m);
          std::vector<float> want(ldy * m, 0.0f);
          MatmulArgs a{t, orig.data(), n_in, n_out, x.data(), ldx, m, want.data(), ldy};
          Ctx scalar(1, SimdLevel::kScalar);
          matmul(scalar.ex, a);
          std::fill(w.begin(), w.end(), (uint8_t)0x5A);  // the packed copy must suffice
          a.w = w.data();
          a.packed = pk;
          for (int th = 1; th <= 3; ++th) {
            Ctx c(th, lv.simd);
            std::vector<float> got(ldy * m, 0.0f);
            a.y = got.data();
            matmul(c.ex, a);
            EXPECT_LE(nmse(got, want), 1e-9) << lv.name << " " << type_name(t) << " n_out=" << n_out
                                             << " m=" << m << " th=" << th;
          }
        }
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no load-time packed layout on this CPU/build";
}

// reserve(): copies are carved 64-byte aligned from one region, back to back; one that does not
// fit gets its own buffer; either way matmul() reads the same result as an unreserved copy.
TEST(MatmulPrepacked, ReservedRegionHoldsCopiesBackToBack) {
  int checked = 0;
  for (const Level& lv : prepacked_levels()) {
    const GgmlType t = GgmlType::Q4_0;  // the type with a layout at every x86 level
    const int64_t n_in = 128, n_out = 40, m = 1;
    const size_t one = PackedWeights::packed_bytes(lv.simd, t, n_in, n_out);
    ASSERT_GT(one, 0u);
    ASSERT_EQ(one % 64, 0u);
    std::vector<std::vector<uint8_t>> ws;
    for (uint32_t i = 0; i < 3; ++i) ws.push_back(random_codes(t, n_in, n_out, 40 + i));
    PackedWeights pw(lv.simd), plain(lv.simd);
    pw.reserve(2 * one);  // room for two: the third takes the fallback
    for (const auto& w : ws) {
      ASSERT_TRUE(pw.add(t, w.data(), n_in, n_out));
      ASSERT_TRUE(plain.add(t, w.data(), n_in, n_out));
    }
    const auto* p0 = static_cast<const uint8_t*>(pw.find(ws[0].data())->data);
    const auto* p1 = static_cast<const uint8_t*>(pw.find(ws[1].data())->data);
    EXPECT_EQ((uintptr_t)p0 % 64, 0u);
    EXPECT_EQ(p1, p0 + one) << lv.name;
    const auto* p2 = static_cast<const uint8_t*>(pw.find(ws[2].data())->data);
    EXPECT_TRUE(p2 < p0 || p2 >= p0 + 2 * one) << "the third copy must not overrun the region";
    EXPECT_EQ(pw.bytes(), 3 * one);
    auto x = randn(n_in * m, 41);
    for (const auto& w : ws) {
      std::vector<float> got(n_out), want(n_out);
      MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, m, got.data(), n_out};
      Ctx c(2, lv.simd);
      a.packed = pw.find(w.data());
      matmul(c.ex, a);
      a.packed = plain.find(w.data());
      a.y = want.data();
      matmul(c.ex, a);
      EXPECT_EQ(got, want) << lv.name;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no load-time packed layout on this CPU/build";
}

// Both x86 levels pack every quantized type at load, so no decode falls back to the row tiles
// (AVX-512 Q5_0 / Q6_K once did: slower than the same machine capped at AVX2); the AVX-512
// Q5_0 / Q6_K layouts expand for wide chunks into the per-call panels of the same height.
TEST(MatmulPrepacked, EveryX86LevelPacksEveryQuantType) {
  const auto levels = prepacked_levels();
  if (levels.empty()) GTEST_SKIP() << "no x86 SIMD level";
  for (const Level& lv : levels)
    for (GgmlType t : kPrepackedTypes) {
      const detail::PrepackedKernel& pk = kernel_of(*lv.table, t).prepacked;
      EXPECT_GT(pk.rows, 0) << lv.name << " " << type_name(t);
      EXPECT_NE(pk.gemv, nullptr) << lv.name << " " << type_name(t);
      EXPECT_GT(PackedWeights::packed_bytes(lv.simd, t, QK_K * 2, 48), 0u)
          << lv.name << " " << type_name(t);
    }
  for (const Level& lv : levels) {
    if (lv.simd != SimdLevel::kAvx512Vnni) continue;
    for (GgmlType t : {GgmlType::Q5_0, GgmlType::Q6_K}) {
      EXPECT_EQ(kernel_of(*lv.table, t).prepacked.rows, 16) << type_name(t);
      EXPECT_NE(kernel_of(*lv.table, t).prepacked.expand, nullptr) << type_name(t);
    }
  }
}

// decodes_packed(): true at a level exactly when each of its load-time layouts has a decode
// kernel; the AVX-512 VNNI and AVX2 tables (six layouts each) have one for each.
TEST(MatmulPrepacked, DecodesPackedNamesLevelsWithDecodeKernels) {
  for (const Level& lv : prepacked_levels()) {
    bool all = true;
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K,
                       GgmlType::Q5_K, GgmlType::Q6_K}) {
      const detail::PrepackedKernel& pk = detail::type_kernel(*lv.table, t)->prepacked;
      if (pk.rows > 0 && pk.gemv == nullptr) all = false;
    }
    EXPECT_EQ(PackedWeights::decodes_packed(lv.simd), all) << lv.name;
    EXPECT_TRUE(PackedWeights::decodes_packed(lv.simd)) << lv.name;
  }
}

// Every x86 decode kernel (PrepackedKernel::gemv) prefetches in the object code, not only in
// the source: GCC 12 once removed every prefetch of the AVX2 Q4_0 and Q5_0 kernels (a
// prefetch under `else if (k == 0)` in a lambda), and their decode steps ran 20-27% slower
// with nothing failing (docs/BENCHMARKS.md, branch q40). Reads this test's own disassembly
// (objdump, from binutils, beside the compiler); skipped where objdump or the symbols are
// missing.
TEST(MatmulPrepacked, EveryX86DecodeKernelPrefetches) {
#if defined(__x86_64__) && defined(__linux__)
  // The path, not /proc/self/exe: in the objdump process that would name objdump.
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) GTEST_SKIP() << "readlink /proc/self/exe failed";
  self[len] = 0;
  const std::string cmd =
      "objdump -d --no-show-raw-insn -C '" + std::string(self) + "' 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) GTEST_SKIP() << "popen failed";
  // The decode kernels share PrepackedKernel::gemv's signature and are named gemv*.
  const std::string kSignature = "(void const*, long, unsigned char const*, float*, int)>:";
  std::map<std::string, int> prefetches;  // kernel -> prefetch instructions in its body
  std::string current;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    const std::string l(line);
    const size_t open = l.find(" <");
    if (open != std::string::npos && l.find(kSignature) != std::string::npos) {
      const std::string name = l.substr(open + 2, l.rfind(">:") - open - 2);
      current = name.find("::gemv") != std::string::npos ? name : std::string();
      if (!current.empty()) prefetches[current] += 0;
    } else if (l.find(">:") != std::string::npos && l.find(" <") != std::string::npos) {
      current.clear();  // another function
    } else if (!current.empty() && l.find("\tprefetch") != std::string::npos) {
      ++prefetches[current];
    }
  }
  pclose(pipe);
  if (prefetches.empty()) GTEST_SKIP() << "no decode kernel found in objdump's output";
  for (const auto& [name, count] : prefetches) EXPECT_GT(count, 0) << name;
#else
  GTEST_SKIP() << "x86 Linux only";
#endif
}

// A copy packed for another level's layout is ignored (the original bytes are read), and
// types without a layout are not stored.
TEST(MatmulPrepacked, OtherLayoutOrTypeFallsBackToOriginal) {
  const auto lv = prepacked_levels();
  if (lv.empty()) GTEST_SKIP() << "no SIMD level";
  const Level& low = lv.back();  // avx2 when present
  const int64_t n_in = 64, n_out = 20, m = 3;
  auto w = random_codes(GgmlType::Q4_0, n_in, n_out, 3);
  PackedWeights pw(low.simd);
  ASSERT_TRUE(pw.add(GgmlType::Q4_0, w.data(), n_in, n_out));
  auto wk = random_codes(GgmlType::F16, n_in, n_out, 4);
  EXPECT_FALSE(pw.add(GgmlType::F16, wk.data(), n_in, n_out));
  EXPECT_EQ(pw.find(wk.data()), nullptr);
  EXPECT_EQ(pw.count(), 1u);
  auto x = randn(n_in * m, 5);
  std::vector<float> want(n_out * m), got(n_out * m);
  MatmulArgs a{GgmlType::Q4_0, w.data(), n_in, n_out, x.data(), n_in, m, want.data(), n_out};
  Ctx scalar(1, SimdLevel::kScalar);
  a.packed = pw.find(w.data());
  matmul(scalar.ex, a);  // scalar table: no layout, reads w
  for (const Level& l : lv) {
    Ctx c(2, l.simd);
    a.y = got.data();
    matmul(c.ex, a);
    EXPECT_LE(nmse(got, want), 1e-9) << l.name;
  }
}

// add_rows over two parts (a layer's gate and up rows) writes the same bytes as add() over their
// concatenation, whether the parts end on a panel boundary or a panel straddles them (staged
// rows); `done` reports ranges inside the parts that cover every part byte.
TEST(MatmulPrepacked, AddRowsEqualsAddOfTheConcatenation) {
  int checked = 0;
  for (const Level& lv : prepacked_levels()) {
    for (GgmlType t : kPrepackedTypes) {
      const int64_t n_in = k_quant(t) ? QK_K * 2 : 96;
      const size_t rs = row_size(t, n_in);
      for (const auto& [n0, n1] :
           {std::pair<int64_t, int64_t>{16, 16}, {7, 9}, {17, 33}, {40, 24}, {1, 1}}) {
        auto a = random_codes(t, n_in, n0, (uint32_t)n0), b = random_codes(t, n_in, n1, 99);
        std::vector<uint8_t> cat(a);
        cat.insert(cat.end(), b.begin(), b.end());
        PackedWeights whole(lv.simd), parts(lv.simd);
        ASSERT_TRUE(whole.add(t, cat.data(), n_in, n0 + n1));
        std::vector<uint8_t> covered_a(a.size(), 0), covered_b(b.size(), 0);
        int outside = 0;
        const auto done = [&](const void* p, size_t n) {
          const auto* q = static_cast<const uint8_t*>(p);
          for (auto* v : {&a, &b}) {
            auto& cov = v == &a ? covered_a : covered_b;
            if (q >= v->data() && q + n <= v->data() + v->size()) {
              std::fill_n(cov.begin() + (q - v->data()), n, uint8_t{1});
              return;
            }
          }
          ++outside;
        };
        const PackedWeights::RowsPart rp[2] = {{a.data(), n0}, {b.data(), n1}};
        const int key = 0;  // any address: the fused weight has no bytes of its own
        ASSERT_TRUE(parts.add_rows(t, &key, rp, n_in, done));
        const PackedWeight* pw = whole.find(cat.data());
        const PackedWeight* pr = parts.find(&key);
        ASSERT_TRUE(pw && pr);
        EXPECT_EQ(pr->n_out, n0 + n1);
        ASSERT_EQ(pr->bytes, pw->bytes);
        EXPECT_EQ(std::memcmp(pr->data, pw->data, pw->bytes), 0)
            << lv.name << " " << type_name(t) << " parts " << n0 << "+" << n1;
        EXPECT_EQ(outside, 0);
        EXPECT_EQ(std::count(covered_a.begin(), covered_a.end(), 0), 0);
        EXPECT_EQ(std::count(covered_b.begin(), covered_b.end(), 0), 0);
        EXPECT_EQ(a.size(), rs * n0);
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no load-time packed layout on this CPU/build";
}

}  // namespace
}  // namespace minfer::cpu
