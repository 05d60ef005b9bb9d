// minfer-test-libs: minfer_backend_cpu minfer_alloc minfer_graph minfer_common
// Numerics against ggml's definitions, sharper than the fast-vs-reference bounds elsewhere:
//  * block decoding of every quantized weight type against ggml's own dequantizer (a fixture
//    written by llama.cpp's gguf-py, tests/data/make_ggml_dequant_blocks.py), so a misread
//    scale/min packing or high-bit plane cannot hide behind our own reading of the format;
//  * the fast integer-dot matmul (every SIMD level, GEMV, register tiles, packed panels) with
//    activations that 8-bit quantization represents exactly: the result must then equal the
//    double-precision product with the dequantized weights up to float rounding (NMSE 1e-9,
//    where kernels_test's 5e-4 bound for arbitrary activations would hide e.g. one wrong
//    sub-block scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "common/fp16.h"
#include "common/quant.h"

namespace minfer::cpu {
namespace {

struct FixtureEntry {
  GgmlType type;
  std::vector<uint8_t> bytes;
  std::vector<float> want;
};

std::vector<FixtureEntry> load_fixture() {
  const std::string path = std::string(MINFER_TEST_DATA_DIR) + "/ggml_dequant_blocks.bin";
  FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << "missing " << path;
  std::vector<FixtureEntry> out;
  if (f == nullptr) return out;
  auto read = [&](void* p, size_t n) { EXPECT_EQ(std::fread(p, 1, n, f), n) << path; };
  char magic[4];
  uint32_t count = 0;
  read(magic, 4);
  read(&count, 4);
  EXPECT_EQ(std::string(magic, 4), "MFXQ");
  for (uint32_t i = 0; i < count && !::testing::Test::HasFailure(); ++i) {
    uint32_t hdr[3];
    read(hdr, sizeof hdr);
    FixtureEntry e;
    e.type = static_cast<GgmlType>(hdr[0]);
    e.bytes.resize(hdr[2]);
    e.want.resize(hdr[1]);
    read(e.bytes.data(), e.bytes.size());
    read(e.want.data(), e.want.size() * sizeof(float));
    out.push_back(std::move(e));
  }
  std::fclose(f);
  return out;
}

TEST(GgmlBlocks, FixtureCoversEveryQuantizedWeightType) {
  std::vector<GgmlType> seen;
  for (const auto& e : load_fixture()) {
    seen.push_back(e.type);
    EXPECT_EQ(row_size(e.type, static_cast<int64_t>(e.want.size())), e.bytes.size());
  }
  EXPECT_EQ(seen, (std::vector<GgmlType>{GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0,
                                         GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}));
}

// Same float operations in the same order as ggml, so equal up to (at most) a rounding step.
void expect_matches_ggml(const FixtureEntry& e, const std::vector<float>& got, const char* who) {
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = 1e-6f * std::fabs(e.want[i]);
    ASSERT_NEAR(got[i], e.want[i], tol) << who << " " << type_name(e.type) << " element " << i
                                        << " (block " << i / type_traits(e.type).block_size
                                        << ", offset " << i % type_traits(e.type).block_size << ")";
  }
}

TEST(GgmlBlocks, ReferenceDequantizersMatchGgml) {
  for (const auto& e : load_fixture()) {
    const int64_t n = static_cast<int64_t>(e.want.size());
    std::vector<float> a(n, NAN), b(n, NAN);
    dequantize_row(e.type, e.bytes.data(), a.data(), n);
    ref::dequantize_row(e.type, e.bytes.data(), b.data(), n);
    expect_matches_ggml(e, a, "common::dequantize_row");
    expect_matches_ggml(e, b, "cpu::ref::dequantize_row");
  }
}

TEST(GgmlBlocks, GetRowsMatchesGgml) {
  for (const auto& e : load_fixture()) {
    const int64_t ne0 = type_traits(e.type).block_size;  // one block per row
    const int64_t rows = static_cast<int64_t>(e.want.size()) / ne0;
    std::vector<int32_t> ids;
    for (int32_t r = static_cast<int32_t>(rows) - 1; r >= 0; --r) ids.push_back(r);
    ThreadPool pool(2);
    Arena arena;
    Exec ex{&pool, &arena, SimdLevel::kBest};
    std::vector<float> got(e.want.size(), NAN);
    get_rows(ex, e.type, e.bytes.data(), ne0, rows, ids.data(), rows, got.data());
    std::vector<float> back(got.size());  // undo the reversal
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(&back[ids[i] * ne0], &got[i * ne0], ne0 * sizeof(float));
    expect_matches_ggml(e, back, "get_rows");
  }
}

// Random codes in every byte, then finite fp16 scales of either sign where the format has them.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  const auto& tr = type_traits(t);
  std::vector<uint8_t> w(row_size(t, n_in) * n_out);
  std::mt19937 rng(seed);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(1e-3f, 2e-2f);
  auto half = [&] { return f32_to_fp16((rng() & 1 ? -1.0f : 1.0f) * mag(rng)); };
  for (size_t o = 0; o < w.size(); o += tr.type_size) {
    uint16_t d = half(), dmin = half();
    if (t == GgmlType::Q6_K) {
      std::memcpy(&w[o + offsetof(BlockQ6_K, d)], &d, 2);
    } else {
      std::memcpy(&w[o], &d, 2);
      if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) std::memcpy(&w[o + 2], &dmin, 2);
    }
  }
  return w;
}

