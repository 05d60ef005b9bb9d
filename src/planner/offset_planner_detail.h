// Internals shared by the offset planner's strategies (offset_planner*.cpp). Not a public API.
//
// A Problem is the planner's normalised view of the input: zero-size buffers dropped, time
// compressed into sections (maximal step ranges in which the set of live buffers is constant),
// and for every buffer the list of buffers whose lifetimes overlap its own.
// Cost: O(n log n + overlapping pairs) to build. Thread safety: immutable after build.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "planner/offset_planner.h"

namespace minfer::planner_detail {

inline uint64_t align_up(uint64_t x, uint64_t a) {
  return a <= 1 ? x : (x + a - 1) / a * a;
}

struct Problem {
  std::vector<uint32_t> orig;  // problem index -> index into the caller's buffers
  std::vector<int64_t> lower, upper;
  std::vector<uint64_t> size, align;
  std::vector<std::vector<uint32_t>> overlaps;  // buffers live at a common step
  // Sections: buffer b covers sections [sec_lo[b], sec_hi[b]).
  std::vector<uint32_t> sec_lo, sec_hi;
  std::vector<std::vector<uint32_t>> section_buffers;
  std::vector<uint64_t> section_total;  // bytes of all buffers live in the section
  std::vector<uint64_t> max_total;      // per buffer: its most crowded section's total
  uint64_t lower_bound = 0;
  uint64_t step = 1;  // gcd of all sizes and alignments: heights only move in these steps
  // Per buffer, the offset modulo its alignment (empty: 0 for all). Only the greedy packers and
  // the bound-guided dives honour it (the decomposition's relaxed leaves, where a rectangle's
  // block fits at one residue only); build_problem leaves it empty.
  std::vector<uint64_t> residue;

