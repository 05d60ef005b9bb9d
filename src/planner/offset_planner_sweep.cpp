// Offset planner internals: the time-sweep search for a packing with no slack (issue 21).
//
// When every time section that holds a buffer is exactly full at the target height H (a perfect
// packing at its lower bound), every byte of every section is covered. Sweeping time left to
// right, the buffers born at a section boundary must then tile exactly the bytes that the
// buffers still live there leave free, and nothing else: the choice at each boundary is only
// how to order the newborns inside the free intervals. This search makes that choice bottom-up
// (the lowest free byte of the section gets one of the newborns that fits there; one per class
// of identical buffers), section after section, backtracking on failure. It suits instances
// whose buffers are born a few at a time (allocator-like traces); a bottom-left search over
// bytes (MiniMalloc-style, at the same target) was tried first and stalled: docs/PLANNER.md.
//
// Pruning: a transposition table over the state at each section's start (the section and the
// offsets of the buffers live across its left boundary: the future depends on nothing else); a
// boundary no buffer crosses is a cut: everything to its left is committed, so a failure on its
// right ends the search instead of retrying the left side's alternatives; and a closed run of
// adjacent buffers dying at the same boundary frees one piece there, which only buffers born
// there can tile, so its size must be one of their subset sums (the test that makes the search
// work on allocator traces).
//
// Complete for a target with no slack, so an exhausted search proves no packing of that height
// exists (`TargetSearchResult::exhausted`; up to transposition-table collisions, ~2^-40); not
// applicable with slack (returns not found at once). Deterministic node budget (plus an
// optional deadline, exact mode). Cost per node: O(newborns of the section + the runs walked);
// per section start O(live log live); memory O(n) for the subset sums (at most 2^12 / 12 per
// buffer: sets of at most 12) plus a 2 MiB table.
// Thread safety: none needed (all state is local to one call).
#include <algorithm>
#include <bit>
#include <chrono>

#include "common/error.h"
#include "planner/offset_planner_detail.h"

namespace minfer::planner_detail {
namespace {

constexpr int kTableBits = 18;          // 2 MiB: the whole problem's sweep
constexpr size_t kMaxSumSet = 12;       // newborns per section for the subset-sum test
constexpr uint32_t kEdge = UINT32_MAX;  // neighbour: the floor (0) or the ceiling (H)
constexpr uint32_t kUnknown = UINT32_MAX - 1;

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

struct Gap {
  uint64_t lo, hi;        // free bytes [lo, hi)
  uint32_t below, above;  // the live buffers bounding it (kEdge: floor / ceiling)
};

class SweepSearch {
 public:
  SweepSearch(const Problem& p, uint64_t target, uint64_t budget, uint64_t base = 0,
              int table_bits = kTableBits)
      : p_(p),
        h_(target),
        budget_(budget),
        base_(base),
        ns_(static_cast<uint32_t>(p.section_total.size())),
        table_mask_((size_t{1} << table_bits) - 1) {
    born_.assign(ns_, {});
    for (uint32_t k = 0; k < p.n(); ++k) born_[p.sec_lo[k]].push_back(k);
    // Largest first (the hardest to fit); identical buffers adjacent for the twin rule.
    for (auto& list : born_) {
      std::sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
        if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
        if (p.sec_hi[a] != p.sec_hi[b]) return p.sec_hi[a] > p.sec_hi[b];
        if (p.align[a] != p.align[b]) return p.align[a] > p.align[b];
        return a < b;
      });
    }
    // Subset sums of each section's newborns (small sets only): the bytes freed at a boundary
    // in one piece must be tiled by some of the buffers born there.
    sums_.assign(ns_ + 1, {});
    for (uint32_t s = 0; s < ns_; ++s) {
      const auto& nb = born_[s];
      if (nb.empty() || nb.size() > kMaxSumSet) continue;
      for (uint32_t m = 1; m < (1u << nb.size()); ++m) {
        uint64_t sum = 0;
        for (size_t i = 0; i < nb.size(); ++i) {
          if (m >> i & 1) sum += p.size[nb[i]];
        }
        sums_[s].push_back(sum);
      }
      std::sort(sums_[s].begin(), sums_[s].end());
      sums_[s].erase(std::unique(sums_[s].begin(), sums_[s].end()), sums_[s].end());
    }
    down_.assign(p.n(), kUnknown);
    up_.assign(p.n(), kUnknown);
    placed_.assign(p.n(), 0);
    off_.assign(p.n(), 0);
    gaps_.assign(ns_ + 1, {});
    cont_.assign(ns_ + 1, {});
    order_.assign(ns_ + 1, {});
    tt_.assign(table_mask_ + 1, 0);
  }

