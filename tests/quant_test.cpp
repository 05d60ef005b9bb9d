// minfer-test-libs: minfer_common
// Reference (de)quantization: hand-computed blocks for every layout, and quantize->dequantize
// error bounds per type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/fp16.h"
#include "common/quant.h"
#include "common/quant_k.h"

namespace minfer {
namespace {

std::vector<float> dequant(GgmlType t, const void* src, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, src, y.data(), n);
  return y;
}

TEST(Dequant, F16AndBF16) {
  const uint16_t h[3] = {0x3c00, 0xc000, 0x3555};  // 1, -2, 0.333251953125
  auto y = dequant(GgmlType::F16, h, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0.333251953125f);
  const uint16_t b[2] = {0x3f80, 0xc040};  // 1, -3
  y = dequant(GgmlType::BF16, b, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
}

TEST(Dequant, Q8_0HandBlock) {
  BlockQ8_0 b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  auto y = dequant(GgmlType::Q8_0, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (j * 8 - 128)) << j;
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[31], 60.0f);
}

TEST(Dequant, Q4_0HandBlock) {
  BlockQ4_0 b{};
  b.d = 0x4000;  // 2.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = dequant(GgmlType::Q4_0, &b, 32);
  EXPECT_EQ(y[0], -16.0f);   // (0 - 8) * 2
  EXPECT_EQ(y[15], 14.0f);   // (15 - 8) * 2
  EXPECT_EQ(y[16], 14.0f);   // high nibble of qs[0] = 15
  EXPECT_EQ(y[31], -16.0f);  // high nibble of qs[15] = 0
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 8));
    EXPECT_EQ(y[j + 16], 2.0f * (7 - j));
  }
}

TEST(Dequant, Q5_0HandBlock) {
  BlockQ5_0 b{};
  b.d = 0x3c00;  // 1.0
  // qh bit j is the fifth bit of element j; bit j+16 of element j+16.
  const uint32_t qh = (1u << 0) | (1u << 3) | (1u << 16) | (1u << 31);
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (j << 4));
  auto y = dequant(GgmlType::Q5_0, &b, 32);
  EXPECT_EQ(y[0], 0.0f);     // 0 | 16 -> 16 - 16
  EXPECT_EQ(y[1], -15.0f);   // 1 - 16
  EXPECT_EQ(y[3], 3.0f);     // 3 | 16 = 19 - 16
  EXPECT_EQ(y[16], 0.0f);    // high nibble 0, bit 16 set
  EXPECT_EQ(y[17], -15.0f);  // high nibble 1
  EXPECT_EQ(y[31], 15.0f);   // high nibble 15, bit 31 set -> 31 - 16
}

// Scales {1,63,5,17,33,2,48,60}, mins {0,1,62,3,40,7,20,63}, packed by hand (see quant_k.h).
constexpr uint8_t kSc[8] = {1, 63, 5, 17, 33, 2, 48, 60};
constexpr uint8_t kMin[8] = {0, 1, 62, 3, 40, 7, 20, 63};
constexpr uint8_t kPacked[12] = {129, 63, 197, 209, 128, 1, 126, 195, 129, 114, 64, 252};

TEST(Dequant, KScaleMinPacking) {
  uint8_t packed[12];
  kquant::pack_scale_min(kSc, kMin, packed);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(packed[i], kPacked[i]) << "byte " << i;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    kquant::get_scale_min(j, kPacked, &sc, &m);
    EXPECT_EQ(sc, kSc[j]) << j;
    EXPECT_EQ(m, kMin[j]) << j;
  }
}

TEST(Dequant, Q4_KHandBlock) {
  BlockQ4_K b{};
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  std::memcpy(b.scales, kPacked, 12);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * c + l] = static_cast<uint8_t>((l & 15) | ((15 - (l & 15)) << 4));
  auto y = dequant(GgmlType::Q4_K, &b, 256);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(y[64 * c + l], 0.5f * kSc[2 * c] * (l & 15) - 0.25f * kMin[2 * c]) << c << "," << l;
      EXPECT_EQ(y[64 * c + 32 + l],
                0.5f * kSc[2 * c + 1] * (15 - (l & 15)) - 0.25f * kMin[2 * c + 1]);
    }
  }
  EXPECT_EQ(y[0], 0.0f);                         // sc 1, q 0, min 0
  EXPECT_EQ(y[32 + 1], 0.5f * 63 * 14 - 0.25f);  // sub-block 1: sc 63, q 14, min 1
  EXPECT_EQ(y[255], 0.5f * 60 * 0 - 0.25f * 63);
}

TEST(Dequant, Q5_KHandBlock) {
  BlockQ5_K b{};
  b.d = 0x3c00;     // 1
  b.dmin = 0x3c00;  // 1
  std::memcpy(b.scales, kPacked, 12);
  // Element 64*2 + 32 + 5 (chunk 2, high half, l=5): high nibble of qs[69] = 9, fifth bit = bit 5
  // of qh[5]  -> q = 25; sub-block 5: sc 2, min 7 -> 2*25 - 7 = 43.
  b.qs[32 * 2 + 5] = 9 << 4;
  b.qh[5] = 1 << 5;
  auto y = dequant(GgmlType::Q5_K, &b, 256);
  EXPECT_EQ(y[64 * 2 + 32 + 5], 43.0f);
  EXPECT_EQ(y[64 * 2 + 5], -40.0f);  // sub-block 4: q 0, min 40
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[40], -1.0f);  // sub-block 1, min 1
}

