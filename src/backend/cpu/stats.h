// Order statistics for the benchmarks' paired figures (step_ab.h, membw.h): medians and
// quartiles of per-pair ratios, which a few outliers (a preempted step, a probe pass slowed by a
// neighbour) do not move as they move a mean.
//
// Ownership: plain values. Thread safety: pure. Failure: an empty input is an assertion failure.
// Cost: a copy and a sort of the input.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/error.h"

namespace minfer::cpu {

// The q-quantile of v (q in [0, 1]), linearly interpolated between ranks: q = 0.5 is the median,
// 0.25 and 0.75 the quartiles.
inline double quantile(std::vector<double> v, double q) {
  MINFER_ASSERT(!v.empty(), "quantile of no values");
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

}  // namespace minfer::cpu
