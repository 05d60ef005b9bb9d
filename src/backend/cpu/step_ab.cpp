#include "backend/cpu/step_ab.h"

#include <atomic>
#include <cstddef>

#include "backend/cpu/stats.h"

namespace minfer::cpu {
namespace {

std::atomic<int> g_variant{0};

}  // namespace

int ab_variant() {
  return g_variant.load(std::memory_order_relaxed);
}

void set_ab_variant(int v) {
  g_variant.store(v, std::memory_order_relaxed);
}

AbSummary summarize_ab(const std::vector<double>& step_ns) {
  AbSummary s;
  std::vector<double> ratio, a, b;
  for (size_t i = 0; i + 1 < step_ns.size(); i += 2) {
    const bool b_first = ab_variant_of_step(static_cast<int64_t>(i)) == 1;
    const double ta = b_first ? step_ns[i + 1] : step_ns[i];
    const double tb = b_first ? step_ns[i] : step_ns[i + 1];
    a.push_back(ta);
    b.push_back(tb);
    ratio.push_back(tb / ta);
  }
  if (ratio.empty()) return s;
  s.pairs = static_cast<int64_t>(ratio.size());
  s.ratio_median = quantile(ratio, 0.5);
  s.ratio_q1 = quantile(ratio, 0.25);
  s.ratio_q3 = quantile(ratio, 0.75);
  s.a_median_ns = quantile(a, 0.5);
  s.b_median_ns = quantile(b, 0.5);
  return s;
}

}  // namespace minfer::cpu
