#pragma once
// Test-only helpers of both planner test files: hand-written instances (make) and the optimal
// arena height of a tiny interval-packing instance by brute force, the ground truth they compare
// against. Cost: n! placement orders times n^2, so n <= 8. Header-only, no state.
#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

#include "planner/offset_planner.h"

namespace minfer::test {

// The instances of ../shared/planner-bench, sorted by name; empty when the folder is absent
// (the callers skip then).
inline std::vector<std::filesystem::path> planner_bench_files() {
  const std::filesystem::path dir = std::filesystem::path(MINFER_SHARED_DIR) / "planner-bench";
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".csv") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// An instance's name ("A" for A.1048576.csv) and its best known height from the folder's
// README: C's is its lower bound, every other instance's is 1048576 (D and J have lower bounds
// below it).
inline std::string planner_bench_name(const std::filesystem::path& f) {
  return f.stem().stem().string();
}
inline uint64_t planner_bench_best_known(const std::filesystem::path& f) {
  return planner_bench_name(f) == "C" ? 1039360 : 1048576;
}

// Buffers from {id, lower, upper, size} rows, alignment 1.
inline std::vector<PlanBuffer> make(std::initializer_list<std::array<int64_t, 4>> rows) {
  std::vector<PlanBuffer> out;
  for (const auto& r : rows) out.push_back({r[0], r[1], r[2], static_cast<uint64_t>(r[3]), 1});
  return out;
}

// Every placement order, each buffer dropped onto the highest already-placed buffer it overlaps
// in time (then rounded up to its alignment): every plan can be re-derived this way without
// growing (sort by offset, drop), so the minimum over orders is the optimum.
inline uint64_t brute_force_height(const std::vector<PlanBuffer>& b) {
  std::vector<size_t> perm(b.size());
  std::iota(perm.begin(), perm.end(), 0);
  uint64_t best = UINT64_MAX;
  do {
    std::vector<uint64_t> off(b.size());
    std::vector<bool> placed(b.size());
    uint64_t h = 0;
    for (size_t k : perm) {
      uint64_t o = 0;
      for (size_t j = 0; j < b.size(); ++j) {
        if (placed[j] && b[j].lower < b[k].upper && b[k].lower < b[j].upper) {
          o = std::max(o, off[j] + b[j].size);
        }
      }
      o = (o + b[k].alignment - 1) / b[k].alignment * b[k].alignment;
      off[k] = o;
      placed[k] = true;
      h = std::max(h, o + b[k].size);
    }
    best = std::min(best, h);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

}  // namespace minfer::test
