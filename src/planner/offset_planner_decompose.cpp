// Offset planner internals: the decomposition search for a plan at the lower bound of a perfect
// packing (issue 21; docs/PLANNER.md "Decomposition").
//
// In a plan at the bound of a perfect packing every byte of every section is covered, so the
// plan is a dissection of the height-by-time rectangle into the buffers. Generated packings are
// built by cutting rectangles (guillotine, pinwheel), and the time sweep fails on them because
// the many buffers born at one boundary must be ordered before their deaths show which belong
// together. This search recovers the rectangles instead:
//  * a time cut (a boundary no buffer crosses) splits a block exactly: every plan splits there;
//  * a set S of buffers whose bytes form a constant height h_S over [p, q) — at every inner
//    boundary the bytes of S dying equal the bytes of S born, a sub-flow in the graph whose nodes
//    are boundaries and whose edges are buffers — is contracted into one rectangle [p, q) x h_S
//    (the smallest such set found first, so rectangles of the construction come back bottom-up);
//  * when nothing more contracts, the few rectangles left (2 for a guillotine cut, 5 for a
//    pinwheel) are placed by the time sweep, and each rectangle's own buffers are solved the same
//    way inside it, at its offset.
// Contraction is a heuristic: a set with constant height need not be contiguous in any plan
// (sizes can coincide), and alignments are checked only when the buffers get their offsets. So
// the search can fail on a feasible instance (no backtracking over contractions); it proves
// nothing, and a plan it returns is at the bound. The caller falls back to the time sweep.
//
// Cost: each contraction round rebuilds the block's boundary index (O(m log m), m items) and
// runs a depth-first search per seed item (at most kSeedSteps steps), subset sums over the
// buffers born at a boundary included; all counted against one deterministic budget together
// with the sweeps' nodes. Memory O(n). Thread safety: state is local to one call.
#include <algorithm>
#include <functional>

#include "common/error.h"
#include "planner/offset_planner_detail.h"

namespace minfer::planner_detail {
namespace {

constexpr size_t kLeafItems = 4;       // blocks this small go straight to the sweep
constexpr uint64_t kSeedSteps = 2048;  // block-search steps per seed before the next seed
constexpr int kMaxSubsets = 6;         // subsets of the newborns tried per boundary
constexpr int kPasses = 3;             // passes over the seeds after contractions

struct Item {
  uint32_t lo, hi;  // sections [lo, hi)
  uint64_t size, align;
  int32_t block;  // -1: the buffer `buf`; else blocks_[block] holds the contracted items
  uint32_t buf;
  bool tried;  // already a seed without success in this block
};

class Decomposer {
 public:
  Decomposer(const Problem& p, uint64_t budget) : p_(p), budget_(budget), off_(p.n(), 0) {}

  bool run() {
    std::vector<Item> items;
    for (uint32_t k = 0; k < p_.n(); ++k) {
      items.push_back({p_.sec_lo[k], p_.sec_hi[k], p_.size[k], p_.align[k], -1, k, false});
    }
    return solve(std::move(items), p_.lower_bound, 0);
  }
  uint64_t steps() const { return steps_; }
  const std::vector<uint64_t>& offsets() const { return off_; }

 private:
  bool over() const { return steps_ > budget_; }

  bool place(const Item& it, uint64_t at) {
    if (it.block < 0) {
      if (at % it.align != 0) return false;
      off_[it.buf] = at;
      return true;
    }
    return solve(blocks_[static_cast<size_t>(it.block)], it.size, at);  // a copy: blocks_ grows
  }

  // Places `items` (bytes constant at h over their time range) in [base, base + h).
  bool solve(std::vector<Item> items, uint64_t h, uint64_t base) {
    steps_ += items.size();
    if (over()) return false;
    if (items.size() == 1) return items[0].size == h && place(items[0], base);
    sort_items(items);
    // Time cuts are exact: every plan of the block splits there.
    std::vector<size_t> starts{0};
    uint32_t reach = items[0].hi;
    for (size_t i = 1; i < items.size(); ++i) {
      if (items[i].lo >= reach) starts.push_back(i);
      reach = std::max(reach, items[i].hi);
    }
    if (starts.size() > 1) {
      starts.push_back(items.size());
      for (size_t g = 0; g + 1 < starts.size(); ++g) {
        std::vector<Item> part(items.begin() + static_cast<ptrdiff_t>(starts[g]),
                               items.begin() + static_cast<ptrdiff_t>(starts[g + 1]));
        if (!solve(std::move(part), h, base)) return false;
      }
      return true;
    }
    const uint32_t p = items[0].lo, q = reach;
    std::vector<uint32_t> set;
    for (int pass = 0; pass < kPasses && items.size() > kLeafItems; ++pass) {
      bool contracted = false;
      while (items.size() > kLeafItems && find_block(items, p, q, set)) {
        contract(items, set);
        contracted = true;
      }
      if (!contracted || over()) break;
      for (Item& it : items) it.tried = false;  // a new rectangle can complete an old seed's set
    }
    return leaf(items, h, base);
  }

