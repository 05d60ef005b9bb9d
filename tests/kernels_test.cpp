// minfer-test-libs: minfer_backend_cpu minfer_alloc minfer_graph minfer_common
// Fast CPU kernels against the reference kernels (and the reference dequantizer against
// common/quant), on awkward sizes, every weight type, every SIMD level and 1..3 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "common/error.h"
#include "common/fp16.h"
#include "common/quant.h"
#include "cpu_test_util.h"
#include "numeric_test_util.h"

namespace minfer::cpu {
namespace {

using test::nmse;
using test::randn;

// Random but well-formed weight bytes: random codes, small positive f16 scales.
std::vector<uint8_t> random_weights(GgmlType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  const size_t rs = row_size(t, n_in);
  std::vector<uint8_t> w(rs * n_out);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
    for (int64_t i = 0; i < n_in * n_out; ++i) {
      const float f = normal(rng);
      if (t == GgmlType::F32) std::memcpy(&w[i * 4], &f, 4);
      const uint16_t h = t == GgmlType::F16 ? f32_to_fp16(f) : f32_to_bf16(f);
      if (t != GgmlType::F32) std::memcpy(&w[i * 2], &h, 2);
    }
    return w;
  }
  for (auto& b : w) b = (uint8_t)byte(rng);
  const auto& tr = type_traits(t);
  const int64_t nb = n_in / tr.block_size;
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = w.data() + r * rs + b * tr.type_size;
      const uint16_t d = f32_to_fp16(scale(rng)), dmin = f32_to_fp16(scale(rng));
      if (t == GgmlType::Q6_K) {
        std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
      } else {
        std::memcpy(blk, &d, 2);
        if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) std::memcpy(blk + 2, &dmin, 2);
      }
    }
  }
  return w;
}

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                 GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
const SimdLevel kLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kBest};

using Ctx = test::CpuCtx;

TEST(RefDequant, MatchesCommonQuant) {
  for (GgmlType t : kWeightTypes) {
    const int64_t n = 512;
    auto w = random_weights(t, n, 3, 7);
    std::vector<float> a(n * 3), b(n * 3);
    ref::dequantize_row(t, w.data(), a.data(), n * 3);
    dequantize_row(t, w.data(), b.data(), n * 3);
    for (int64_t i = 0; i < n * 3; ++i) ASSERT_EQ(a[i], b[i]) << type_name(t) << " at " << i;
  }
}

// Realistic weights: gaussian rows through common's reference quantizer where it has one
// (random codes otherwise).
std::vector<uint8_t> quantized_weights(GgmlType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  if (!can_quantize(t)) return random_weights(t, n_in, n_out, seed);
  auto wf = randn(n_in * n_out, seed, 0.02f);
  std::vector<uint8_t> w(row_size(t, n_in) * n_out);
  for (int64_t r = 0; r < n_out; ++r)
    quantize_row(t, wf.data() + r * n_in, w.data() + r * row_size(t, n_in), n_in);
  return w;
}

TEST(Matmul, AllTypesAllLevelsMatchReference) {
  for (GgmlType t : kWeightTypes) {
    const int64_t bs = type_traits(t).block_size;
    const int64_t n_in = bs == 1 ? 77 : (bs == 32 ? 352 : 512);
    for (int64_t n_out : {7, 29}) {
      for (int64_t m : {1, 3, 9, 70}) {
        auto w = quantized_weights(t, n_in, n_out, (uint32_t)(n_out * 31 + m));
        const int64_t ldx = n_in + 3;  // strided columns
        auto x = randn(ldx * m, (uint32_t)m);
        std::vector<float> want(n_out * m);
        MatmulArgs a{t, w.data(), n_in, n_out, x.data(), ldx, m, want.data(), n_out};
        ref::matmul(a);
        for (SimdLevel lvl : kLevels) {
          for (int th = 1; th <= 3; ++th) {
            Ctx c(th, lvl);
            std::vector<float> got(n_out * m, NAN);
            a.y = got.data();
            matmul(c.ex, a);
            EXPECT_LE(nmse(got, want), 5e-4) << type_name(t) << " n_out=" << n_out << " m=" << m
                                             << " level=" << (int)lvl << " threads=" << th;
          }
        }
      }
    }
  }
}

