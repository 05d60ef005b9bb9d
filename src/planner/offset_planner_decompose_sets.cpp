// The decomposition search's set finder (see offset_planner_decompose_sets.h).
#include "planner/offset_planner_decompose_sets.h"

#include <algorithm>

namespace minfer::planner_detail::decompose {
namespace {

constexpr uint64_t kSeedSteps = 2048;  // block-search steps per seed before the next seed
constexpr int kMaxSubsets = 6;         // subsets of the newborns tried per boundary

// Depth-first search for a set S from a seed item x (first step ps = x.lo): boundaries left to
// right; at each, the bytes of S ending there (plus first-step items joined now: their bytes
// span [ps, here)) must equal the bytes of S born there (a subset of the newborns), or S closes.
// At most kSeedSteps steps, all also counted in `steps` (against `budget`).
class SeedSearch {
 public:
  SeedSearch(const std::vector<Item>& items, const Index& ix, const std::vector<uint8_t>& used,
             uint32_t p, uint32_t q, size_t n_nonfull, size_t n_full, bool defer_parallel,
             uint64_t& steps, uint64_t budget)
      : items_(items),
        ix_(ix),
        used_(used),
        p_(p),
        q_(q),
        n_nonfull_(n_nonfull),
        n_full_(n_full),
        defer_parallel_(defer_parallel),
        steps_(steps),
        budget_(budget) {}

  // The set containing items[x] (born at boundary k0), into `set`; false if none was found.
  bool run(uint32_t x, size_t k0, std::vector<uint32_t>& set) {
    x_ = x;
    ps_ = items_[x].lo;
    st_.assign(used_.size(), 0);
    for (size_t i = 0; i < used_.size(); ++i) st_[i] = used_[i] ? 2 : 0;
    for (uint32_t e : ix_.births_of(k0)) {
      if (items_[e].lo == p_ && items_[e].hi == q_) st_[e] = 2;
    }
    st_[x] = 1;
    if (!node(k0 + 1)) return false;
    set.clear();
    for (uint32_t i = 0; i < items_.size(); ++i) {
      if (st_[i] == 1) set.push_back(i);
    }
    return true;
  }

  bool touched_used = false;  // met an item set aside: the result may differ without it

 private:
  bool tick() {
    ++steps_;
    if (++seed_steps_ > kSeedSteps || steps_ > budget_) stop_ = true;
    return !stop_;
  }

  void take(std::span<const uint32_t> members, int dir) {
    for (uint32_t e : members) st_[e] = dir > 0 ? 1 : 0;
    count_in_ += dir * static_cast<ptrdiff_t>(members.size());
    live_ += dir * static_cast<ptrdiff_t>(members.size());
    nonpar_ += dir * static_cast<ptrdiff_t>(members.size());
  }

  // Subsets of the items born at boundary k summing to `need`, at most kMaxSubsets per
  // boundary, each followed by node(k + 1). Items born together that also die together (a
  // parallel group) are taken all or none: they are strips of one rectangle, and a subset of
  // them matching `need` is usually a coincidence of sizes (the whole group contracts later).
  bool pick(size_t k, size_t j, uint64_t need, int& tried) {
    if (need == 0) return ++tried, node(k + 1);
    const std::span<const Group> list = ix_.groups_of(k);
    if (j >= list.size() || stop_ || tried >= kMaxSubsets || !tick()) return false;
    const Group& g = list[j];
    const std::span<const uint32_t> members = ix_.members_of(g);
    bool free = true;
    for (uint32_t e : members) free = free && st_[e] == 0;
    touched_used = touched_used || (!free && used_[members[0]]);
    if (g.sum <= need && free) {
      take(members, 1);
      if (pick(k, j + 1, need - g.sum, tried)) return true;
      take(members, -1);
    }
    return pick(k, j + 1, need, tried);
  }

  // The next boundary from k where something of S ends or an undecided first-step item ends:
  // its index (times.size() if none), S's bytes and items ending there, and those items.
  size_t next_event(size_t k, uint64_t& in_sum, ptrdiff_t& in_here, std::vector<uint32_t>& u) {
    for (; k < ix_.times.size(); ++k) {
      for (uint32_t e : ix_.ends_of(k)) {
        if (st_[e] == 1) {
          in_sum += items_[e].size;
          ++in_here;
        } else if (st_[e] == 0 && items_[e].lo == ps_) {
          u.push_back(e);
        } else if (used_[e] && items_[e].lo == ps_) {
          touched_used = true;
        }
      }
      if (in_here > 0 || !u.empty()) break;
    }
    return k;
  }

