// Offset planner: validation, the lower bound, the invariant checker, the greedy portfolio and
// the mode dispatcher. The branch and bound lives in offset_planner_exact.cpp.
#include "planner/offset_planner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <queue>
#include <random>
#include <set>
#include <utility>

#include "common/error.h"
#include "planner/offset_planner_detail.h"

namespace minfer {

using planner_detail::align_up;
using planner_detail::OrderKey;
using planner_detail::Problem;

double OffsetPlan::over_lower_bound_pct() const {
  if (lower_bound == 0) return 0.0;
  return 100.0 * (static_cast<double>(height) - static_cast<double>(lower_bound)) /
         static_cast<double>(lower_bound);
}

namespace {

void validate(std::span<const PlanBuffer> buffers) {
  // Every height any strategy forms is at most the sum of all sizes plus their alignment
  // padding (stacking everything); bounding that sum keeps offset + size + padding far from
  // 2^64 everywhere, so no sum in the planner can wrap (a wrapped height once printed as
  // "optimal").
  uint64_t total = 0;
  for (const PlanBuffer& b : buffers) {
    if (b.upper <= b.lower) {
      fail(ErrorKind::InvalidArgument, "planner: buffer {}: upper {} <= lower {}", b.id, b.upper,
           b.lower);
    }
    if (b.alignment == 0) fail(ErrorKind::InvalidArgument, "planner: buffer {}: alignment 0", b.id);
    if (b.size > kMaxPlanBytes || b.alignment > kMaxPlanAlignment) {
      fail(ErrorKind::InvalidArgument,
           "planner: buffer {}: size {} / alignment {} too large (limits 2^60 / 2^40)", b.id,
           b.size, b.alignment);
    }
    if (b.size == 0) continue;
    total += b.size + (b.alignment - 1);  // each term < 2^61, total checked below before growing
    if (total > kMaxPlanBytes) {
      fail(ErrorKind::InvalidArgument,
           "planner: buffer {}: sizes (with alignment padding) up to it add up to {} bytes, over "
           "the limit of 2^60 ({})",
           b.id, total, kMaxPlanBytes);
    }
  }
}

// Buffer indices sorted by start step (stable, so equal starts keep the caller's order). Graph
// plans arrive already sorted; checking first makes that case O(n).
std::vector<uint32_t> by_start(std::span<const PlanBuffer> buffers) {
  std::vector<uint32_t> idx(buffers.size());
  std::iota(idx.begin(), idx.end(), 0u);
  bool sorted = true;
  for (size_t i = 1; i < buffers.size() && sorted; ++i) {
    sorted = buffers[i - 1].lower <= buffers[i].lower;
  }
  if (!sorted) {
    std::stable_sort(idx.begin(), idx.end(),
                     [&](uint32_t a, uint32_t b) { return buffers[a].lower < buffers[b].lower; });
  }
  return idx;
}

// The free blocks of online_best_fit below the top: coalesced, indexed by offset (to merge
// neighbours) and by (size, offset) (to find the best fit in O(log n)). The per-buffer cost must
// stay logarithmic: this pass is the planner's fallback for instances too large for the
// portfolio (10^6 buffers).
class FreeBlocks {
 public:
  uint64_t top = 0;  // everything at or above is unused

  // Returns [o, o + s) to the free space, merging with its neighbours and the top.
  void release(uint64_t o, uint64_t s) {
    auto next = by_off_.lower_bound(o);
    if (next != by_off_.end() && o + s == next->first) {
      s += next->second;
      erase(next++);
    }
    if (next != by_off_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == o) {
        o = prev->first;
        s += prev->second;
        erase(prev);
      }
    }
    if (o + s == top) {  // the top block returns to the unused space above
      top = o;
      return;
    }
    by_off_.emplace(o, s);
    by_size_.emplace(s, o);
  }