// Decode (m == 1) large enough to run threaded: every thread quantizes its own copy of the
// column (no barrier) and the GEMV tiles (two blocks per step for Q4_0 / Q5_0, with an odd
// block count here) split the rows.
TEST(Matmul, ThreadedGemvMatchesReference) {
  for (GgmlType t : kWeightTypes) {
    const int64_t bs = type_traits(t).block_size;
    const int64_t n_in = bs == 1 ? 77 : (bs == 32 ? 352 : 512), n_out = 301;
    auto w = quantized_weights(t, n_in, n_out, 5);
    auto x = randn(n_in, 6);
    std::vector<float> want(n_out);
    MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, 1, want.data(), n_out};
    ref::matmul(a);
    for (SimdLevel lvl : kLevels) {
      for (int th = 1; th <= 3; ++th) {
        Ctx c(th, lvl);
        for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the grown scratch
          std::vector<float> got(n_out, NAN);
          a.y = got.data();
          matmul(c.ex, a);
          EXPECT_LE(nmse(got, want), 5e-4)
              << type_name(t) << " level=" << (int)lvl << " threads=" << th << " rep=" << rep;
        }
      }
    }
  }
}

// Random codes exercise every bit pattern (e.g. Q8_0's -128, 6-bit scales at 63); the SIMD
// tiles must agree with the scalar integer kernels up to float summation order.
TEST(Matmul, SimdTilesAgreeWithScalarOnRandomCodes) {
  for (GgmlType t : kWeightTypes) {
    const int64_t bs = type_traits(t).block_size;
    const int64_t n_in = bs == 1 ? 45 : bs * 3, n_out = 11, m = 10;
    auto w = random_weights(t, n_in, n_out, 17);
    auto x = randn(n_in * m, 18);
    std::vector<float> want(n_out * m), got(n_out * m);
    MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, m, want.data(), n_out};
    Ctx scalar(1, SimdLevel::kScalar);
    matmul(scalar.ex, a);
    for (SimdLevel lvl : {SimdLevel::kAvx2, SimdLevel::kBest}) {
      Ctx c(2, lvl);
      a.y = got.data();
      matmul(c.ex, a);
      a.y = want.data();
      EXPECT_LE(nmse(got, want), 1e-9) << type_name(t) << " level=" << (int)lvl;
    }
  }
}

TEST(Matmul, QuantizedWeightsFromReferenceQuantizer) {
  // Real quantized data (not random codes) through common::quantize_row.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::Q5_0}) {
    if (!can_quantize(t)) continue;
    const int64_t n_in = 768, n_out = 37, m = 19;
    auto wf = randn(n_in * n_out, 3, 0.02f);
    std::vector<uint8_t> w(row_size(t, n_in) * n_out);
    for (int64_t r = 0; r < n_out; ++r)
      quantize_row(t, wf.data() + r * n_in, w.data() + r * row_size(t, n_in), n_in);
    auto x = randn(n_in * m, 4);
    std::vector<float> want(n_out * m), got(n_out * m);
    MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, m, want.data(), n_out};
    ref::matmul(a);
    Ctx c(2);
    a.y = got.data();
    matmul(c.ex, a);
    EXPECT_LE(nmse(got, want), 5e-4) << type_name(t);
  }
}

TEST(Matmul, ArenaStopsGrowingAfterWarmup) {
  Ctx c(2);
  auto w = random_weights(GgmlType::Q8_0, 256, 16, 1);
  auto x = randn(256 * 8, 2);
  std::vector<float> y(16 * 8);
  MatmulArgs a{GgmlType::Q8_0, w.data(), 256, 16, x.data(), 256, 8, y.data(), 16};
  matmul(c.ex, a);
  const size_t grows = c.arena.grow_count();
  for (int i = 0; i < 10; ++i) matmul(c.ex, a);
  EXPECT_EQ(c.arena.grow_count(), grows);
}