  bool run() { return section(0); }
  uint64_t nodes() const { return nodes_; }
  bool exhausted() const { return !aborted_; }
  const std::vector<uint64_t>& offsets() const { return off_; }

 private:
  bool twins(uint32_t a, uint32_t b) const {
    if (hook_ && (hook_->special[a] || hook_->special[b])) return false;
    return p_.sec_hi[a] == p_.sec_hi[b] && p_.size[a] == p_.size[b] && p_.align[a] == p_.align[b];
  }

  // Adjacency in the layout (down_/up_: the buffer just below/above, as last set), undone
  // through the trail.
  void link(uint32_t below, uint32_t above) {
    if (below != kEdge) {
      trail_.push_back({below, true, up_[below]});
      up_[below] = above;
    }
    if (above != kEdge) {
      trail_.push_back({above, false, down_[above]});
      down_[above] = below;
    }
  }
  void unlink_to(size_t mark) {
    while (trail_.size() > mark) {
      const Link l = trail_.back();
      trail_.pop_back();
      (l.up ? up_ : down_)[l.buffer] = l.old;
    }
  }
  // When the run of adjacent buffers dying together with b is closed (its outer neighbours are
  // the floor, the ceiling or buffers that outlive it), the run frees one piece at their death,
  // which some of the buffers born there must tile: its size must be one of their subset sums.
  bool run_ok(uint32_t b) const {
    const uint32_t d = p_.sec_hi[b];
    if (d >= ns_ || p_.section_total[d] == 0 || born_[d].size() > kMaxSumSet) return true;
    uint64_t bytes = p_.size[b];
    for (int dir = 0; dir < 2; ++dir) {
      uint32_t x = b;
      for (;;) {
        const uint32_t y = dir == 0 ? down_[x] : up_[x];
        if (y == kEdge) break;
        if (y == kUnknown || p_.sec_hi[y] < d) return true;  // open: that side comes later
        if (p_.sec_hi[y] > d) break;
        bytes += p_.size[y];
        x = y;
      }
    }
    return std::binary_search(sums_[d].begin(), sums_[d].end(), bytes);
  }

