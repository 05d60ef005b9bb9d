// minfer-test-libs: minfer_planner
// The time-sweep search for a plan at the lower bound (src/planner/offset_planner_sweep.cpp):
// complete on instances with no slack (brute force agrees on tiny ones, including infeasible
// ones), valid plans, both directions, and its place in the fast and exact modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "planner/offset_planner.h"
#include "planner/offset_planner_detail.h"
#include "planner/perfect_packing.h"
#include "planner_problem_test_util.h"

namespace minfer {
namespace {

using planner_detail::build_problem;
using planner_detail::Problem;
using test::at_bound_error;
using test::brute_force_fits;
using test::to_caller;

// Tiny random instances whose time sections are all exactly full at the lower bound (the only
// ones the sweep accepts): the sweep finds a plan exactly when one exists, and proves it
// otherwise. Both outcomes occur.
TEST(PlannerSweep, AgreesWithBruteForceOnTinyInstances) {
  std::mt19937_64 rng(21);
  int feasible = 0, infeasible = 0, draw = 0;
  for (; draw < 100000 && (feasible < 20 || infeasible < 8); ++draw) {
    const int n = 3 + static_cast<int>(rng() % 4);
    std::vector<PlanBuffer> b(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const int64_t lo = static_cast<int64_t>(rng() % 4);
      b[static_cast<size_t>(i)] = {i, lo, lo + 1 + static_cast<int64_t>(rng() % 3), 1 + rng() % 3,
                                   rng() % 4 == 0 ? 2u : 1u};
    }
    const Problem p = build_problem(b);
    if (!planner_detail::sweep_applies(p, p.lower_bound)) continue;
    const bool fits = brute_force_fits(b, p.lower_bound);
    std::vector<uint64_t> off;
    const auto r = planner_detail::sweep_search(p, p.lower_bound, UINT64_MAX, off);
    ASSERT_EQ(r.found, fits) << "draw " << draw;
    if (r.found) {
      const std::vector<uint64_t> o = to_caller(p, b.size(), off);
      EXPECT_EQ(check_offsets(b, o, p.lower_bound), "") << "draw " << draw;
      ++feasible;
    } else {
      EXPECT_TRUE(r.exhausted) << "draw " << draw;
      ++infeasible;
    }
  }
  EXPECT_GE(feasible, 20);
  EXPECT_GE(infeasible, 8);
  std::printf("%d draws: feasible %d, infeasible %d\n", draw, feasible, infeasible);
}

TEST(PlannerSweep, NotApplicableWithSlack) {
  // Section [1, 2) holds 1 byte of the bound's 2.
  const std::vector<PlanBuffer> b = {{0, 0, 1, 2, 1}, {1, 1, 2, 1, 1}};
  const Problem p = build_problem(b);
  EXPECT_FALSE(planner_detail::sweep_applies(p, p.lower_bound));
  std::vector<uint64_t> off;
  const auto r = planner_detail::sweep_search(p, p.lower_bound, 1000, off);
  EXPECT_FALSE(r.found);
  EXPECT_FALSE(r.exhausted);
}

TEST(PlannerSweep, ReversedProblemMirrorsTime) {
  PackingParams pp{.seed = 3, .cuts = PackingCuts::Sweep, .n_buffers = 60};
  const PerfectPacking pk = make_perfect_packing(pp);
  const Problem p = build_problem(pk.buffers);
  const Problem q = planner_detail::reversed_problem(p);
  ASSERT_EQ(q.n(), p.n());
  for (size_t k = 0; k < p.n(); ++k) {
    EXPECT_EQ(q.lower[k], -p.upper[k]);
    EXPECT_EQ(q.upper[k], -p.lower[k]);
    EXPECT_EQ(q.size[k], p.size[k]);
  }
  EXPECT_EQ(q.lower_bound, p.lower_bound);
}

// Allocator-like traces (the Sweep cuts) at the bound, in both directions, within a small
// budget: these are what the search is for.
TEST(PlannerSweep, PacksSweepTracesAtTheBound) {
  int found = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    PackingParams pp{.seed = seed,
                     .cuts = PackingCuts::Sweep,
                     .align = PackingAlign::Mixed,
                     .n_buffers = 300,
                     .sweep_live = 16};
    const PerfectPacking pk = make_perfect_packing(pp);
    const Problem p = build_problem(pk.buffers);
    ASSERT_TRUE(planner_detail::sweep_applies(p, p.lower_bound));
    std::vector<uint64_t> off;
    const auto r = planner_detail::sweep_both_ways(p, uint64_t{1} << 19, off);
    if (!r.found) continue;
    ++found;
    EXPECT_EQ(at_bound_error(pk, p, off), "") << pk.describe();
  }
  std::printf("packed %d of 6 at the bound\n", found);
  EXPECT_GE(found, 4);
}

// Fast mode takes the sweep's plan (optimal, proven by the bound); exact mode too.
TEST(PlannerSweep, FastAndExactModesUseIt) {
  PackingParams pp{.seed = 1, .cuts = PackingCuts::Sweep, .n_buffers = 150};
  const PerfectPacking pk = make_perfect_packing(pp);
  PlanParams fast;
  fast.fast_time_limit_s = 1e9;
  fast.decompose_steps = 0;  // they run first and might pack this one themselves
  fast.nested_steps = 0;
  const OffsetPlan f = plan_offsets(pk.buffers, fast);
  EXPECT_EQ(check_offsets(pk.buffers, f.offsets, f.height), "");
  EXPECT_EQ(f.height, pk.optimum) << f.method;
  EXPECT_EQ(f.method, "time-sweep");
  EXPECT_TRUE(f.proven_optimal);
  // Without the sweep in the fast mode, the exact mode's own sweep finds it.
  PlanParams exact;
  exact.mode = PlanMode::Exact;
  exact.sweep_nodes = 0;
  exact.decompose_steps = 0;
  exact.nested_steps = 0;
  exact.time_limit_s = 60;
  const OffsetPlan e = plan_offsets(pk.buffers, exact);
  EXPECT_EQ(check_offsets(pk.buffers, e.offsets, e.height), "");
  EXPECT_EQ(e.height, pk.optimum);
  EXPECT_TRUE(e.proven_optimal);
}

}  // namespace
}  // namespace minfer
