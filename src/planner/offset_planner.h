// Offset planner: static memory planning as interval packing ("dynamic storage allocation").
//
// Input: buffers, each live over a half-open step range [lower, upper) with a byte size (and an
// optional alignment). Output: a byte offset per buffer such that no two buffers live at the same
// step overlap in [offset, offset + size). The height (arena size) is max(offset + size); the
// lower bound is the most bytes live at any one step — no packing can beat it.
//
// Two modes (PlanMode):
//  * Fast: a portfolio of greedy packers, cheapest first, stopping as soon as one reaches the
//    lower bound: (1) online best-fit in start order (what ggml does; reaches the bound on
//    LLM graphs), (2) "gravity" dives that repeatedly drop the buffer with the lowest feasible
//    offset (ties by a lifetime/size-aware priority), (3) offline best-fit into gaps in priority
//    order (TFLite's greedy-by-size generalised), over several fixed orders (by section pressure,
//    area, size, lifetime, start), (4) bound-guided dives: gravity dives that break ties by the
//    lower bound each choice leaves, then a seeded perturbation walk over their decisions
//    (within 10% of the best known height on every ../shared/planner-bench instance), and then
//    seeded randomized restarts. Keeps the lowest height. Before (4), when every time section is
//    exactly full at the lower bound (a perfect packing), a decomposition search (time cuts,
//    sets of buffers of constant height contracted into rectangles, recursively) and a
//    time-sweep search for a plan at the bound: the buffers born at each step must tile exactly
//    the bytes the live ones leave free.
//  * Exact: the fast plan as the incumbent; on perfect packings the time-sweep search (complete
//    there) gets the first half of the time limit; then branch and bound over canonical
//    solutions in the spirit of MiniMalloc (Moffitt, ASPLOS 2023): buffers are placed in
//    non-decreasing (offset, priority) order at the lowest offset above every placed buffer they
//    overlap; a candidate is dominated when some unplaced buffer would fit entirely below it; each
//    time section's floor plus its unplaced bytes must fit under the target height. Targets tighten
//    from the incumbent towards the lower bound; the search stops at the bound, when exhausted
//    (proven optimal) or at the time limit, and returns the best plan found. With
//    PlanParams::capacity it instead stops at the first plan that fits that height (MiniMalloc's
//    decision question).
//
// Plans are plain data (PlanBuffer in, OffsetPlan out); nothing here touches memory.
// Thread safety: plan_offsets is reentrant (no globals). Cost: the online best-fit is
// O(n log n) and always runs; the rest of the fast portfolio is O((n + overlaps) log n) per
// greedy pass, bounded by PlanParams::fast_time_limit_s, and skipped above
// PlanParams::max_overlap_pairs; exact mode is exponential in the worst case and bounded by
// PlanParams::time_limit_s. Failure: bad input (upper <= lower, alignment 0, sizes past the
// limits below) throws Error(InvalidArgument) naming the buffer id.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace minfer {

// Input limits (Error(InvalidArgument) beyond them, naming the buffer): a size at most 2^60, an
// alignment at most 2^40, and all sizes plus their alignment padding at most 2^60 together, so
// that no height or offset sum in any strategy can wrap 64 bits.
constexpr uint64_t kMaxPlanBytes = uint64_t{1} << 60;
constexpr uint64_t kMaxPlanAlignment = uint64_t{1} << 40;

struct PlanBuffer {
  int64_t id = 0;          // the caller's id (CSV id, node id); reported in errors only
  int64_t lower = 0;       // first step the buffer is live (inclusive)
  int64_t upper = 0;       // first step it is dead again (exclusive); must be > lower
  uint64_t size = 0;       // bytes; a zero-size buffer gets offset 0 and takes no space
  uint64_t alignment = 1;  // the offset must be a multiple of this (>= 1)
};

enum class PlanMode : uint8_t { Fast, Exact };