// A get_rows case for one weight type: a small random table, ids with a repeat, and the
// reference rows they select.
struct GetRowsCase {
  int64_t ne0{}, n_rows{};
  std::vector<uint8_t> w{};
  std::vector<int32_t> ids{};
  std::vector<float> want{};
};

GetRowsCase get_rows_case(GgmlType t, uint32_t seed) {
  const int64_t bs = type_traits(t).block_size;
  GetRowsCase k;
  k.ne0 = bs == 1 ? 33 : bs * 2;
  k.n_rows = 11;
  k.w = random_weights(t, k.ne0, k.n_rows, seed);
  k.ids = {3, 0, 10, 3, 7};
  k.want.resize(k.ne0 * k.ids.size());
  ref::get_rows(t, k.w.data(), k.ne0, k.n_rows, k.ids.data(), k.ids.size(), k.want.data());
  return k;
}

TEST(GetRows, AllTypesMatchReference) {
  for (GgmlType t : kWeightTypes) {
    const GetRowsCase k = get_rows_case(t, 5);
    std::vector<float> got(k.want.size());
    for (int th = 1; th <= 3; ++th) {
      Ctx c(th);
      get_rows(c.ex, t, k.w.data(), k.ne0, k.n_rows, k.ids.data(), k.ids.size(), got.data());
      EXPECT_EQ(got, k.want) << type_name(t);
    }
  }
}

// The fetched-row variant (a tied embedding read by pread): the same values, every row read
// once through the callback at its own address, nothing read in place.
TEST(GetRows, ReadThroughCallbackMatchesReference) {
  for (GgmlType t : kWeightTypes) {
    const GetRowsCase k = get_rows_case(t, 6);
    std::vector<float> got(k.want.size());
    const size_t rs = row_size(t, k.ne0);
    std::vector<size_t> offsets;
    const RowReadFn read = [&](const void* src, void* dst, size_t n) {
      EXPECT_EQ(n, rs);
      offsets.push_back(static_cast<size_t>(static_cast<const uint8_t*>(src) - k.w.data()));
      std::memcpy(dst, src, n);
    };
    std::vector<uint8_t> scratch;
    get_rows_read(t, k.w.data(), k.ne0, k.n_rows, k.ids.data(), k.ids.size(), got.data(), read,
                  scratch);
    EXPECT_EQ(got, k.want) << type_name(t);
    ASSERT_EQ(offsets.size(), k.ids.size());
    for (size_t i = 0; i < k.ids.size(); ++i) EXPECT_EQ(offsets[i], rs * size_t(k.ids[i]));
    const int32_t bad = static_cast<int32_t>(k.n_rows);
    EXPECT_THROW(get_rows_read(t, k.w.data(), k.ne0, k.n_rows, &bad, 1, got.data(), read, scratch),
                 Error);
  }
}

TEST(GetRows, BadIdThrows) {
  Ctx c(1);
  std::vector<float> table(4 * 3), out(4);
  const int32_t id = 3;
  EXPECT_THROW(get_rows(c.ex, GgmlType::F32, table.data(), 4, 3, &id, 1, out.data()), Error);
}