  bool node(size_t k) {
    if (live_ == 0) return false;  // S must stay live until it closes
    uint64_t in_sum = 0;
    ptrdiff_t in_here = 0;
    std::vector<uint32_t> u;
    k = next_event(k, in_sum, in_here, u);
    if (k >= ix_.times.size() || !tick()) return false;
    const uint32_t v = ix_.times[k];
    for (uint32_t e : u) st_[e] = 2;
    // Options: join none, one or two of the first-step items ending here.
    const size_t nu = u.size();
    std::vector<std::pair<size_t, size_t>> options{{nu, nu}};
    for (size_t a = 0; a < nu; ++a) options.push_back({a, nu});
    for (size_t a = 0; a < nu; ++a) {
      for (size_t b = a + 1; b < nu; ++b) options.push_back({a, b});
    }
    for (const auto& [a, b] : options) {
      if (stop_) break;
      uint64_t join = 0;
      ptrdiff_t joined = 0;
      for (size_t j : {a, b}) {
        if (j < nu) st_[u[j]] = 1, join += items_[u[j]].size, ++joined;
      }
      count_in_ += joined;
      const ptrdiff_t np = v == items_[x_].hi ? 0 : joined;
      nonpar_ += np;
      const ptrdiff_t live_after = live_ - in_here;
      // Parallel sets (every member with x's lifetime) are left to contract_parallel, when
      // deferred; S may not be the whole block.
      if (live_after == 0 && count_in_ >= 2 && (nonpar_ > 0 || !defer_parallel_) &&
          !(ps_ == p_ && v == q_ && static_cast<size_t>(count_in_) == n_nonfull_ && n_full_ == 0)) {
        return true;  // S closes here: a rectangle [ps, v) x its bytes
      }
      if (v < q_) {
        live_ = live_after;
        int tried = 0;
        const bool ok = in_sum + join == 0 ? node(k + 1) : pick(k, 0, in_sum + join, tried);
        live_ = live_after + in_here;
        if (ok) return true;
      }
      for (size_t j : {a, b}) {
        if (j < nu) st_[u[j]] = 2;
      }
      count_in_ -= joined;
      nonpar_ -= np;
    }
    for (uint32_t e : u) st_[e] = 0;
    return false;
  }

  const std::vector<Item>& items_;
  const Index& ix_;
  const std::vector<uint8_t>& used_;
  const uint32_t p_, q_;
  const size_t n_nonfull_, n_full_;
  const bool defer_parallel_;
  uint64_t& steps_;
  const uint64_t budget_;
  uint32_t x_ = 0, ps_ = 0;
  std::vector<uint8_t> st_;                         // per item: 0 undecided, 1 in S, 2 out
  ptrdiff_t count_in_ = 1, live_ = 1, nonpar_ = 0;  // nonpar: members without x's lifetime
  uint64_t seed_steps_ = 0;
  bool stop_ = false;
};

}  // namespace

// Rebuilds `ix` for `items` (sorted by item_before); scratch vectors are reused between calls.
// whole_groups: see Decomposer. O(m log m).
void build_index(const std::vector<Item>& items, bool whole_groups, Index& ix,
                 std::vector<uint32_t>& scratch, std::vector<uint32_t>& scratch2) {
  const auto m = static_cast<uint32_t>(items.size());
  // Items are sorted by start: only the ends need sorting before the merge.
  std::vector<uint32_t>& his = scratch;
  his.clear();
  ix.times.clear();
  for (const Item& it : items) ix.times.push_back(it.lo), his.push_back(it.hi);
  std::sort(his.begin(), his.end());
  const auto mid = static_cast<ptrdiff_t>(ix.times.size());
  ix.times.insert(ix.times.end(), his.begin(), his.end());
  std::inplace_merge(ix.times.begin(), ix.times.begin() + mid, ix.times.end());
  ix.times.erase(std::unique(ix.times.begin(), ix.times.end()), ix.times.end());
  const size_t nt = ix.times.size();
  // Counting sort into the flat arrays, in item order within a boundary (as the searches
  // expect: sorted by end within a boundary for the births).
  std::vector<uint32_t>& end_k = scratch2;
  end_k.resize(m);
  ix.end_at.assign(nt + 1, 0);
  ix.birth_at.assign(nt + 1, 0);
  for (uint32_t i = 0; i < m; ++i) {
    end_k[i] = static_cast<uint32_t>(ix.boundary(items[i].hi));
    ++ix.end_at[end_k[i] + 1];
  }
  // Births: items are sorted by start, so each boundary's births are one run, in order.
  ix.births.resize(m);
  for (uint32_t i = 0, k = 0; i < m; ++i) {
    while (ix.times[k] != items[i].lo) ++k;
    ix.births[i] = i;
    ++ix.birth_at[k + 1];
  }
  for (size_t k = 0; k < nt; ++k) {
    ix.end_at[k + 1] += ix.end_at[k];
    ix.birth_at[k + 1] += ix.birth_at[k];
  }
  ix.ends.resize(m);
  {
    std::vector<uint32_t>& fill = his;  // reused: per boundary, the next free entry
    fill.assign(ix.end_at.begin(), ix.end_at.end() - 1);
    for (uint32_t i = 0; i < m; ++i) ix.ends[fill[end_k[i]]++] = i;
  }
  ix.group_at.assign(nt + 1, 0);
  ix.groups.clear();
  ix.members.clear();
  for (size_t k = 0; k < nt; ++k) {
    const size_t g0 = ix.groups.size();
    for (uint32_t e : ix.births_of(k)) {  // in item order: sorted by hi within a boundary
      if (!whole_groups || ix.groups.size() == g0 ||
          items[ix.members[ix.groups.back().first]].hi != items[e].hi) {
        const auto at_m = static_cast<uint32_t>(ix.members.size());
        ix.groups.push_back({0, at_m, at_m});
      }
      ix.groups.back().sum += items[e].size;
      ix.members.push_back(e);
      ++ix.groups.back().last;
    }
    std::stable_sort(ix.groups.begin() + static_cast<ptrdiff_t>(g0), ix.groups.end(),
                     [](const Group& a, const Group& b) { return a.sum > b.sum; });
    ix.group_at[k + 1] = static_cast<uint32_t>(ix.groups.size());
  }
}

SeedResult seed_search(const SeedBlock& block, uint32_t x, size_t k0, std::vector<uint32_t>& set,
                       uint64_t& steps, uint64_t budget) {
  SeedSearch search{block.items,     block.ix,     block.used,           block.p, block.q,
                    block.n_nonfull, block.n_full, block.defer_parallel, steps,   budget};
  SeedResult r;
  r.found = search.run(x, k0, set);
  r.touched_used = search.touched_used;
  return r;
}

}  // namespace minfer::planner_detail::decompose