  // Starts section s: its free intervals are [0, H) minus the buffers live across its left
  // boundary.
  bool section(uint32_t s) {
    while (s < ns_ && p_.section_total[s] == 0) ++s;
    if (s >= ns_) return true;
    std::vector<Gap>& gaps = gaps_[s];
    gaps.clear();
    // The buffers live across the left boundary, by offset: those of the previous section (its
    // own continuing ones and its newborns, both already in offset order) that outlive it.
    std::vector<uint32_t>& used = cont_[s];
    used.clear();
    if (s > 0 && p_.section_total[s - 1] != 0) {
      const std::vector<uint32_t>& a = cont_[s - 1];
      const std::vector<uint32_t>& b = order_[s - 1];
      size_t i = 0, j = 0;
      while (i < a.size() || j < b.size()) {
        const bool take_a = j == b.size() || (i < a.size() && off_[a[i]] < off_[b[j]]);
        const uint32_t x = take_a ? a[i++] : b[j++];
        if (p_.sec_hi[x] > s) used.push_back(x);
      }
    }
    uint64_t key = mix(s + 1);
    for (uint32_t b : used) key ^= mix((uint64_t(b) << 32) ^ off_[b] ^ 0x5bd1e995ull);
    const bool cut = used.empty() && s > 0;
    uint64_t at = 0;
    uint32_t below = kEdge;
    for (uint32_t b : used) {
      if (off_[b] > at) gaps.push_back({at, off_[b], below, b});
      at = off_[b] + p_.size[b];
      below = b;
    }
    if (at < h_) gaps.push_back({at, h_, below, kEdge});
    if (key == 0) key = 1;
    uint64_t& slot = tt_[key & table_mask_];
    if (slot == key) return false;
    const bool ok =
        fill(s, 0, gaps.empty() ? h_ : gaps[0].lo, gaps.empty() ? kEdge : gaps[0].below);
    if (!ok && !aborted_) {
      slot = key;
      // Nothing to the left of a cut can change what happens to its right.
      if (cut) hopeless_ = true;
    }
    return ok;
  }

  // Fills section s's gaps from gap g, byte `at` (just above buffer `below`), upwards with its
  // newborns.
  bool fill(uint32_t s, size_t g, uint64_t at, uint32_t below) {
    std::vector<Gap>& gaps = gaps_[s];
    while (g < gaps.size() && at >= gaps[g].hi) {
      ++g;
      if (g < gaps.size()) at = gaps[g].lo, below = gaps[g].below;
    }
    if (g >= gaps.size()) return section(s + 1);  // full (no slack: every newborn is placed)
    if (++nodes_ > budget_ ||
        ((nodes_ & 0xffff) == 0 && std::chrono::steady_clock::now() >= deadline_)) {
      aborted_ = true;
      return false;
    }
    const uint64_t room = gaps[g].hi - at;
    uint32_t prev = UINT32_MAX;
    for (uint32_t b : born_[s]) {
      if (placed_[b] || p_.size[b] > room || (base_ + at) % p_.align[b] != 0) continue;
      if (prev != UINT32_MAX && twins(prev, b)) continue;
      if (hook_ && hook_->special[b] && !hook_->accept(b, base_ + at)) continue;
      prev = b;
      placed_[b] = 1;
      off_[b] = at;
      order_[s].push_back(b);
      const size_t mark = trail_.size();
      link(below, b);
      const bool closes = at + p_.size[b] == gaps[g].hi;
      if (closes) link(b, gaps[g].above);
      bool ok = run_ok(b) && (below == kEdge || run_ok(below)) &&
                (!closes || gaps[g].above == kEdge || run_ok(gaps[g].above));
      if (ok && fill(s, g, at + p_.size[b], b)) return true;
      unlink_to(mark);
      order_[s].pop_back();
      placed_[b] = 0;
      if (aborted_ || hopeless_) return false;
    }
    return false;
  }

  const Problem& p_;
  const uint64_t h_, budget_, base_;  // base_: where offset 0 lies in the arena (alignment)
  const uint32_t ns_;
  const size_t table_mask_;
  std::vector<std::vector<uint32_t>> born_;   // per section: buffers starting there
  std::vector<std::vector<Gap>> gaps_;        // per section: free intervals at its start
  std::vector<std::vector<uint32_t>> cont_;   // per section: live across its start, by offset
  std::vector<std::vector<uint32_t>> order_;  // per section: newborns placed, by offset
  struct Link {
    uint32_t buffer;
    bool up;
    uint32_t old;
  };
  std::vector<std::vector<uint64_t>> sums_;  // per section: subset sums of its newborns
  std::vector<uint32_t> down_, up_;
  std::vector<Link> trail_;
  std::vector<uint8_t> placed_;
  std::vector<uint64_t> off_, tt_;
  uint64_t nodes_ = 0;
  bool aborted_ = false, hopeless_ = false;