  // Best fit: the block leaving the least waste after aligning, ties to the lowest offset.
  // Returns false when no block holds the request.
  bool take_best(uint64_t size, uint64_t align, uint64_t& start) {
    uint64_t best_waste = UINT64_MAX, best_off = 0, best_start = 0;
    bool found = false;
    for (auto it = by_size_.lower_bound({size, 0}); it != by_size_.end(); ++it) {
      const auto [bs, bo] = *it;
      // A block of size bs leaves at least bs - size - (align - 1): none beyond can do better.
      if (found && bs - size > best_waste + (align - 1)) break;
      const uint64_t st = align_up(bo, align);
      if (st + size > bo + bs) continue;
      const uint64_t waste = bo + bs - st - size;
      if (!found || waste < best_waste || (waste == best_waste && bo < best_off)) {
        found = true;
        best_waste = waste;
        best_off = bo;
        best_start = st;
      }
      if (align <= 1) break;  // waste is bs - size: the first fit is the best, lowest offset
    }
    if (!found) return false;
    const uint64_t bs = by_off_.at(best_off);
    erase(by_off_.find(best_off));
    if (best_start > best_off) release(best_off, best_start - best_off);
    const uint64_t end = best_start + size;
    if (best_off + bs > end) release(end, best_off + bs - end);
    start = best_start;
    return true;
  }

 private:
  void erase(std::map<uint64_t, uint64_t>::iterator it) {
    by_size_.erase({it->second, it->first});
    by_off_.erase(it);
  }
  std::map<uint64_t, uint64_t> by_off_;              // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (size, offset)
};

// ggml-style online best-fit in start order, which also measures the lower bound in the same
// sweep (the live byte count after every allocation). Returns the height. O(n log n).
uint64_t online_best_fit(std::span<const PlanBuffer> buffers, std::vector<uint64_t>& off,
                         uint64_t& lower_bound) {
  off.assign(buffers.size(), 0);
  std::vector<uint32_t> order = by_start(buffers);
  using Live = std::pair<int64_t, uint32_t>;  // (upper, index), min-heap on upper
  std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
  FreeBlocks free;
  uint64_t height = 0, live_bytes = 0;
  lower_bound = 0;
  for (uint32_t i : order) {
    const PlanBuffer& b = buffers[i];
    while (!live.empty() && live.top().first <= b.lower) {
      uint32_t j = live.top().second;
      live.pop();
      live_bytes -= buffers[j].size;
      free.release(off[j], buffers[j].size);
    }
    if (b.size == 0) continue;
    uint64_t start = 0;
    if (free.take_best(b.size, b.alignment, start)) {
      off[i] = start;
    } else {
      const uint64_t old_top = free.top;
      start = align_up(old_top, b.alignment);
      free.top = start + b.size;
      if (start > old_top) free.release(old_top, start - old_top);  // padding stays reusable
      off[i] = start;
    }
    height = std::max(height, off[i] + b.size);
    live_bytes += b.size;
    lower_bound = std::max(lower_bound, live_bytes);
    live.push({b.upper, i});
  }
  return height;
}

// Pairs of non-empty buffers live at a common step (the size of Problem::overlaps), counted in
// O(n log n) without building them; stops counting at `cap`.
uint64_t count_overlap_pairs(std::span<const PlanBuffer> buffers, uint64_t cap) {
  std::vector<uint32_t> order = by_start(buffers);
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> ends;
  uint64_t pairs = 0;
  for (uint32_t i : order) {
    const PlanBuffer& b = buffers[i];
    if (b.size == 0) continue;
    while (!ends.empty() && ends.top() <= b.lower) ends.pop();
    pairs += ends.size();
    if (pairs >= cap) return pairs;
    ends.push(b.upper);
  }
  return pairs;
}

}  // namespace

uint64_t live_bytes_lower_bound(std::span<const PlanBuffer> buffers) {
  std::vector<std::pair<int64_t, int64_t>> events;  // (step, +size at start / -size at end)
  events.reserve(buffers.size() * 2);
  for (const PlanBuffer& b : buffers) {
    if (b.size == 0) continue;
    events.push_back({b.lower, static_cast<int64_t>(b.size)});
    events.push_back({b.upper, -static_cast<int64_t>(b.size)});
  }
  // At equal steps ends (negative) sort before starts: lifetimes are half-open.
  std::sort(events.begin(), events.end());
  int64_t live = 0, best = 0;
  for (const auto& e : events) {
    live += e.second;
    best = std::max(best, live);
  }
  return static_cast<uint64_t>(best);
}

