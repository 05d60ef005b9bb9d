// minfer-fuzz-libs: minfer_planner
// libFuzzer target: the interval CSV parser (`minfer plan --intervals`) and the offset planner
// on whatever it accepts. Fast mode always (short budget), exact mode on small instances, with
// and without a capacity. Checks: every plan passes check_offsets, its height is at least the
// lower bound and is what the offsets say; a capacity plan that claims to fit does. Any
// minfer::Error is a clean rejection; a crash, an assertion or an invalid plan is a finding.
//
// Seeds (MINFER_FUZZ_SEED_DIR): ../shared/planner-bench's CSVs and small hand-made files
// (alignment column, zero sizes, staggered lifetimes, sizes near the 2^60 limit).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "fuzz_util.h"
#include "planner/intervals.h"
#include "planner/offset_planner.h"

namespace {

using namespace minfer;

void write_seeds(const std::string& dir) {
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(fuzz::shared_dir() / "planner-bench", ec))
    if (e.path().extension() == ".csv")
      fuzz::write_seed(dir, e.path().filename().string(), fuzz::read_file(e.path()));
  fuzz::write_seed(dir, "chain.csv", "id,lower,upper,size\n0,0,2,8\n1,1,3,8\n2,2,4,8\n3,3,5,8\n");
  fuzz::write_seed(
      dir, "align.csv",
      "id,lower,upper,size,alignment\n0,0,3,5,8\n1,1,2,0,1\n2,2,5,7,64\n3,0,9,1,4096\n");
  fuzz::write_seed(dir, "stagger.csv",
                   "id,lower,upper,size\n0,0,4,3\n1,1,5,5\n2,2,6,3\n3,3,7,5\n4,4,8,3\n5,5,9,5\n");
  fuzz::write_seed(dir, "big.csv",
                   "id,lower,upper,size\n0,0,2,576460752303423488\n1,1,3,576460752303423487\n");
  fuzz::write_seed(dir, "offset.csv", "id,lower,upper,size,offset\n7,-5,-1,3,0\n9,-2,4,2,3\n");
}

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "planner_fuzz: %s\n", what.c_str());
  std::abort();
}

void check(const std::vector<PlanBuffer>& b, const OffsetPlan& p, uint64_t capacity) {
  const std::string err = check_offsets(b, p.offsets, p.height);
  if (!err.empty()) finding("invalid plan: " + err);
  if (p.height < p.lower_bound) finding("height below the lower bound");
  if (p.lower_bound != live_bytes_lower_bound(b)) finding("lower bounds disagree");
  uint64_t h = 0;
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i].size > 0) h = std::max(h, p.offsets[i] + b[i].size);
  if (h != p.height) finding("height is not max(offset + size)");
  (void)capacity;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<PlanBuffer> b;
  try {
    b = parse_intervals_csv(text, "fuzz.csv");
  } catch (const Error&) {
    return 0;
  }
  try {
    PlanParams fast;
    fast.search_dives = 8;
    fast.restarts = 2;
    fast.fast_time_limit_s = 0.05;
    check(b, plan_offsets(b, fast), 0);
    if (b.size() <= 16) {
      PlanParams exact = fast;
      exact.mode = PlanMode::Exact;
      exact.time_limit_s = 0.02;
      check(b, plan_offsets(b, exact), 0);
      exact.capacity = std::max<uint64_t>(1, live_bytes_lower_bound(b));
      check(b, plan_offsets(b, exact), exact.capacity);
    }
  } catch (const Error&) {
    // A clean rejection (e.g. sizes over the planner's limits).
  }
  return 0;
}