 public:
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  const SweepHook* hook_ = nullptr;
};

}  // namespace

bool sweep_applies(const Problem& p, uint64_t target) {
  if (p.n() == 0) return false;
  for (uint64_t t : p.section_total) {
    if (t != 0 && t != target) return false;
  }
  return true;
}

namespace {

TargetSearchResult sweep_run(const Problem& p, uint64_t target, uint64_t node_budget,
                             std::vector<uint64_t>& out,
                             std::chrono::steady_clock::time_point deadline) {
  TargetSearchResult r;
  if (!sweep_applies(p, target)) return r;
  SweepSearch search(p, target, node_budget);
  search.deadline_ = deadline;
  r.found = search.run();
  r.nodes = search.nodes();
  r.exhausted = !r.found && search.exhausted();
  if (r.found) {
    out = search.offsets();
    MINFER_ASSERT(height_of(p, out) <= target, "time-sweep search exceeded its target");
  }
  return r;
}

}  // namespace

TargetSearchResult sweep_search(const Problem& p, uint64_t target, uint64_t node_budget,
                                std::vector<uint64_t>& out) {
  return sweep_run(p, target, node_budget, out, std::chrono::steady_clock::time_point::max());
}

TargetSearchResult sweep_search_at(const Problem& p, uint64_t target, uint64_t base,
                                   uint64_t node_budget, std::vector<uint64_t>& out,
                                   const SweepHook* hook) {
  TargetSearchResult r;
  if (!sweep_applies(p, target)) return r;
  // Blocks are small and swept often: a table to their size (the allocation dominated).
  const int bits = std::clamp(2 * static_cast<int>(std::bit_width(p.n())) + 2, 8, kTableBits);
  SweepSearch search(p, target, node_budget, base, bits);
  search.hook_ = hook;
  r.found = search.run();
  r.nodes = search.nodes();
  r.exhausted = !r.found && search.exhausted();
  if (r.found) out = search.offsets();
  return r;
}

Problem reversed_problem(const Problem& p) {
  std::vector<PlanBuffer> rev(p.n());
  for (uint32_t k = 0; k < p.n(); ++k) {
    rev[k] = {static_cast<int64_t>(k), -p.upper[k], -p.lower[k], p.size[k], p.align[k]};
  }
  Problem q = build_problem(rev);
  MINFER_ASSERT(q.n() == p.n(), "reversed problem lost buffers");
  return q;
}

TargetSearchResult sweep_both_ways(const Problem& p, uint64_t nodes_each,
                                   std::vector<uint64_t>& out) {
  TargetSearchResult r = sweep_search(p, p.lower_bound, nodes_each, out);
  if (r.found || r.exhausted || !sweep_applies(p, p.lower_bound)) return r;
  const TargetSearchResult b = sweep_search(reversed_problem(p), p.lower_bound, nodes_each, out);
  return {b.found, b.exhausted, r.nodes + b.nodes};
}

TargetSearchResult sweep_until(const Problem& p, uint64_t first_nodes,
                               std::chrono::steady_clock::time_point deadline,
                               std::vector<uint64_t>& out) {
  TargetSearchResult total;
  if (!sweep_applies(p, p.lower_bound)) return total;
  const Problem q = reversed_problem(p);
  uint64_t budget = std::max<uint64_t>(first_nodes, 1);
  for (int round = 0; std::chrono::steady_clock::now() < deadline; ++round) {
    const TargetSearchResult r = sweep_run(round % 2 ? q : p, p.lower_bound, budget, out, deadline);
    total.nodes += r.nodes;
    if (r.found || r.exhausted) {
      total.found = r.found;
      total.exhausted = r.exhausted;
      return total;
    }
    if (round % 2) budget = budget > (UINT64_MAX >> 2) ? budget : budget * 2;
  }
  return total;
}

}  // namespace minfer::planner_detail