std::string check_offsets(std::span<const PlanBuffer> buffers, std::span<const uint64_t> offsets,
                          uint64_t height) {
  if (offsets.size() != buffers.size()) {
    return fmt::format("{} offsets for {} buffers", offsets.size(), buffers.size());
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const PlanBuffer& b = buffers[i];
    if (b.size == 0) continue;
    if (offsets[i] + b.size > height) {
      return fmt::format("buffer {} at [{}, {}) exceeds height {}", b.id, offsets[i],
                         offsets[i] + b.size, height);
    }
    if (b.alignment > 1 && offsets[i] % b.alignment != 0) {
      return fmt::format("buffer {} at offset {} breaks alignment {}", b.id, offsets[i],
                         b.alignment);
    }
  }
  // Sweep in start order keeping the live buffers by offset: they are pairwise disjoint (or a
  // violation was already returned), so a new buffer can only collide with its two neighbours
  // in offset order. O(n log n) whatever the overlap count.
  std::vector<uint32_t> order = by_start(buffers);
  using Live = std::pair<int64_t, uint32_t>;  // (upper, index)
  std::priority_queue<Live, std::vector<Live>, std::greater<>> ends;
  std::map<uint64_t, uint32_t> active;  // offset -> index
  auto overlap = [&](uint32_t i, uint32_t j) {
    const PlanBuffer& b = buffers[i];
    const PlanBuffer& c = buffers[j];
    return fmt::format("buffers {} [{}, {}) steps [{}, {}) and {} [{}, {}) steps [{}, {}) overlap",
                       b.id, offsets[i], offsets[i] + b.size, b.lower, b.upper, c.id, offsets[j],
                       offsets[j] + c.size, c.lower, c.upper);
  };
  for (uint32_t i : order) {
    const PlanBuffer& b = buffers[i];
    if (b.size == 0) continue;
    while (!ends.empty() && ends.top().first <= b.lower) {
      active.erase(offsets[ends.top().second]);
      ends.pop();
    }
    const uint64_t a0 = offsets[i], a1 = a0 + b.size;
    auto it = active.lower_bound(a0);
    if (it != active.end() && it->first < a1) return overlap(i, it->second);
    if (it != active.begin()) {
      auto prev = std::prev(it);
      if (prev->first + buffers[prev->second].size > a0) return overlap(i, prev->second);
    }
    active.emplace(a0, i);
    ends.push({b.upper, i});
  }
  return {};
}

namespace {

struct Portfolio {
  const Problem& p;
  std::vector<uint64_t> best;  // problem indices
  uint64_t best_height = UINT64_MAX;
  std::string method;

  bool done() const { return best_height <= p.lower_bound; }
  void offer(std::vector<uint64_t> off, std::string name) {
    uint64_t h = planner_detail::height_of(p, off);
    if (h < best_height) {
      best_height = h;
      best = std::move(off);
      method = std::move(name);
    }
  }
};

// Perfect packings up to this many buffers get the dives' full budget (see greedy_stages).
constexpr uint64_t kDiveFullSize = 800;

// Randomised restarts: a fixed order with its ranks jittered, so nearby orders get explored.
void randomized_restarts(Portfolio& pf, const std::vector<std::vector<uint32_t>>& bases,
                         int restarts, uint64_t seed,
                         std::chrono::steady_clock::time_point deadline) {
  std::mt19937_64 rng(seed);
  const size_t n = pf.p.n();
  std::vector<double> key(n);
  std::vector<uint32_t> order(n);
  for (int r = 0; r < restarts && !pf.done() && std::chrono::steady_clock::now() < deadline; ++r) {
    const auto& base = bases[static_cast<size_t>(r) % bases.size()];
    double width = 0.02 + 0.3 * std::uniform_real_distribution<double>(0, 1)(rng);
    std::uniform_real_distribution<double> jitter(0, width * static_cast<double>(n));
    for (size_t k = 0; k < n; ++k) key[base[k]] = static_cast<double>(k) + jitter(rng);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key[a] < key[b]; });
    if (r % 2 == 0) {
      pf.offer(planner_detail::gravity_dive(pf.p, order), "gravity-restart");
    } else {
      pf.offer(planner_detail::offline_best_fit(pf.p, order), "best-fit-restart");
    }
  }
}