TEST(RowOps, RmsNormAddMulSiluSwigluMatchReference) {
  for (SimdLevel lvl : kLevels) {
    for (int th = 1; th <= 3; ++th) {
      Ctx c(th, lvl);
      for (int64_t ne0 : {1, 7, 64, 899}) {
        const int64_t rows = 5, ldx = ne0 + 2;
        auto x = randn(ldx * rows, 1), w = randn(ne0, 2), b = randn(ne0 * rows, 3);
        std::vector<float> want(ne0 * rows), got(ne0 * rows);
        for (const float* wp : {(const float*)nullptr, (const float*)w.data()}) {
          ref::rms_norm(x.data(), ldx, wp, want.data(), ne0, rows, 1e-5f);
          rms_norm(c.ex, x.data(), ldx, wp, got.data(), ne0, rows, 1e-5f);
          EXPECT_LE(nmse(got, want), 1e-7) << "rms_norm ne0=" << ne0;
        }
        auto a = randn(ne0 * rows, 4);
        for (int64_t b_rows : {int64_t{1}, rows}) {
          ref::add(a.data(), b.data(), want.data(), ne0, rows, b_rows);
          add(c.ex, a.data(), b.data(), got.data(), ne0, rows, b_rows);
          EXPECT_LE(nmse(got, want), 1e-7);
          ref::mul(a.data(), b.data(), want.data(), ne0, rows, b_rows);
          mul(c.ex, a.data(), b.data(), got.data(), ne0, rows, b_rows);
          EXPECT_LE(nmse(got, want), 1e-7);
        }
      }
      const int64_t n = 40001;
      auto g = randn(n, 5, 4.0f), u = randn(n, 6);
      g[0] = -100.0f;
      g[1] = 100.0f;
      std::vector<float> want(n), got(n);
      ref::silu(g.data(), want.data(), n);
      silu(c.ex, g.data(), got.data(), n);
      EXPECT_LE(nmse(got, want), 1e-7);
      ref::swiglu(g.data(), u.data(), want.data(), n);
      swiglu(c.ex, g.data(), u.data(), got.data(), n);
      EXPECT_LE(nmse(got, want), 1e-7);
      // Gemma: GeGLU (tanh GELU; the fast kernels' sigmoid form against the textbook tanh
      // form in double), soft-capping (caps 30 and 0.5: mostly linear and mostly saturated)
      // and the scale.
      ref::geglu(g.data(), u.data(), want.data(), n);
      geglu(c.ex, g.data(), u.data(), got.data(), n);
      EXPECT_LE(nmse(got, want), 1e-7) << "geglu level " << int(lvl);
      for (float cap : {30.0f, 0.5f}) {
        ref::softcap(g.data(), want.data(), n, cap);
        softcap(c.ex, g.data(), got.data(), n, cap);
        EXPECT_LE(nmse(got, want), 1e-7) << "softcap " << cap << " level " << int(lvl);
      }
      ref::scale(g.data(), want.data(), n, 48.0f);
      scale(c.ex, g.data(), got.data(), n, 48.0f);
      EXPECT_EQ(got, want);
      silu(c.ex, g.data(), g.data(), n);  // in place
      ref::silu(got.data(), want.data(), 0);
    }
  }
}

// The fused gate/up form: rows of [gate | up] give, in their up halves, the same bits as the
// flat swiglu / geglu over separate gate and up arrays, in place and not, for row lengths with
// and without a vector tail and thread splits that cut rows (7 rows of 4864: two threads).
// The first halves keep (or receive) the gate values. A scalar tail can agree with the vector
// formula in all but a few percent of elements (AArch64's std::exp does), so thousands of short
// rows (3: all tail at 4 and 8 lanes; 13: 5 and 1 tail elements) make such a tail fail.
TEST(RowOps, GluHalvesMatchSeparateRowsBitForBit) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 3},    {7, 5},    {172, 9}, {4864, 7},
                                                {4861, 8}, {3, 2000}, {13, 600}};  // n, rows
  for (SimdLevel lvl : kLevels) {
    for (int th = 1; th <= 3; ++th) {
      Ctx c(th, lvl);
      for (const auto& [n, rows] : shapes) {
        auto x = randn(2 * n * rows, (uint32_t)(n + rows), 3.0f);
        std::vector<float> g(n * rows), u(n * rows);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < n; ++i) {
            g[r * n + i] = x[r * 2 * n + i];
            u[r * n + i] = x[r * 2 * n + n + i];
          }
        for (bool gelu : {false, true}) {
          std::vector<float> want(n * rows);
          (gelu ? geglu : swiglu)(c.ex, g.data(), u.data(), want.data(), n * rows);
          std::vector<float> out(2 * n * rows, -7.0f), inplace = x;
          (gelu ? geglu_halves : swiglu_halves)(c.ex, x.data(), out.data(), n, rows);
          (gelu ? geglu_halves : swiglu_halves)(c.ex, inplace.data(), inplace.data(), n, rows);
          for (const auto* y : {&out, &inplace}) {
            int bad = 0;
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t i = 0; i < n; ++i) {
                bad += std::memcmp(&(*y)[r * 2 * n + n + i], &want[r * n + i], 4) != 0;
                bad += (*y)[r * 2 * n + i] != g[r * n + i];
              }
            EXPECT_EQ(bad, 0) << "n " << n << " rows " << rows << " th " << th << " level "
                              << int(lvl) << (gelu ? " geglu" : " swiglu")
                              << (y == &out ? " out of place" : " in place");
          }
        }
      }
    }
  }
}

