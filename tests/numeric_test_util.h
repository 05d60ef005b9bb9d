#pragma once
// Shared helpers for tests that compare float kernels: seeded normal data and the normalised mean
// squared error llama.cpp's backend tests use (sum (got - want)^2 / sum want^2). Header-only,
// no state; each call allocates its result vector.
#include <cstddef>
#include <cstdint>
#include <random>
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

// n values from N(0, scale^2), reproducible from seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace minfer::test