// Local search over priority orders, decoded by the gravity dive: move one buffer earlier in the
// order (or swap two), keep the change when the height does not grow. Sideways moves are
// accepted because heights form long plateaus on tight instances; the sum of tops breaks ties.
void improve_order(Portfolio& pf, std::vector<uint32_t> order, int iters, uint64_t seed,
                   std::chrono::steady_clock::time_point deadline) {
  const Problem& p = pf.p;
  const size_t n = p.n();
  if (n < 2) return;
  std::mt19937_64 rng(seed);
  auto score = [&](const std::vector<uint64_t>& off) {
    uint64_t h = 0, sum = 0;
    for (size_t k = 0; k < n; ++k) {
      h = std::max(h, off[k] + p.size[k]);
      sum += off[k] + p.size[k];
    }
    return std::make_pair(h, sum);
  };
  std::vector<uint64_t> cur_off = planner_detail::gravity_dive(p, order);
  auto cur = score(cur_off);
  std::vector<uint32_t> cand;
  for (int it = 0; it < iters && !pf.done() && std::chrono::steady_clock::now() < deadline; ++it) {
    cand = order;
    size_t i = rng() % n, j = rng() % n;
    if (i == j) continue;
    if (rng() % 2) {
      std::swap(cand[i], cand[j]);
    } else {  // move the later one in front of the earlier
      if (i < j) std::swap(i, j);
      std::rotate(cand.begin() + static_cast<ptrdiff_t>(j),
                  cand.begin() + static_cast<ptrdiff_t>(i),
                  cand.begin() + static_cast<ptrdiff_t>(i) + 1);
    }
    std::vector<uint64_t> off = planner_detail::gravity_dive(p, cand);
    auto sc = score(off);
    if (sc <= cur) {
      cur = sc;
      order.swap(cand);
      if (sc.first < pf.best_height) pf.offer(std::move(off), "gravity-local-search");
    }
  }
}