// Values k/128 (|k| <= 127) with +-127/128 in every 32-block: the 8-bit activation blocks
// (32- and 256-element) then have scale 1/128 and hold exactly k.
std::vector<float> exact_activations(int64_t n, int64_t m, int64_t ldx, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> k(-127, 127);
  std::vector<float> x(ldx * m, 1e30f);  // padding must not be read
  for (int64_t c = 0; c < m; ++c) {
    for (int64_t i = 0; i < n; ++i) x[c * ldx + i] = k(rng) / 128.0f;
    for (int64_t b = 0; b < n; b += 32)
      x[c * ldx + b + rng() % 32] = (rng() & 1 ? 127 : -127) / 128.0f;
  }
  return x;
}

TEST(ExactActivations, FastMatmulEqualsDoubleProductOfDequantizedWeights) {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0,
                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
  const int64_t n_in = 768, n_out = 37;  // 3 super-blocks; rows not a multiple of any tile
  for (GgmlType t : types) {
    const auto w = random_blocks(t, n_in, n_out, 11u + static_cast<uint32_t>(t));
    std::vector<float> wr(n_out * n_in);
    for (int64_t o = 0; o < n_out; ++o)
      ref::dequantize_row(t, w.data() + o * row_size(t, n_in), &wr[o * n_in], n_in);
    for (int64_t m : {1, 3, 8, 17, 70}) {  // GEMV, register tiles, packed panels (m >= 8)
      const int64_t ldx = n_in + 5;
      const auto x = exact_activations(n_in, m, ldx, static_cast<uint32_t>(m));
      std::vector<double> want(n_out * m);
      for (int64_t c = 0; c < m; ++c)
        for (int64_t o = 0; o < n_out; ++o) {
          double s = 0;
          for (int64_t i = 0; i < n_in; ++i) s += double(wr[o * n_in + i]) * x[c * ldx + i];
          want[c * n_out + o] = s;
        }
      for (SimdLevel lvl : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kBest}) {
        for (int th : {1, 2}) {
          ThreadPool pool(th);
          Arena arena;
          Exec ex{&pool, &arena, lvl};
          std::vector<float> got(n_out * m, NAN);
          matmul(ex, MatmulArgs{t, w.data(), n_in, n_out, x.data(), ldx, m, got.data(), n_out});
          double se = 0, sw = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            se += (got[i] - want[i]) * (got[i] - want[i]);
            sw += want[i] * want[i];
          }
          EXPECT_LE(se / sw, 1e-9)
              << type_name(t) << " m=" << m << " level=" << int(lvl) << " threads=" << th;
        }
      }
    }
  }
}

}  // namespace
}  // namespace minfer::cpu