  size_t n() const { return size.size(); }
};

Problem build_problem(std::span<const PlanBuffer> buffers);

// The lowest offset at or above x that buffer k may take (its alignment and residue).
inline uint64_t fit_up(const Problem& p, uint32_t k, uint64_t x) {
  const uint64_t a = p.align[k];
  if (p.residue.empty() || a <= 1) return align_up(x, a);
  const uint64_t r = p.residue[k];
  return x <= r ? r : r + align_up(x - r, a);
}

// Height of a placement given in problem indices.
uint64_t height_of(const Problem& p, const std::vector<uint64_t>& off);

// Priority orders (a permutation of problem indices, most important first).
enum class OrderKey : uint8_t { Pressure, Area, Size, Length, Start };
std::vector<uint32_t> make_order(const Problem& p, OrderKey key);

// Greedy packers over one priority order; return offsets in problem indices.
std::vector<uint64_t> gravity_dive(const Problem& p, std::span<const uint32_t> order);
std::vector<uint64_t> offline_best_fit(const Problem& p, std::span<const uint32_t> order);

// Bound-guided dives and the perturbation search around them (offset_planner_search.cpp).
struct BoundSearchParams {
  int dives = 0;      // work budget: dives started (each at most one canonical placement pass)
  uint64_t seed = 0;  // perturbation choices and rank jitter
  // Probability that a perturbation dive takes the second-best candidate at a later decision
  // too: a few extra deviations per dive let the walk leave a local optimum (without them K of
  // ../shared/planner-bench stayed at +10.5% however many dives it got).
  double noise = 0.03;
  // Work budget in elementary steps (buffers and sections visited by the dives), checked
  // between dives (and inside them too with WorkCheck::InsideDives); 0 = none. Deterministic,
  // unlike the deadline.
  uint64_t work = 0;
  // Where `work` is checked: between dives only (a dive once started is finished), or inside
  // the dives too (the dive that reaches it is abandoned: on the largest perfect packings a
  // single dive costs half a second of CPU).
  enum class WorkCheck : uint8_t { BetweenDives, InsideDives };
  WorkCheck work_check = WorkCheck::BetweenDives;
  // Stop once this much work passed without lowering the incumbent (0 = never): the early exit
  // for instances it has stopped improving. Before the first improvement the window is twice
  // as long (the first dives often start above the greedy incumbent, and the walk needs time
  // to get below it), but it applies too: a search that never improves no longer runs to the
  // end of its budget.
  uint64_t stall_work = 0;
  // Wall-clock stop, checked between dives (fast mode's time budget).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};
struct BoundSearchStats {
  int dives = 0;
  int improvements = 0;
  uint64_t work = 0;  // elementary steps spent (see BoundSearchParams::work)
};
// One dive per order, then perturbations of the best dive. `best`/`best_height` hold the
// incumbent (problem indices) and are replaced by every lower plan found.
BoundSearchStats bound_search(const Problem& p, std::span<const std::vector<uint32_t>> orders,
                              const BoundSearchParams& params, std::vector<uint64_t>& best,
                              uint64_t& best_height);
// rank[] of `order` after adding uniform noise of `width` * n to each position (width 0 keeps
// the order). key/rank are scratch/output, resized to order.size().
void jitter_ranks(std::span<const uint32_t> order, double width, std::mt19937_64& rng,
                  std::vector<double>& key, std::vector<uint32_t>& rank);

// Result of the time-sweep search (offset_planner_sweep.cpp) for a plan of a given height.
struct TargetSearchResult {
  bool found = false;      // `out` holds a plan of at most the target height
  bool exhausted = false;  // the search was complete: no plan of that height exists
  uint64_t nodes = 0;
};
// Time-sweep search (offset_planner_sweep.cpp) for a plan of height `target`: only when every
// non-empty section is exactly full at `target` (sweep_applies; otherwise not found at once);
// complete there, so `exhausted` is a proof. At most `node_budget` nodes. `out`: offsets in p's
// indices.
bool sweep_applies(const Problem& p, uint64_t target);
TargetSearchResult sweep_search(const Problem& p, uint64_t target, uint64_t node_budget,
                                std::vector<uint64_t>& out);
// The same, for a block of a larger plan that will sit at offset `base`: alignments are checked
// at base + offset (the decomposition's blocks, offset_planner_decompose.cpp). With a hook,
// each buffer marked `special` is placed only where accept(buffer, base + offset) agrees (and is
// never a twin of another buffer); accept must depend on its arguments only (the transposition
// table stays sound).
struct SweepHook {
  std::vector<uint8_t> special;
  std::function<bool(uint32_t, uint64_t)> accept;
};
TargetSearchResult sweep_search_at(const Problem& p, uint64_t target, uint64_t base,
                                   uint64_t node_budget, std::vector<uint64_t>& out,
                                   const SweepHook* hook = nullptr);
// Decomposition search for a plan at the lower bound of a perfect packing
// (offset_planner_decompose.cpp): splits at time cuts, contracts sets of buffers that form a
// constant-height block (a sub-flow: at every inner boundary the bytes dying equal the bytes
// born) into one rectangle, sweeps the few rectangles left, and recurses into each. A heuristic
// (a contracted set need not be contiguous in any plan): `found` or not, never `exhausted`.
// At most `budget` steps (search nodes of the block searches and the sweeps), deterministic.
// When no attempt packs at the bound and `relaxed` is given, each attempt's tree is also placed
// above the bound: its unplaceable top-level leaves (wrong contractions) are packed with room
// to spare by the greedy passes and the bound-guided dives, the rectangles in them kept whole
// or opened one to three levels deep; the lowest such plan (checked) comes back in `relaxed`.
// A plan within +10% on about 40% of the fast mode's misses (docs/PLANNER.md "Relaxed
// decomposition"). Deterministic: both budgets are counts.
struct RelaxedPlan {
  // Extra decomposition steps for placing blocks at new residues, shared equally by the failed
  // attempts that built a tree (up to six: per attempt, the CPU of the relaxations grew with
  // their number once every attempt finished its tree).
  uint64_t steps = uint64_t{1} << 21;
  // Work over all relaxed leaves: their greedy passes (ten per leaf, charged per overlap) and
  // dives (at most 2^24 each); about 0.2 s of CPU in all. Once spent, the remaining trees and
  // variants are not relaxed (the first relaxation always runs).
  uint64_t work = uint64_t{1} << 26;
  uint64_t height = UINT64_MAX;   // out: the lowest relaxed plan's height, or UINT64_MAX
  std::vector<uint64_t> offsets;  // out: its offsets, problem indices
};
TargetSearchResult decompose_search(const Problem& p, uint64_t budget, std::vector<uint64_t>& out,
                                    RelaxedPlan* relaxed = nullptr);
// Nested search for a plan at the lower bound of a perfect packing
// (offset_planner_nested.cpp): plans in which the buffers dying at each boundary are runs of
// neighbours re-cut by the buffers born there (allocator-like traces: one run), found by a
// PQ-tree over the live buffers; `budget` steps for backtracking over splits into several runs,
// on top of one pass without splits (O(n * live^2)). Both time directions, each with one run
// first and with the splits first (a quarter of `budget` each). Alignments are kept
// while reading the plan back. `found` or not, never `exhausted`; `nodes` counts steps.
// With `unaligned`: when some attempt's tree reaches the last boundary but no read-back aligns
// every buffer (mixed alignments), a plan at the bound that ignores alignments comes back there
// (offsets, problem indices; left untouched otherwise). Not a valid plan: an order to repack.
TargetSearchResult nested_search(const Problem& p, uint64_t budget, std::vector<uint64_t>& out,
                                 std::vector<uint64_t>* unaligned = nullptr);
// The same instance with time reversed (same indices): the sweep then runs right to left.
Problem reversed_problem(const Problem& p);
// Fast mode: forward, then on the reversed instance, `nodes_each` nodes each, at the lower bound.
TargetSearchResult sweep_both_ways(const Problem& p, uint64_t nodes_each,
                                   std::vector<uint64_t>& out);
// Exact mode: both directions alternately, budgets doubling from `first_nodes`, until `deadline`
// (checked between runs and every 2^16 nodes inside one) or a plan / proof is found.
TargetSearchResult sweep_until(const Problem& p, uint64_t first_nodes,
                               std::chrono::steady_clock::time_point deadline,
                               std::vector<uint64_t>& out);

struct ExactResult {
  bool improved = false;   // found a plan lower than the incumbent
  bool exhausted = false;  // proved no plan lower than the final incumbent exists
  uint64_t nodes = 0;
  double best_found_s = 0;  // seconds from the search's start to its last improvement
};
// Branch and bound. `best` holds the incumbent (offsets, problem indices) and is replaced by
// every better plan found; stops at the lower bound, when exhausted, at the deadline, or (when
// `capacity` > 0) at the first plan of at most `capacity` bytes.
ExactResult exact_search(const Problem& p, std::vector<uint64_t>& best, uint64_t& best_height,
                         std::chrono::steady_clock::time_point deadline, uint64_t capacity = 0);

}  // namespace minfer::planner_detail