  static void sort_items(std::vector<Item>& items) {
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      if (a.lo != b.lo) return a.lo < b.lo;
      if (a.hi != b.hi) return a.hi < b.hi;
      return a.size > b.size;
    });
  }

  void contract(std::vector<Item>& items, const std::vector<uint32_t>& set) {
    std::vector<Item> members;
    Item r{UINT32_MAX, 0, 0, 1, static_cast<int32_t>(blocks_.size()), 0, false};
    for (uint32_t i : set) {
      members.push_back(items[i]);
      members.back().tried = false;
      r.lo = std::min(r.lo, items[i].lo);
      r.hi = std::max(r.hi, items[i].hi);
    }
    for (const Item& m : members) r.size += m.lo == r.lo ? m.size : 0;
    blocks_.push_back(std::move(members));
    std::vector<uint8_t> gone(items.size(), 0);
    for (uint32_t i : set) gone[i] = 1;
    size_t w = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!gone[i]) items[w++] = items[i];
    }
    items.resize(w);
    items.push_back(r);
    sort_items(items);
  }

  // The sweep over the block's items (rectangles and buffers), then each rectangle inside.
  bool leaf(const std::vector<Item>& items, uint64_t h, uint64_t base) {
    std::vector<PlanBuffer> b;
    for (size_t i = 0; i < items.size(); ++i) {
      b.push_back({static_cast<int64_t>(i), items[i].lo, items[i].hi, items[i].size,
                   items[i].align});
    }
    const Problem bp = build_problem(b);
    std::vector<uint64_t> off;
    const TargetSearchResult r =
        sweep_search_at(bp, h, base, over() ? 0 : budget_ - steps_, off);
    steps_ += r.nodes;
    if (!r.found) return false;
    for (size_t k = 0; k < bp.n(); ++k) {
      if (!place(items[bp.orig[k]], base + off[k])) return false;
    }
    return true;
  }

  // Block search state (one seed at a time).
  struct Index {
    std::vector<uint32_t> times;                     // distinct boundaries, ascending
    std::vector<std::vector<uint32_t>> ends, births;  // per boundary; births by size, descending
  };

  // A set of at least two items, not all of the block's, whose bytes are constant over its time
  // range (every full-span item excluded: it is a rectangle already). Tries untried seeds in
  // start order; a seed whose search fails is marked tried.
  bool find_block(std::vector<Item>& items, uint32_t p, uint32_t q, std::vector<uint32_t>& set) {
    const auto m = static_cast<uint32_t>(items.size());
    Index ix;
    for (const Item& it : items) ix.times.push_back(it.lo), ix.times.push_back(it.hi);
    std::sort(ix.times.begin(), ix.times.end());
    ix.times.erase(std::unique(ix.times.begin(), ix.times.end()), ix.times.end());
    auto at = [&](uint32_t t) {
      return static_cast<size_t>(std::lower_bound(ix.times.begin(), ix.times.end(), t) -
                                 ix.times.begin());
    };
    ix.ends.assign(ix.times.size(), {});
    ix.births.assign(ix.times.size(), {});
    size_t n_full = 0;
    for (uint32_t i = 0; i < m; ++i) {
      ix.ends[at(items[i].hi)].push_back(i);
      ix.births[at(items[i].lo)].push_back(i);
      n_full += items[i].lo == p && items[i].hi == q;
    }
    for (auto& list : ix.births) {
      std::sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
        if (items[a].size != items[b].size) return items[a].size > items[b].size;
        return items[a].hi < items[b].hi;
      });
    }
    for (uint32_t x = 0; x < m && !over(); ++x) {
      const Item& s = items[x];
      if (s.tried || (s.lo == p && s.hi == q)) continue;
      if (seed_search(items, ix, x, at(s.lo), p, q, m - n_full, n_full, set)) return true;
      items[x].tried = true;
    }
    return false;
  }

  // Depth-first search for S from seed x (first step ps = x.lo): boundaries left to right; at
  // each, the bytes of S ending there (plus first-step items joined now: their bytes span
  // [ps, here)) must equal the bytes of S born there (a subset of the newborns), or S closes.
  bool seed_search(const std::vector<Item>& items, const Index& ix, uint32_t x, size_t k0,
                   uint32_t p, uint32_t q, size_t n_nonfull, size_t n_full,
                   std::vector<uint32_t>& set) {
    const uint32_t ps = items[x].lo;
    std::vector<uint8_t> st(items.size(), 0);  // 0 undecided, 1 in, 2 out
    size_t count_in = 1, live = 1;
    for (uint32_t e : ix.births[k0]) {
      if (items[e].lo == p && items[e].hi == q) st[e] = 2;
    }
    st[x] = 1;
    uint64_t seed_steps = 0;
    bool stop = false;
    auto tick = [&] {
      ++steps_;
      if (++seed_steps > kSeedSteps || over()) stop = true;
      return !stop;
    };
    // Subsets of the items born at boundary k summing to `need` (identical items taken as a
    // prefix of their run), at most kMaxSubsets per boundary, each followed by `next`.
    std::function<bool(size_t, size_t, uint64_t, int&, const std::function<bool()>&)> pick =
        [&](size_t k, size_t j, uint64_t need, int& tried,
            const std::function<bool()>& next) -> bool {
      if (need == 0) return ++tried, next();
      const std::vector<uint32_t>& list = ix.births[k];
      if (j >= list.size() || stop || tried >= kMaxSubsets || !tick()) return false;
      const uint32_t e = list[j];
      if (items[e].size <= need) {
        st[e] = 1;
        ++count_in;
        ++live;
        if (pick(k, j + 1, need - items[e].size, tried, next)) return true;
        st[e] = 0;
        --count_in;
        --live;
      }
      size_t nj = j + 1;  // skipping e skips its identical successors too
      while (nj < list.size() && items[list[nj]].size == items[e].size &&
             items[list[nj]].hi == items[e].hi) {
        ++nj;
      }
      return pick(k, nj, need, tried, next);
    };
    std::function<bool(size_t)> node = [&](size_t k) -> bool {
      // S must stay live until it closes; skip boundaries where nothing of S ends and no
      // undecided first-step item ends.
      if (live == 0) return false;
      uint64_t in_sum = 0;
      size_t in_here = 0;
      std::vector<uint32_t> u;
      for (;; ++k) {
        if (k >= ix.times.size()) return false;
        for (uint32_t e : ix.ends[k]) {
          if (st[e] == 1) {
            in_sum += items[e].size;
            ++in_here;
          } else if (st[e] == 0 && items[e].lo == ps) {
            u.push_back(e);
          }
        }
        if (in_here > 0 || !u.empty()) break;
      }
      if (!tick()) return false;
      const uint32_t v = ix.times[k];
      for (uint32_t e : u) st[e] = 2;
      // Options: join none, one or two of the first-step items ending here.
      const size_t nu = u.size();
      std::vector<std::pair<size_t, size_t>> options{{nu, nu}};
      for (size_t a = 0; a < nu; ++a) options.push_back({a, nu});
      for (size_t a = 0; a < nu; ++a) {
        for (size_t b = a + 1; b < nu; ++b) options.push_back({a, b});
      }
      for (const auto& [a, b] : options) {
        if (stop) break;
        uint64_t join = 0;
        size_t joined = 0;
        for (size_t j : {a, b}) {
          if (j < nu) st[u[j]] = 1, join += items[u[j]].size, ++joined;
        }
        count_in += joined;
        const size_t live_after = live - in_here;
        if (live_after == 0 && count_in >= 2 &&
            !(ps == p && v == q && count_in == n_nonfull && n_full == 0)) {
          return true;  // S closes here: a rectangle [ps, v) x its bytes
        }
        if (v < q) {
          live = live_after;
          int tried = 0;
          const bool ok = in_sum + join == 0
                              ? node(k + 1)
                              : pick(k, 0, in_sum + join, tried, [&] { return node(k + 1); });
          live = live_after + in_here;
          if (ok) return true;
        }
        for (size_t j : {a, b}) {
          if (j < nu) st[u[j]] = 2;
        }
        count_in -= joined;
      }
      for (uint32_t e : u) st[e] = 0;
      return false;
    };
    if (!node(k0 + 1)) return false;
    set.clear();
    for (uint32_t i = 0; i < items.size(); ++i) {
      if (st[i] == 1) set.push_back(i);
    }
    return true;
  }

  const Problem& p_;
  const uint64_t budget_;
  uint64_t steps_ = 0;
  std::vector<uint64_t> off_;
  std::vector<std::vector<Item>> blocks_;
};

}  // namespace

TargetSearchResult decompose_search(const Problem& p, uint64_t budget,
                                    std::vector<uint64_t>& out) {
  TargetSearchResult r;
  if (!sweep_applies(p, p.lower_bound)) return r;
  Decomposer d(p, budget);
  r.found = d.run();
  r.nodes = d.steps();
  if (r.found) {
    out = d.offsets();
    MINFER_ASSERT(height_of(p, out) <= p.lower_bound, "decomposition exceeded the bound");
  }
  return r;
}

}  // namespace minfer::planner_detail
