#pragma once
// Shared helpers for tests that compare float kernels: seeded normal data, the normalised mean
// squared error llama.cpp's backend tests use (sum (got - want)^2 / sum want^2) and the largest
// absolute difference. Header-only, no state; randn allocates its result vector.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace minfer::test {

// NMSE of got against want (same length); the plain squared error when want is all zeros.
inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = (double)got[i] - want[i];
    num += d * d;
    den += (double)want[i] * want[i];
  }
  return den > 0 ? num / den : num;
}

// max |a[i] - b[i]|; a size mismatch is a test failure (the common prefix is compared).
inline double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

// n values from N(0, scale^2), reproducible from seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace minfer::test
