// Offset planner internals: the normalised Problem, priority orders and the two offline greedy
// packers (gravity dive, best-fit into gaps). See offset_planner.h for the strategy.
#include <algorithm>
#include <numeric>
#include <queue>
#include <tuple>

#include "planner/offset_planner_detail.h"

namespace minfer::planner_detail {

Problem build_problem(std::span<const PlanBuffer> buffers) {
  Problem p;
  for (uint32_t i = 0; i < buffers.size(); ++i) {
    const PlanBuffer& b = buffers[i];
    if (b.size == 0) continue;  // takes no bytes: offset 0, never in conflict
    p.orig.push_back(i);
    p.lower.push_back(b.lower);
    p.upper.push_back(b.upper);
    p.size.push_back(b.size);
    p.align.push_back(std::max<uint64_t>(1, b.alignment));
  }
  const size_t n = p.n();
  p.step = 0;
  // Alignment 1 is no constraint (offsets are then sums of sizes), so it must not pull the step
  // down to one byte: on ../shared/planner-bench that made the exact descent crawl in 1-byte steps.
  for (size_t k = 0; k < n; ++k) {
    p.step = std::gcd(p.step, p.size[k]);
    if (p.align[k] > 1) p.step = std::gcd(p.step, p.align[k]);
  }
  if (p.step == 0) p.step = 1;

  // Sections between consecutive distinct endpoints.
  std::vector<int64_t> pts;
  pts.reserve(2 * n);
  for (size_t k = 0; k < n; ++k) {
    pts.push_back(p.lower[k]);
    pts.push_back(p.upper[k]);
  }
  std::sort(pts.begin(), pts.end());
  pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
  const size_t n_sec = pts.empty() ? 0 : pts.size() - 1;
  p.section_buffers.assign(n_sec, {});
  p.section_total.assign(n_sec, 0);
  p.sec_lo.resize(n);
  p.sec_hi.resize(n);
  auto index_of = [&](int64_t t) {
    return static_cast<uint32_t>(std::lower_bound(pts.begin(), pts.end(), t) - pts.begin());
  };
  for (uint32_t k = 0; k < n; ++k) {
    p.sec_lo[k] = index_of(p.lower[k]);
    p.sec_hi[k] = index_of(p.upper[k]);
    for (uint32_t s = p.sec_lo[k]; s < p.sec_hi[k]; ++s) {
      p.section_buffers[s].push_back(k);
      p.section_total[s] += p.size[k];
    }
  }
  p.max_total.assign(n, 0);
  for (uint32_t k = 0; k < n; ++k) {
    for (uint32_t s = p.sec_lo[k]; s < p.sec_hi[k]; ++s) {
      p.max_total[k] = std::max(p.max_total[k], p.section_total[s]);
    }
  }
  for (uint64_t t : p.section_total) p.lower_bound = std::max(p.lower_bound, t);

  // Overlapping pairs by a sweep in start order.
  p.overlaps.assign(n, {});
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return p.lower[a] < p.lower[b]; });
  std::vector<uint32_t> active;
  for (uint32_t b : order) {
    std::erase_if(active, [&](uint32_t a) { return p.upper[a] <= p.lower[b]; });
    for (uint32_t a : active) {
      p.overlaps[a].push_back(b);
      p.overlaps[b].push_back(a);
    }
    active.push_back(b);
  }
  return p;
}

uint64_t height_of(const Problem& p, const std::vector<uint64_t>& off) {
  uint64_t h = 0;
  for (size_t k = 0; k < p.n(); ++k) h = std::max(h, off[k] + p.size[k]);
  return h;
}

