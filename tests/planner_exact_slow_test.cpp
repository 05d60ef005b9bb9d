// minfer-test-libs: minfer_alloc
// Exact mode over all eleven ../shared/planner-bench instances, 10 s each: minutes of CPU, so
// this file's ctest label is planner_exact_slow and `ctest -LE slow` (the sanitizer run in
// scripts/test.sh) skips it. The cheap checks are in planner_exact_test.cpp.
//
// Instances the branch and bound reaches (docs/PLANNER.md has the table) must reach the best
// known height (D and J go below it); for the others (E and I today) the test only asserts a
// valid plan no worse than the fast mode's and prints the gap, so that closing one is visible
// here. B needs about 4 s of this machine at load 10: on a busier one it can miss.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "alloc/intervals.h"
#include "alloc/offset_planner.h"

namespace minfer {
namespace {

// ../shared/planner-bench/README.md: C's best known height is its lower bound, every other
// instance's is 1048576.
uint64_t best_known(const std::string& name) {
  return name == "C" ? 1039360 : 1048576;
}

TEST(PlannerExactSlow, PlannerBenchBestKnownHeights) {
  const std::filesystem::path dir = std::filesystem::path(MINFER_SHARED_DIR) / "planner-bench";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "no " << dir << " (shared data absent)";
  const std::set<std::string> not_reached = {"E", "I"};
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".csv") continue;
    ++n;
    const std::string name = e.path().stem().stem().string();
    auto b = read_intervals_csv(e.path().string());
    PlanParams fast;
    OffsetPlan f = plan_offsets(b, fast);
    PlanParams ex;
    ex.mode = PlanMode::Exact;
    ex.time_limit_s = 10;
    OffsetPlan p = plan_offsets(b, ex);
    EXPECT_EQ(check_offsets(b, p.offsets, p.height), "") << name;
    EXPECT_LE(p.height, f.height) << name;
    if (not_reached.count(name)) {
      std::printf("%s: %llu, best known %llu (%+.2f%%), not yet reached\n", name.c_str(),
                  static_cast<unsigned long long>(p.height),
                  static_cast<unsigned long long>(best_known(name)),
                  100.0 * (double(p.height) - double(best_known(name))) / double(best_known(name)));
    } else {
      EXPECT_LE(p.height, best_known(name)) << name;  // D and J go below it
    }
  }
  EXPECT_EQ(n, 11);
}

}  // namespace
}  // namespace minfer
