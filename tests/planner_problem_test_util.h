#pragma once
// Test-only helpers of the planner tests that work on planner_detail::Problem (the sweep, the
// decomposition and the nested search): offsets mapped back to the caller's buffers, and whether
// a tiny instance fits a height, by brute force (the ground truth for the complete searches).
// Cost: brute_force_fits tries every aligned offset of every buffer, so n <= 8 and small heights.
// Header-only, no state.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/offset_planner.h"
#include "planner/offset_planner_detail.h"
#include "planner/perfect_packing.h"

namespace minfer::test {

// Offsets in the caller's order from offsets in problem order (zero-size buffers get 0).
inline std::vector<uint64_t> to_caller(const planner_detail::Problem& p, size_t n,
                                       const std::vector<uint64_t>& off) {
  std::vector<uint64_t> out(n, 0);
  for (size_t k = 0; k < p.n(); ++k) out[p.orig[k]] = off[k];
  return out;
}

// check_offsets of a plan in problem order against the packing's known optimum: "" when the
// plan is valid and at the bound.
inline std::string at_bound_error(const PerfectPacking& pk, const planner_detail::Problem& p,
                                  const std::vector<uint64_t>& off) {
  return check_offsets(pk.buffers, to_caller(p, pk.buffers.size(), off), pk.optimum);
}

// Is there a plan of height h? Every offset tried (h / alignment values per buffer).
inline bool brute_force_fits(const std::vector<PlanBuffer>& b, uint64_t h) {
  std::vector<uint64_t> off(b.size(), 0);
  auto rec = [&](auto&& self, size_t i) -> bool {
    if (i == b.size()) return true;
    for (uint64_t o = 0; o + b[i].size <= h; o += b[i].alignment) {
      bool ok = true;
      for (size_t j = 0; j < i && ok; ++j) {
        const bool live = b[i].lower < b[j].upper && b[j].lower < b[i].upper;
        ok = !live || o + b[i].size <= off[j] || off[j] + b[j].size <= o;
      }
      if (!ok) continue;
      off[i] = o;
      if (self(self, i + 1)) return true;
    }
    return false;
  };
  return rec(rec, 0);
}

}  // namespace minfer::test