// `seconds` after `t`, saturating: a budget of 1e300 s means no deadline, not an overflow.
std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point t,
                                                     double seconds) {
  constexpr double kMaxSeconds = 1e9;  // ~31 years: "no limit" in practice
  const double s = seconds > 0 ? std::min(seconds, kMaxSeconds) : 0.0;
  return t + std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

// Stages 2-5 of fast mode (see offset_planner.h), each checking `deadline` between passes.
void greedy_stages(Portfolio& pf, const PlanParams& params,
                   std::chrono::steady_clock::time_point deadline) {
  const Problem& p = pf.p;
  auto out_of_time = [&] { return std::chrono::steady_clock::now() >= deadline; };
  // 2. Fixed orders, both packers each.
  std::vector<std::vector<uint32_t>> bases;
  const std::pair<OrderKey, const char*> keys[] = {{OrderKey::Pressure, "pressure"},
                                                   {OrderKey::Area, "area"},
                                                   {OrderKey::Size, "size"},
                                                   {OrderKey::Length, "length"},
                                                   {OrderKey::Start, "start"}};
  for (const auto& [key, name] : keys) {
    if (pf.done() || (!bases.empty() && out_of_time())) break;
    bases.push_back(planner_detail::make_order(p, key));
    pf.offer(planner_detail::gravity_dive(p, bases.back()), fmt::format("gravity-{}", name));
    if (pf.done() || out_of_time()) break;
    pf.offer(planner_detail::offline_best_fit(p, bases.back()), fmt::format("best-fit-{}", name));
  }
  // 2b. Searches for a plan at the lower bound, when no section has slack there (a perfect
  // packing): nested, decomposition, time sweep. The dives below waste bytes in the first rows,
  // which these searches cannot do.
  const bool perfect = planner_detail::sweep_applies(p, p.lower_bound);
  // Plans above the bound from the searches' structures (below) are held aside until the dives
  // are done: started from them, the dives stall sooner and ended higher on some instances
  // where, started from the greedy plan, they get lower on their own.
  Portfolio aside{p, {}, UINT64_MAX, {}};
  // The nested search first: O(n * live^2) when no boundary needs splitting into runs, and it
  // packs allocator-like traces on which the searches below spend their budgets.
  if (!pf.done() && params.nested_steps > 0 && !out_of_time()) {
    std::vector<uint64_t> off, unaligned;
    if (planner_detail::nested_search(p, params.nested_steps, off, &unaligned).found) {
      pf.offer(std::move(off), "nested");
    } else if (!unaligned.empty()) {
      // A nested plan at the bound but for alignments: its offsets as the order of a gravity
      // dive (and of best fit) with them, which lifts each misaligned buffer and what sits on it
      // by a little; on mixed alignments this lands within a few percent of the bound.
      std::vector<uint32_t> order(p.n());
      std::iota(order.begin(), order.end(), 0u);
      std::stable_sort(order.begin(), order.end(),
                       [&](uint32_t a, uint32_t b) { return unaligned[a] < unaligned[b]; });
      aside.offer(planner_detail::gravity_dive(p, order), "nested-unaligned");
      aside.offer(planner_detail::offline_best_fit(p, order), "nested-unaligned");
    }
  }
  if (!pf.done() && params.decompose_steps > 0 && !out_of_time()) {
    std::vector<uint64_t> off;
    // A miss still gets a plan from the decomposition's trees, above the bound (usually lower
    // than the dives reach).
    planner_detail::RelaxedPlan relaxed;
    if (planner_detail::decompose_search(p, params.decompose_steps, off, &relaxed).found) {
      pf.offer(std::move(off), "decompose");
    } else if (relaxed.height < UINT64_MAX) {
      aside.offer(std::move(relaxed.offsets), "decompose-relaxed");
    }
  }
  if (aside.done()) pf.offer(std::move(aside.best), aside.method);  // at the bound: optimal
  if (!pf.done() && params.sweep_nodes > 0 && !out_of_time()) {
    std::vector<uint64_t> off;
    if (planner_detail::sweep_both_ways(p, params.sweep_nodes, off).found) {
      pf.offer(std::move(off), "time-sweep");
    }
  }
  // 3. Bound-guided dives and the perturbation walk (the strong part on hard instances).
  if (!pf.done() && !bases.empty() && params.search_dives > 0) {
    planner_detail::BoundSearchParams bp;
    bp.dives = params.search_dives;
    bp.work = params.search_work;
    bp.seed = params.seed;
    bp.deadline = deadline;
    // A perfect packing that the searches above did not pack: the dives still lower the
    // height, but they seldom reach the bound (within +10% of it on 2 of about 85 such misses
    // in 600 instances), and their gains come early, while a miss has already paid for the
    // searches (over half a second of CPU on the largest). So half the budget, shrinking as 1/n
    // past kDiveFullSize buffers (the stages before cost more there: fast mode stays under a
    // second), and a stop once a quarter of that brings nothing (half before the first gain).
    if (perfect) {
      const uint64_t n = std::max<uint64_t>(p.n(), 1);
      bp.work = params.search_work / 2 / n * std::min(n, kDiveFullSize);
      bp.stall_work = bp.work / 4;
      bp.work_check = planner_detail::BoundSearchParams::WorkCheck::InsideDives;
    }
    uint64_t h = pf.best_height;
    planner_detail::BoundSearchStats st = planner_detail::bound_search(p, bases, bp, pf.best, h);
    if (st.improvements > 0) {
      pf.best_height = h;
      pf.method = "bound-dive";
    }
  }
  if (!pf.done() && aside.best_height < pf.best_height)
    pf.offer(std::move(aside.best), aside.method);
  // 4. Randomised restarts around the fixed orders (not on perfect packings: none of 600 was
  // improved by them, at up to 0.1 s of CPU each).
  if (!pf.done() && !bases.empty() && !perfect)
    randomized_restarts(pf, bases, params.restarts, params.seed, deadline);
  // 5. Local search from the best fixed order.
  if (!pf.done() && !bases.empty() && params.improve_iters > 0) {
    improve_order(pf, bases.front(), params.improve_iters, params.seed ^ 0x9e3779b97f4a7c15ull,
                  deadline);
  }
}

}  // namespace