std::vector<uint32_t> make_order(const Problem& p, OrderKey key) {
  std::vector<uint32_t> order(p.n());
  std::iota(order.begin(), order.end(), 0u);
  auto length = [&](uint32_t k) { return static_cast<uint64_t>(p.upper[k] - p.lower[k]); };
  auto area = [&](uint32_t k) {
    return static_cast<long double>(p.size[k]) * static_cast<long double>(length(k));
  };
  // Every order ends with the index so it is a strict weak order and deterministic.
  auto cmp = [&](uint32_t a, uint32_t b) {
    switch (key) {
      case OrderKey::Pressure:
        return std::make_tuple(-static_cast<long double>(p.max_total[a]), -area(a), a) <
               std::make_tuple(-static_cast<long double>(p.max_total[b]), -area(b), b);
      case OrderKey::Area:
        return std::make_tuple(-area(a), -static_cast<long double>(p.max_total[a]), a) <
               std::make_tuple(-area(b), -static_cast<long double>(p.max_total[b]), b);
      case OrderKey::Size:
        return std::make_tuple(p.size[b], length(b), a) < std::make_tuple(p.size[a], length(a), b);
      case OrderKey::Length:
        return std::make_tuple(length(b), p.size[b], a) < std::make_tuple(length(a), p.size[a], b);
      case OrderKey::Start:
        return std::make_tuple(p.lower[a], p.size[b], a) <
               std::make_tuple(p.lower[b], p.size[a], b);
    }
    return a < b;
  };
  std::sort(order.begin(), order.end(), cmp);
  return order;
}

// Repeatedly place the unplaced buffer with the lowest feasible offset (just above every placed
// buffer it overlaps), ties broken by priority. This is the first dive of the exact search
// without its pruning: it never leaves room below a buffer that an unplaced buffer could use
// at that moment, which makes it strong on tight instances.
std::vector<uint64_t> gravity_dive(const Problem& p, std::span<const uint32_t> order) {
  const size_t n = p.n();
  std::vector<uint32_t> rank(n);
  for (uint32_t r = 0; r < n; ++r) rank[order[r]] = r;
  std::vector<uint64_t> min_off(n, 0), off(n, 0);
  std::vector<uint8_t> placed(n, 0);
  using Entry = std::tuple<uint64_t, uint32_t, uint32_t>;  // (min offset, rank, buffer)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (uint32_t k = 0; k < n; ++k) {
    min_off[k] = fit_up(p, k, 0);
    heap.emplace(min_off[k], rank[k], k);
  }
  while (!heap.empty()) {
    auto [o, r, k] = heap.top();
    heap.pop();
    if (placed[k] || o != min_off[k]) continue;  // stale entry
    placed[k] = 1;
    off[k] = o;
    const uint64_t top = o + p.size[k];
    for (uint32_t j : p.overlaps[k]) {
      if (placed[j] || min_off[j] >= top) continue;
      min_off[j] = fit_up(p, j, top);
      heap.emplace(min_off[j], rank[j], j);
    }
  }
  return off;
}

// In priority order, put each buffer into the smallest gap left between the placed buffers it
// overlaps (lowest offset on ties), else on top of them. With size order this is TFLite's
// greedy-by-size.
std::vector<uint64_t> offline_best_fit(const Problem& p, std::span<const uint32_t> order) {
  const size_t n = p.n();
  std::vector<uint64_t> off(n, 0);
  std::vector<uint8_t> placed(n, 0);
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  for (uint32_t k : order) {
    busy.clear();
    for (uint32_t j : p.overlaps[k]) {
      if (placed[j]) busy.emplace_back(off[j], off[j] + p.size[j]);
    }
    std::sort(busy.begin(), busy.end());
    uint64_t cursor = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
    for (const auto& [b0, b1] : busy) {
      uint64_t start = fit_up(p, k, cursor);
      if (b0 > cursor && start + p.size[k] <= b0 && b0 - cursor < best_gap) {
        best_gap = b0 - cursor;
        best = start;
      }
      cursor = std::max(cursor, b1);
    }
    off[k] = best != UINT64_MAX ? best : fit_up(p, k, cursor);
    placed[k] = 1;
  }
  return off;
}

}  // namespace minfer::planner_detail
