// minfer-test-libs: minfer_common
#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fp16.h"

namespace minfer {

TEST(Dtype, BlockGeometry) {
  EXPECT_EQ(type_traits(GgmlType::Q4_K).block_size, 256);
  EXPECT_EQ(type_traits(GgmlType::Q4_K).type_size, 144u);
  EXPECT_EQ(row_size(GgmlType::Q8_0, 64), 68u);
  EXPECT_EQ(type_traits(9999u), nullptr);
}

TEST(Dtype, NameLookupIsCaseInsensitive) {
  EXPECT_EQ(type_from_name("Q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(type_from_name("F16"), GgmlType::F16);
  EXPECT_FALSE(type_from_name("q9_9").has_value());
}

TEST(Fp16, RoundTripsAndRounds) {
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), 5.9604644775390625e-08f);  // smallest subnormal
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);                 // rounds to inf
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  for (uint32_t h = 0; h < 0x7c00; ++h) ASSERT_EQ(f32_to_fp16(fp16_to_f32(h)), h) << h;
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.0f)), 3.0f);
}

TEST(Error, CarriesKind) {
  try {
    fail(ErrorKind::InvalidFile, "{}: bad {}", "x.gguf", 7);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidFile);
    EXPECT_STREQ(e.what(), "x.gguf: bad 7");
  }
}

}  // namespace minfer
