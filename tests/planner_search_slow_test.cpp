// minfer-test-libs: minfer_planner
// The fast mode's default settings on every instance of ../shared/planner-bench: a valid plan
// within 10% of the best known height (issue 6). About 2 s of CPU in a release build and 15-20 s
// under ASan+UBSan, so this file's ctest label is planner_search_slow and `ctest -LE slow` (the
// sanitizer run in scripts/test.sh) skips it. The cheap checks of the same code are in
// planner_search_test.cpp. Also the fast mode over the fixed-seed set of perfect packings
// (planner/perfect_packing.h, seeds 1-20 of draw_packing_params: 200-2,000 buffers), about 20 s
// of CPU in a Release build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "planner/intervals.h"
#include "planner/offset_planner.h"
#include "planner/perfect_packing.h"
#include "planner_test_util.h"

namespace minfer {
namespace {

// The target: the default fast mode within 10% of the best known height on every
// instance (../shared/planner-bench/README.md: 1039360 for C, its lower bound, 1048576 for the
// other ten).
TEST(PlannerSearchSlow, PlannerBenchWithinTenPercent) {
  const auto files = test::planner_bench_files();
  if (files.empty()) GTEST_SKIP() << "no planner-bench folder (shared data absent)";
  ASSERT_EQ(files.size(), 11u);
  for (const auto& f : files) {
    const uint64_t best_known = test::planner_bench_best_known(f);
    auto b = read_intervals_csv(f.string());
    OffsetPlan p = plan_offsets(b);
    EXPECT_EQ(check_offsets(b, p.offsets, p.height), "") << f;
    EXPECT_LE(p.height, best_known * 110 / 100)
        << f << ": " << p.height << " is " << p.over_lower_bound_pct() << "% over the bound";
  }
}

// The fixed-seed perfect packings: every plan valid, the bound equal to the optimum, and the
// distribution over the optimum no worse than with every decomposition attempt building its tree
// (2026-12-03: worst +0.00%, seed 1 at the bound; with the relaxed decomposition alone median 0,
// worst +3.1% (seed 1), 20 of 20 within 10%; before it median 0, worst +19.5%, 15 of 20; +12.3%,
// +26.1%, 9 with the time sweep alone; docs/PLANNER.md). Work budgets, not wall time, bound every
// search, so the heights do not depend on load.
TEST(PlannerSearchSlow, FixedPerfectPackingsDistribution) {
  std::vector<double> over;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const PerfectPacking pk = make_perfect_packing(draw_packing_params(seed));
    PlanParams params;
    params.fast_time_limit_s = 1e9;
    const OffsetPlan p = plan_offsets(pk.buffers, params);
    EXPECT_EQ(check_offsets(pk.buffers, p.offsets, p.height), "") << pk.describe();
    EXPECT_EQ(p.lower_bound, pk.optimum) << pk.describe();
    over.push_back(p.over_lower_bound_pct());
    std::printf("%s: %+.2f%% in %.2f s (%s)\n", pk.describe().c_str(), over.back(), p.plan_us / 1e6,
                p.method.c_str());
  }
  std::sort(over.begin(), over.end());
  const double median = (over[9] + over[10]) / 2;
  std::printf("median %+.2f%%, worst %+.2f%%, within 10%%: %d of 20\n", median, over.back(),
              static_cast<int>(std::upper_bound(over.begin(), over.end(), 10.0) - over.begin()));
  EXPECT_LE(median, 1.0);
  EXPECT_LE(over.back(), 1.0);
  EXPECT_GE(std::upper_bound(over.begin(), over.end(), 10.0) - over.begin(), 20);
}

}  // namespace
}  // namespace minfer