TEST(Rope, BothModesStridedAndInPlace) {
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox}) {
    for (int32_t n_rot : {16, 10}) {
      const int64_t hd = 16, nh = 3, nt = 7;
      RopeParams p{mode, n_rot, 10000.0f, 0.5f};
      const HeadLayout lx{hd, nh, nt, hd + 1, (hd + 1) * nh + 5};  // strided input
      const HeadLayout ly{hd, nh, nt, 0, 0};
      auto x = randn(lx.ts() * nt, 9);
      std::vector<int32_t> pos = {0, 1, 5, 100, 2047, 30000, 3};
      std::vector<float> want(hd * nh * nt), got(hd * nh * nt);
      ref::rope(x.data(), lx, want.data(), ly, pos.data(), p);
      for (int th = 1; th <= 3; ++th) {
        Ctx c(th);
        rope(c.ex, x.data(), lx, got.data(), ly, pos.data(), p);
        EXPECT_LE(nmse(got, want), 1e-7);
        // In place on the strided buffer.
        auto xi = x;
        rope(c.ex, xi.data(), lx, xi.data(), lx, pos.data(), p);
        for (int64_t t = 0; t < nt; ++t)
          for (int64_t h = 0; h < nh; ++h)
            for (int64_t i = 0; i < hd; ++i)
              EXPECT_NEAR(xi[t * lx.ts() + h * lx.hs() + i], want[(t * nh + h) * hd + i], 1e-5);
      }
    }
  }
}

// Scaled RoPE: Llama 3 frequency factors, linear and YaRN (the ramp across the middle pairs),
// fast against the reference for both modes, partial rotation, strided input and 1-3 threads.
TEST(Rope, ScaledVariantsMatchReference) {
  const std::vector<float> ff = {1.0f, 1.0f, 1.5f, 2.5f, 4.0f, 6.0f, 8.0f, 8.0f};  // n_rot 16
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox}) {
    for (int variant = 0; variant < 3; ++variant) {
      RopeParams p{mode, 16, 10000.0f, 1.0f};
      if (variant == 0) p.freq_factors = ff.data();
      if (variant == 1) p.freq_scale = 0.25f;
      if (variant == 2) {  // yarn as llama.cpp passes it for factor 4, orig ctx 512
        p.freq_scale = 0.25f;
        p.ext_factor = 1.0f;
        p.attn_factor = 0.9f;
        p.n_ctx_orig = 512;
        p.freq_factors = ff.data();
      }
      double dims[2];
      rope_yarn_corr_dims(p, dims);
      if (variant == 2) {  // the ramp must fall inside the rotated pairs to test anything
        EXPECT_GT(dims[1], dims[0]);
        EXPECT_LT(dims[1], 15.0);
      }
      const int64_t hd = 20, nh = 3, nt = 6;
      const HeadLayout lx{hd, nh, nt, hd + 3, (hd + 3) * nh + 1};
      const HeadLayout ly{hd, nh, nt, 0, 0};
      auto x = randn(lx.ts() * nt, 11);
      std::vector<int32_t> pos = {0, 1, 63, 1024, 4000, 30000};
      std::vector<float> want(hd * nh * nt), got(want.size());
      ref::rope(x.data(), lx, want.data(), ly, pos.data(), p);
      for (int th = 1; th <= 3; ++th) {
        Ctx c(th);
        rope(c.ex, x.data(), lx, got.data(), ly, pos.data(), p);
        EXPECT_LE(nmse(got, want), 1e-7) << "variant " << variant << " threads " << th;
      }
    }
  }
}