TEST(Dequant, Q6_KHandBlock) {
  BlockQ6_K b{};
  b.d = 0x3800;  // 0.5
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 ? -(s + 1) : s + 1);
  // All ql/qh zero -> q = -32 everywhere; one element set: half 1, group 2, l = 21, i.e.
  // element 128 + 64 + 21 = 213 in sub-block 13. Its low bits: high nibble of ql[64 + 21];
  // top bits: qh[32 + 21] bits 4..5.  q = 0xA | (2 << 4) = 42 -> 42 - 32 = 10.
  b.ql[64 + 21] = 0xA0;
  b.qh[32 + 21] = 2 << 4;
  auto y = dequant(GgmlType::Q6_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const float sc = b.scales[e / 16];
    const float want = e == 213 ? 0.5f * sc * 10 : 0.5f * sc * -32;
    EXPECT_EQ(y[e], want) << "element " << e;
  }
  EXPECT_EQ(y[213], 0.5f * -14 * 10);
}

TEST(Dequant, Q8_KHandBlock) {
  BlockQ8_K b{};
  b.d = 0.25f;
  for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
  auto y = dequant(GgmlType::Q8_K, &b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.25f * (j - 128));
}

TEST(Quant, Q8_0ExactOnRepresentableValues) {
  std::vector<float> x(64);
  for (int j = 0; j < 64; ++j) x[j] = 0.5f * ((j * 37) % 255 - 127);
  x[3] = 63.5f;  // 127 * 0.5: the block's amax, so d = 0.5 exactly
  x[40] = -63.5f;
  std::vector<BlockQ8_0> b(2);
  quantize_row(GgmlType::Q8_0, x.data(), b.data(), 64);
  EXPECT_EQ(b[0].d, 0x3800);
  EXPECT_EQ(dequant(GgmlType::Q8_0, b.data(), 64), x);
}

TEST(Quant, Q4_0MapsExtremeToLowestLevel) {
  std::vector<float> x(32, 0.0f);
  x[0] = -16.0f;  // largest magnitude -> level 0, d = 2
  x[1] = 14.0f;
  x[17] = 2.0f;
  BlockQ4_0 b{};
  quantize_row(GgmlType::Q4_0, x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x4000);
  EXPECT_EQ(b.qs[0] & 15, 0);
  EXPECT_EQ(b.qs[1] & 15, 15);
  EXPECT_EQ(dequant(GgmlType::Q4_0, &b, 32), x);
}

TEST(Quant, ZeroRowsStayZero) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::F16, GgmlType::BF16}) {
    std::vector<float> x(256, 0.0f);
    std::vector<uint8_t> buf(row_size(t, 256));
    quantize_row(t, x.data(), buf.data(), 256);
    for (float v : dequant(t, buf.data(), 256)) ASSERT_EQ(v, 0.0f) << type_name(t);
  }
}

TEST(Quant, Q8_KBsums) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(256);
  for (auto& v : x) v = nd(rng);
  BlockQ8_K b{};
  quantize_row(GgmlType::Q8_K, x.data(), &b, 256);
  x[7] = -9.0f;  // the extreme maps to -127 exactly; nothing reaches -128
  quantize_row(GgmlType::Q8_K, x.data(), &b, 256);
  EXPECT_EQ(b.qs[7], -127);
  for (int j = 0; j < 256; ++j) EXPECT_GE(b.qs[j], -127);
  EXPECT_FLOAT_EQ(b.d, 9.0f / 127.0f);
  for (int i = 0; i < 16; ++i) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += b.qs[16 * i + j];
    EXPECT_EQ(b.bsums[i], s);
  }
}

// Relative RMS error of quantize -> dequantize on N(0,1) rows, with bounds a bit above what
// these quantizers achieve (4.5 / 5.5 / 6.5 / 8.5 bits per weight).
struct Bound {
  GgmlType type;
  double max_rel_rmse;
};

class RoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, ErrorWithinBound) {
  const Bound bound = GetParam();
  const int64_t n = 256 * 8;
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  x[5] = 6.0f;  // an outlier
  std::vector<uint8_t> buf(row_size(bound.type, n));
  quantize_row(bound.type, x.data(), buf.data(), n);
  auto y = dequant(bound.type, buf.data(), n);
  double se = 0, ss = 0;
  for (int64_t i = 0; i < n; ++i) {
    se += (y[i] - x[i]) * (y[i] - x[i]);
    ss += x[i] * x[i];
  }
  const double rel = std::sqrt(se / ss);
  EXPECT_LT(rel, bound.max_rel_rmse) << type_name(bound.type);
  RecordProperty("rel_rmse", std::to_string(rel));
  std::printf("%s: relative RMSE %.5f\n", std::string(type_name(bound.type)).c_str(), rel);
}

INSTANTIATE_TEST_SUITE_P(
    Types, RoundTrip,
    ::testing::Values(Bound{GgmlType::F32, 1e-12}, Bound{GgmlType::F16, 1e-3},
                      Bound{GgmlType::BF16, 5e-3}, Bound{GgmlType::Q8_0, 0.008},
                      Bound{GgmlType::Q8_K, 0.011}, Bound{GgmlType::Q6_K, 0.025},
                      Bound{GgmlType::Q5_K, 0.045}, Bound{GgmlType::Q5_0, 0.055},
                      Bound{GgmlType::Q4_K, 0.085}, Bound{GgmlType::Q4_0, 0.11}),
    [](const auto& info) { return std::string(type_name(info.param.type)); });

TEST(Quant, CanQuantizeListsTheReferenceTypes) {
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
        GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K})
    EXPECT_TRUE(can_quantize(t)) << type_name(t);
  EXPECT_FALSE(can_quantize(GgmlType::Q4_1));
}

}  // namespace
}  // namespace minfer