struct PlanParams {
  PlanMode mode = PlanMode::Fast;
  // Fast mode: bound-guided dives (the fast mode's main search, see offset_planner_search.cpp)
  // when the cheap passes stay above the lower bound: one per priority order, then
  // perturbations of the best. The work budget, deterministic (not a time limit): each dive is
  // at most one canonical placement pass, O(n * candidates * sections) and usually cut short
  // once a good plan is known. 200 dives: 0.05-1 s of CPU on the 150-450-buffer instances of
  // ../shared/planner-bench (0 = none).
  int search_dives = 200;
  // Fast mode: the bound-guided search's work budget in elementary steps (buffers and sections
  // its dives visit), checked between dives: deterministic, like the dive count, and what keeps
  // the largest instances near a second (about 3e8 steps per CPU second on the shared
  // 2-core machine; the 1,000-2,000-buffer perfect packings of docs/PLANNER.md took up to 31 s
  // of CPU without it). 0 = none. On a perfect packing that the searches at the bound missed,
  // the dives get half of it (less past 800 buffers), checked inside a dive too, and stop once
  // a quarter of that brings no lower plan (docs/PLANNER.md "Budgets on the misses").
  uint64_t search_work = uint64_t{1} << 28;
  // Fast mode: node budget of the time-sweep search for a plan at the lower bound, per direction
  // (offset_planner_sweep.cpp; it runs forward, then on the time-reversed instance). It applies
  // only when every time section is exactly full at the bound (a perfect packing: no plan at
  // the bound may leave a byte empty), after the fixed-order greedy passes and before the
  // bound-guided dives. About 3-5M nodes per CPU second; deterministic. 0 = none.
  uint64_t sweep_nodes = uint64_t{1} << 19;
  // Fast mode: step budget of the decomposition search (offset_planner_decompose.cpp), which
  // runs before the time sweep on the same instances (perfect packings only): time cuts,
  // contraction of constant-height sets into rectangles, the sweep on what is left.
  // Deterministic. 0 = none.
  uint64_t decompose_steps = uint64_t{1} << 22;
  // Fast mode: step budget of the nested search (offset_planner_nested.cpp), which runs first on
  // perfect packings: a PQ-tree finds plans in which the buffers dying at each boundary are
  // runs of neighbours re-cut by the newborns (allocator-like traces) in O(n * live^2); this
  // budget bounds its backtracking over boundaries that need splitting into several runs, on
  // top of that one pass. Deterministic. 0 = none.
  uint64_t nested_steps = uint64_t{1} << 18;
  // Fast mode: randomized greedy passes after the search (0 = none).
  int restarts = 16;
  // Fast mode: local-search moves over the priority order after the restarts (0 = none; the
  // bound-guided search made it redundant on ../shared/planner-bench).
  int improve_iters = 0;
  // Seed of the randomized restarts; the same seed gives the same plan.
  uint64_t seed = 0x5eed;
  // Both modes: wall-clock budget of the greedy portfolio after the online best-fit (the fixed
  // orders, the bound-guided dives, the restarts), seconds; checked between passes, so one pass
  // may overrun it. The best plan so far is returned when it runs out.
  double fast_time_limit_s = 10.0;
  // Both modes: the portfolio and the exact search need every pair of buffers live together
  // (memory and time grow with their number); above this many pairs the plan is the online
  // best-fit's (O(n log n), method "online-best-fit (large instance)"). 8M pairs: ~64 MiB.
  uint64_t max_overlap_pairs = uint64_t{1} << 23;
  // Exact mode: wall-clock budget of the branch and bound, seconds (the fast pass is extra).
  double time_limit_s = 10.0;
  // Exact mode: stop at the first plan of at most this height (MiniMalloc's capacity: the
  // question "does it fit in N bytes?" instead of "what is the least?"); the search then
  // targets N itself. 0: search for the optimum.
  uint64_t capacity = 0;
};

struct OffsetPlan {
  std::vector<uint64_t> offsets;  // parallel to the input buffers
  uint64_t height = 0;            // max(offset + size) over all buffers: the arena's size
  uint64_t lower_bound = 0;       // the most bytes live at one step
  double plan_us = 0;             // wall time of plan_offsets
  bool proven_optimal = false;    // height == lower_bound, or the exact search was exhausted
  std::string method;             // which strategy produced the offsets (for reports)
  uint64_t search_nodes = 0;      // exact mode: branch-and-bound nodes visited
  // Wall time from the start of plan_offsets until the returned plan was found (the exact
  // search can keep running to its time limit without improving it); plan_us otherwise.
  double best_found_us = 0;

  // 100 * (height - lower_bound) / lower_bound; 0 when the bound is 0.
  double over_lower_bound_pct() const;
};

// The most bytes live at any one step (half-open lifetimes: a buffer ending at t and one
// starting at t are never live together). Alignment padding is not counted.
uint64_t live_bytes_lower_bound(std::span<const PlanBuffer> buffers);

// Plans offsets. Throws Error(InvalidArgument) on malformed buffers.
OffsetPlan plan_offsets(std::span<const PlanBuffer> buffers, const PlanParams& params = {});

// The invariant checker: empty when every buffer lies inside [0, height), respects its
// alignment, and no two buffers live at the same step share a byte; otherwise a description of
// the first violation (naming the buffer ids). O(n log n + overlapping pairs).
std::string check_offsets(std::span<const PlanBuffer> buffers, std::span<const uint64_t> offsets,
                          uint64_t height);

}  // namespace minfer