// Decode ropes one position per call, and the cos/sin table of a position is memoised per
// thread across calls (every layer of a step shares it): a hit must give the same bits as a
// fresh table, and any parameter change (or another position) must not hit.
TEST(Rope, MemoisedTableFollowsPositionAndParameters) {
  const int64_t hd = 16, nh = 2;
  const HeadLayout l{hd, nh, 1, 0, 0};
  auto x = randn(hd * nh, 12);
  std::vector<RopeParams> ps(6, RopeParams{RopeMode::Neox, 16, 10000.0f, 1.0f});
  ps[1].freq_base = 1000000.0f;
  ps[2].freq_scale = 0.5f;
  ps[3].ext_factor = 1.0f;
  ps[3].n_ctx_orig = 512;
  ps[4].attn_factor = 0.8f;
  ps[5].n_rot = 8;
  Ctx c(1);
  for (int32_t pos : {7, 7, 9}) {
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < ps.size(); ++i) {
        std::vector<float> want(hd * nh), got(want.size()), again(want.size());
        ref::rope(x.data(), l, want.data(), l, &pos, ps[i]);
        rope(c.ex, x.data(), l, got.data(), l, &pos, ps[i]);
        rope(c.ex, x.data(), l, again.data(), l, &pos, ps[i]);  // a memo hit
        EXPECT_LE(nmse(got, want), 1e-7) << "params " << i << " pos " << pos;
        EXPECT_EQ(again, got) << "params " << i << " pos " << pos;
      }
    }
  }
}

// The reference against closed forms: factors of 2 everywhere = linear scaling by 1/2; YaRN
// with ext_factor 0 = linear; YaRN whose ramp lies beyond every pair = pure extrapolation
// (unscaled angles) with magnitude attn_factor * (1 + 0.1 ln 4).
TEST(Rope, ReferenceScalingIdentities) {
  const int64_t hd = 8, nh = 2, nt = 3;
  const HeadLayout l{hd, nh, nt, 0, 0};
  auto x = randn(hd * nh * nt, 5);
  std::vector<int32_t> pos = {1, 77, 4000};
  std::vector<float> a(x.size()), b(x.size());
  const std::vector<float> twos(hd / 2, 2.0f);
  RopeParams pf{RopeMode::Normal, hd, 10000.0f, 1.0f};
  pf.freq_factors = twos.data();
  RopeParams pl{RopeMode::Normal, hd, 10000.0f, 0.5f};
  ref::rope(x.data(), l, a.data(), l, pos.data(), pf);
  ref::rope(x.data(), l, b.data(), l, pos.data(), pl);
  EXPECT_LE(nmse(a, b), 1e-12);

  RopeParams py{RopeMode::Neox, hd, 10000.0f, 0.25f};
  py.n_ctx_orig = 4096;
  RopeParams pl4{RopeMode::Neox, hd, 10000.0f, 0.25f};
  ref::rope(x.data(), l, a.data(), l, pos.data(), py);  // ext_factor 0
  ref::rope(x.data(), l, b.data(), l, pos.data(), pl4);
  EXPECT_LE(nmse(a, b), 1e-12);

  py.ext_factor = 1.0f;
  py.attn_factor = 0.8f;
  py.n_ctx_orig = 1 << 30;  // beta_slow's pair index far beyond n_rot: ramp 1 everywhere
  RopeParams plain{RopeMode::Neox, hd, 10000.0f, 1.0f};
  plain.attn_factor = 0.8f * (1.0f + 0.1f * std::log(4.0f));
  double dims[2];
  rope_yarn_corr_dims(py, dims);
  ASSERT_GE(dims[0], hd / 2 - 1.0);
  ref::rope(x.data(), l, a.data(), l, pos.data(), py);
  ref::rope(x.data(), l, b.data(), l, pos.data(), plain);
  EXPECT_LE(nmse(a, b), 1e-12);
  // and attn_factor really scales: the rotated values' norm grows by that factor.
  double na = 0, nx = 0;
  for (size_t i = 0; i < a.size(); ++i) na += double(a[i]) * a[i], nx += double(x[i]) * x[i];
  EXPECT_NEAR(std::sqrt(na / nx), plain.attn_factor, 1e-5);
}

