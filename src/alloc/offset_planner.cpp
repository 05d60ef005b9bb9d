// Offset planner: validation, the lower bound, the invariant checker, the greedy portfolio and
// the mode dispatcher. The branch and bound lives in offset_planner_exact.cpp.
#include "alloc/offset_planner.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <queue>
#include <random>
#include <utility>

#include "alloc/offset_planner_detail.h"
#include "common/error.h"

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
  for (const PlanBuffer& b : buffers) {
    if (b.upper <= b.lower) {
      fail(ErrorKind::InvalidArgument, "planner: buffer {}: upper {} <= lower {}", b.id, b.upper,
           b.lower);
    }
    if (b.alignment == 0) fail(ErrorKind::InvalidArgument, "planner: buffer {}: alignment 0", b.id);
    // Keep every sum the planner forms (offset + size + padding) far from 2^64.
    if (b.size > (uint64_t{1} << 60) || b.alignment > (uint64_t{1} << 40)) {
      fail(ErrorKind::InvalidArgument, "planner: buffer {}: size {} / alignment {} too large", b.id,
           b.size, b.alignment);
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

struct Block {
  uint64_t off, size;
};

// ggml-style online best-fit in start order, which also measures the lower bound in the same
// sweep (the live byte count after every allocation). Returns the height.
uint64_t online_best_fit(std::span<const PlanBuffer> buffers, std::vector<uint64_t>& off,
                         uint64_t& lower_bound) {
  off.assign(buffers.size(), 0);
  std::vector<uint32_t> order = by_start(buffers);
  using Live = std::pair<int64_t, uint32_t>;  // (upper, index), min-heap on upper
  std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
  std::vector<Block> free_list;  // sorted by offset, coalesced
  uint64_t top = 0, height = 0, live_bytes = 0;
  lower_bound = 0;
  auto release = [&](uint64_t o, uint64_t s) {
    auto it = std::lower_bound(free_list.begin(), free_list.end(), o,
                               [](const Block& b, uint64_t v) { return b.off < v; });
    it = free_list.insert(it, Block{o, s});
    if (it + 1 != free_list.end() && it->off + it->size == (it + 1)->off) {
      it->size += (it + 1)->size;
      free_list.erase(it + 1);
    }
    if (it != free_list.begin() && (it - 1)->off + (it - 1)->size == it->off) {
      (it - 1)->size += it->size;
      it = free_list.erase(it) - 1;
    }
    if (it->off + it->size == top) {  // the top block returns to the unused space above
      top = it->off;
      free_list.erase(it);
    }
  };
  for (uint32_t i : order) {
    const PlanBuffer& b = buffers[i];
    while (!live.empty() && live.top().first <= b.lower) {
      uint32_t j = live.top().second;
      live.pop();
      live_bytes -= buffers[j].size;
      release(off[j], buffers[j].size);
    }
    if (b.size == 0) continue;
    // Best fit: the smallest free block that holds the aligned request.
    size_t best = SIZE_MAX;
    uint64_t best_waste = UINT64_MAX, best_start = 0;
    for (size_t k = 0; k < free_list.size(); ++k) {
      uint64_t start = align_up(free_list[k].off, b.alignment);
      uint64_t end = free_list[k].off + free_list[k].size;
      if (start + b.size <= end && end - start - b.size < best_waste) {
        best = k;
        best_waste = end - start - b.size;
        best_start = start;
      }
    }
    if (best != SIZE_MAX) {
      Block blk = free_list[best];
      free_list.erase(free_list.begin() + static_cast<ptrdiff_t>(best));
      if (best_start > blk.off) release(blk.off, best_start - blk.off);
      uint64_t end = best_start + b.size;
      if (blk.off + blk.size > end) release(end, blk.off + blk.size - end);
      off[i] = best_start;
    } else {
      uint64_t start = align_up(top, b.alignment);
      if (start > top) release(top, start - top);  // padding stays reusable
      off[i] = start;
      top = start + b.size;
    }
    height = std::max(height, off[i] + b.size);
    live_bytes += b.size;
    lower_bound = std::max(lower_bound, live_bytes);
    live.push({b.upper, i});
  }
  return height;
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
  // Sweep in start order; compare each buffer with everything still live.
  std::vector<uint32_t> order = by_start(buffers);
  std::vector<uint32_t> active;
  for (uint32_t i : order) {
    const PlanBuffer& b = buffers[i];
    if (b.size == 0) continue;
    std::erase_if(active, [&](uint32_t j) { return buffers[j].upper <= b.lower; });
    for (uint32_t j : active) {
      uint64_t a0 = offsets[i], a1 = a0 + b.size, b0 = offsets[j], b1 = b0 + buffers[j].size;
      if (a0 < b1 && b0 < a1) {
        return fmt::format(
            "buffers {} [{}, {}) steps [{}, {}) and {} [{}, {}) steps [{}, {}) overlap", b.id, a0,
            a1, b.lower, b.upper, buffers[j].id, b0, b1, buffers[j].lower, buffers[j].upper);
      }
    }
    active.push_back(i);
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

// Randomised restarts: a fixed order with its ranks jittered, so nearby orders get explored.
void randomized_restarts(Portfolio& pf, const std::vector<std::vector<uint32_t>>& bases,
                         int restarts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t n = pf.p.n();
  std::vector<double> key(n);
  std::vector<uint32_t> order(n);
  for (int r = 0; r < restarts && !pf.done(); ++r) {
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
void improve_order(Portfolio& pf, std::vector<uint32_t> order, int iters, uint64_t seed) {
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
  for (int it = 0; it < iters && !pf.done(); ++it) {
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
  if (plan.height > lb || params.mode == PlanMode::Exact) {
    Problem p = planner_detail::build_problem(buffers);
    MINFER_ASSERT(p.lower_bound == lb, "two lower-bound sweeps disagree");
    Portfolio pf{p, {}, UINT64_MAX, {}};
    {
      std::vector<uint64_t> start(p.n());
      for (size_t k = 0; k < p.n(); ++k) start[k] = plan.offsets[p.orig[k]];
      pf.offer(std::move(start), plan.method);
    }
    // 2. Fixed orders, both packers each.
    std::vector<std::vector<uint32_t>> bases;
    const std::pair<OrderKey, const char*> keys[] = {{OrderKey::Pressure, "pressure"},
                                                     {OrderKey::Area, "area"},
                                                     {OrderKey::Size, "size"},
                                                     {OrderKey::Length, "length"},
                                                     {OrderKey::Start, "start"}};
    for (const auto& [key, name] : keys) {
      if (pf.done()) break;
      bases.push_back(planner_detail::make_order(p, key));
      pf.offer(planner_detail::gravity_dive(p, bases.back()), fmt::format("gravity-{}", name));
      if (pf.done()) break;
      pf.offer(planner_detail::offline_best_fit(p, bases.back()), fmt::format("best-fit-{}", name));
    }
    // 3. Bound-guided dives and the perturbation walk (the strong part on hard instances).
    if (!pf.done() && !bases.empty() && params.search_dives > 0) {
      planner_detail::BoundSearchParams bp;
      bp.dives = params.search_dives;
      bp.seed = params.seed;
      uint64_t h = pf.best_height;
      planner_detail::BoundSearchStats st = planner_detail::bound_search(p, bases, bp, pf.best, h);
      if (st.improvements > 0) {
        pf.best_height = h;
        pf.method = "bound-dive";
      }
    }
    // 4. Randomised restarts around the fixed orders.
    if (!pf.done() && !bases.empty()) randomized_restarts(pf, bases, params.restarts, params.seed);
    // 5. Local search from the best fixed order.
    if (!pf.done() && !bases.empty() && params.improve_iters > 0) {
      improve_order(pf, bases.front(), params.improve_iters, params.seed ^ 0x9e3779b97f4a7c15ull);
    }
    // 6. Exact: branch and bound from the best greedy plan.
    bool exhausted = false;
    const bool fits = params.capacity > 0 && pf.best_height <= params.capacity;
    if (params.mode == PlanMode::Exact && !pf.done() && !fits && p.n() > 0) {
      auto deadline = std::chrono::steady_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(params.time_limit_s * 1e6));
      const double search_start_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      planner_detail::ExactResult r =
          planner_detail::exact_search(p, pf.best, pf.best_height, deadline, params.capacity);
      plan.search_nodes = r.nodes;
      exhausted = r.exhausted;
      if (r.improved) {
        pf.method = "branch-and-bound";
        plan.best_found_us = search_start_us + r.best_found_s * 1e6;
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