OffsetPlan plan_offsets(std::span<const PlanBuffer> buffers, const PlanParams& params) {
  auto t0 = std::chrono::steady_clock::now();
  validate(buffers);
  OffsetPlan plan;
  // 1. Online best-fit: O(n log n), and at the lower bound on typical LLM graphs.
  uint64_t lb = 0;
  plan.height = online_best_fit(buffers, plan.offsets, lb);
  plan.lower_bound = lb;
  plan.method = "online-best-fit";
  const bool large =
      (plan.height > lb || params.mode == PlanMode::Exact) &&
      count_overlap_pairs(buffers, params.max_overlap_pairs) >= params.max_overlap_pairs;
  if (large) plan.method = "online-best-fit (large instance)";
  if (!large && (plan.height > lb || params.mode == PlanMode::Exact)) {
    Problem p = planner_detail::build_problem(buffers);
    MINFER_ASSERT(p.lower_bound == lb, "two lower-bound sweeps disagree");
    Portfolio pf{p, {}, UINT64_MAX, {}};
    {
      std::vector<uint64_t> start(p.n());
      for (size_t k = 0; k < p.n(); ++k) start[k] = plan.offsets[p.orig[k]];
      pf.offer(std::move(start), plan.method);
    }
    // 2-5. The greedy portfolio, within the fast budget.
    greedy_stages(pf, params, deadline_after(t0, params.fast_time_limit_s));
    // 6. Exact: branch and bound from the best greedy plan.
    bool exhausted = false;
    const bool fits = params.capacity > 0 && pf.best_height <= params.capacity;
    if (params.mode == PlanMode::Exact && !pf.done() && !fits && p.n() > 0) {
      const auto search_start = std::chrono::steady_clock::now();
      const auto deadline = deadline_after(search_start, params.time_limit_s);
      auto us_since_t0 = [&] {
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
            .count();
      };
      // A perfect packing: the time sweep is complete at the bound and usually stronger than
      // the branch and bound there; it gets the first half of the time.
      // (With a capacity above the bound the question is easier than the sweep's.)
      std::vector<uint64_t> off;
      planner_detail::TargetSearchResult sw;
      if (params.capacity == 0 || params.capacity == p.lower_bound) {
        sw = planner_detail::sweep_until(
            p, uint64_t{1} << 21, deadline_after(search_start, params.time_limit_s / 2), off);
      }
      plan.search_nodes = sw.nodes;
      if (sw.found) {
        pf.offer(std::move(off), "time-sweep");
        plan.best_found_us = us_since_t0();
      }
      if (!pf.done()) {
        const double bb_start_us = us_since_t0();
        planner_detail::ExactResult r =
            planner_detail::exact_search(p, pf.best, pf.best_height, deadline, params.capacity);
        plan.search_nodes += r.nodes;
        exhausted = r.exhausted;
        if (r.improved) {
          pf.method = "branch-and-bound";
          plan.best_found_us = bb_start_us + r.best_found_s * 1e6;
        }
      }
    }
    plan.offsets.assign(buffers.size(), 0);
    for (size_t k = 0; k < p.n(); ++k) plan.offsets[p.orig[k]] = pf.best[k];
    plan.height = p.n() == 0 ? 0 : pf.best_height;
    plan.method = pf.method;
    plan.proven_optimal = exhausted;
  }
  plan.proven_optimal = plan.proven_optimal || plan.height <= plan.lower_bound;
  plan.plan_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (plan.best_found_us == 0) plan.best_found_us = plan.plan_us;
  return plan;
}

}  // namespace minfer