TEST(QkvBiasRopeStore, ScaledRopeMatchesReference) {
  const int64_t hd = 8, nh = 4, nkv = 2, nt = 5, n_ctx = 4096;
  const int64_t width = (nh + 2 * nkv) * hd;
  auto qkv = randn(width * nt, 3), bias = randn(width, 4);
  std::vector<int32_t> pos = {0, 9, 700, 2048, 4000};
  const std::vector<float> ff = {1.0f, 2.0f, 3.0f, 8.0f};
  RopeParams rp{RopeMode::Normal, 8, 500000.0f, 0.125f};
  rp.ext_factor = 1.0f;
  rp.n_ctx_orig = 64;
  rp.freq_factors = ff.data();
  std::vector<float> kw(nkv * hd * n_ctx), vw(kw), kg(kw), vg(kw);
  std::vector<float> qw(hd * nh * nt), qg(qw.size());
  QkvRopeStoreArgs a{
      qkv.data(), width, bias.data(), nh,        nkv,   hd,        nt,
      pos.data(), rp,    kw.data(),   vw.data(), n_ctx, qw.data(), HeadLayout{hd, nh, nt, 0, 0}};
  ref::qkv_bias_rope_store(a);
  Ctx c(2);
  a.k_region = kg.data();
  a.v_region = vg.data();
  a.q_out = qg.data();
  qkv_bias_rope_store(c.ex, a);
  EXPECT_LE(nmse(qg, qw), 1e-7);
  EXPECT_LE(nmse(kg, kw), 1e-7);
}

struct AttnCase {
  int64_t hd, nh, nkv, n_tok, first_pos, n_ctx;
};

TEST(Attention, MatchesNaiveSoftmaxWithGqa) {
  const AttnCase cases[] = {{8, 8, 4, 1, 0, 16},   {16, 4, 4, 5, 3, 32},
                            {8, 8, 4, 77, 0, 100}, {64, 14, 2, 3, 150, 256},
                            {13, 6, 2, 70, 0, 80}, {64, 4, 1, 1, 199, 200},
                            {8, 2, 1, 130, 5, 140}};
  for (const auto& cs : cases) {
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    auto k = randn(n_kv_embd * cs.n_ctx, 1), v = randn(n_kv_embd * cs.n_ctx, 2);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, cs.hd * cs.nh + 3};
    auto q = randn(lq.ts() * cs.n_tok, 3, 2.0f);
    std::vector<int32_t> pos(cs.n_tok);
    for (int64_t t = 0; t < cs.n_tok; ++t) pos[t] = (int32_t)(cs.first_pos + t);
    std::vector<float> want(cs.hd * cs.nh * cs.n_tok), got(want.size());
    AttentionArgs a{q.data(),        lq,         k.data(),
                    v.data(),        n_kv_embd,  cs.n_ctx,
                    (int32_t)cs.nkv, pos.data(), 1.0f / std::sqrt((float)cs.hd),
                    want.data()};
    ref::attention(a);
    for (SimdLevel lvl : kLevels) {
      for (int th = 1; th <= 3; ++th) {
        Ctx c(th, lvl);
        a.out = got.data();
        attention(c.ex, a);
        EXPECT_LE(nmse(got, want), 1e-7) << "hd=" << cs.hd << " n_tok=" << cs.n_tok;
        a.out = want.data();
      }
    }
  }
}

TEST(Attention, PositionOutsideContextThrows) {
  Ctx c(2);
  std::vector<float> q(8), k(8 * 4), v(8 * 4), out(8);
  const int32_t pos = 4;
  AttentionArgs a{q.data(), {8, 1, 1, 0, 0}, k.data(), v.data(), 8, 4, 1, &pos, 1.0f, out.data()};
  EXPECT_THROW(attention(c.ex, a), Error);
}

TEST(KvStore, WritesRowsAndRejectsOverflow) {
  Ctx c(3);
  const int64_t e = 6, n_ctx = 10, nt = 3;
  auto k = randn(e * nt, 1), v = randn(e * nt, 2);
  std::vector<float> kr(e * n_ctx, 0.0f), vr(e * n_ctx, 0.0f), kw(kr), vw(vr);
  std::vector<int32_t> pos = {4, 5, 9};
  kv_store(c.ex, k.data(), e, v.data(), e, e, nt, pos.data(), kr.data(), vr.data(), n_ctx);
  ref::kv_store(k.data(), e, v.data(), e, e, nt, pos.data(), kw.data(), vw.data(), n_ctx);
  EXPECT_EQ(kr, kw);
  EXPECT_EQ(vr, vw);
  std::vector<int32_t> bad = {8, 10, 2};
  auto before = kr;
  EXPECT_THROW(
      kv_store(c.ex, k.data(), e, v.data(), e, e, nt, bad.data(), kr.data(), vr.data(), n_ctx),
      Error);
  EXPECT_EQ(kr, before);  // nothing written
}

TEST(QkvBiasRopeStore, MatchesReferenceInPlaceAndNot) {
  const int64_t hd = 8, nh = 4, nkv = 2, nt = 5, n_ctx = 16;
  const int64_t width = (nh + 2 * nkv) * hd;
  auto qkv = randn(width * nt, 1), bias = randn(width, 2);
  std::vector<int32_t> pos = {3, 4, 5, 6, 7};
  RopeParams rp{RopeMode::Neox, 8, 1e6f, 1.0f};
  std::vector<float> kw(nkv * hd * n_ctx), vw(kw), kg(kw), vg(kw);
  std::vector<float> qw(hd * nh * nt), qg(qw.size());
  QkvRopeStoreArgs a{
      qkv.data(), width, bias.data(), nh,        nkv,   hd,        nt,
      pos.data(), rp,    kw.data(),   vw.data(), n_ctx, qw.data(), HeadLayout{hd, nh, nt, 0, 0}};
  auto qkv_copy = qkv;
  ref::qkv_bias_rope_store(a);
  Ctx c(2);
  a.k_region = kg.data();
  a.v_region = vg.data();
  a.q_out = qg.data();
  qkv_bias_rope_store(c.ex, a);
  EXPECT_LE(nmse(qg, qw), 1e-7);
  EXPECT_LE(nmse(kg, kw), 1e-7);
  EXPECT_LE(nmse(vg, vw), 1e-7);
  // In place: q written over the q part of each qkv row.
  a.q_out = qkv_copy.data();
  a.qkv = qkv_copy.data();
  a.lq_out = HeadLayout{hd, nh, nt, hd, width};
  qkv_bias_rope_store(c.ex, a);
  for (int64_t t = 0; t < nt; ++t)
    for (int64_t i = 0; i < nh * hd; ++i)
      EXPECT_NEAR(qkv_copy[t * width + i], qw[t * nh * hd + i], 1e-5);
}

}  // namespace
}  // namespace minfer::cpu
