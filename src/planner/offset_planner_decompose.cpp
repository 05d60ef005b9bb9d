// Offset planner internals: the decomposition search for a plan at the lower bound of a perfect
// packing (issue 21; docs/PLANNER.md "Decomposition search").
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
//    pinwheel) are placed by the time sweep, and each rectangle's own block the same way inside
//    it, top-down: the sweep accepts a rectangle at an offset only if its block can be placed
//    there (alignments), remembered per (block, offset modulo its largest alignment).
// Contraction is a heuristic: a set with constant height need not be contiguous in any plan
// (sizes and lifetimes can coincide). So the search can fail on a feasible instance (nothing
// backtracks over contractions; three rule sets in both time directions are tried instead); it
// proves nothing, and a plan it returns is at the bound (and checked). The caller falls back to
// the time sweep.
// When every attempt fails, the trees it built still give a plan above the bound (RelaxedPlan):
// the unplaceable top-level leaf is packed with room to spare by the greedy passes and the
// bound-guided dives over its items (rectangles whose blocks fit at the bound, buffers, and the
// items of rectangles opened 1-3 levels deep, which undoes wrong contractions), each block then
// placed inside its rectangle as before.
//
// Cost: each contraction rebuilds the block's boundary index (O(m log m), m items) and runs a
// depth-first search per seed item (at most kSeedSteps steps), subset sums over the buffers
// born at a boundary included; placement runs one sweep per (block, offset residue). All of it
// counts against one deterministic step budget. Memory O(n + memoised placements). Thread
// safety: state is local to one call.
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <span>

#include "common/error.h"
#include "planner/offset_planner_decompose_sets.h"
#include "planner/offset_planner_detail.h"

namespace minfer::planner_detail {
namespace {

using decompose::Index;
using decompose::Item;

constexpr size_t kLeafItems = 4;       // blocks this small go straight to the sweep
constexpr int kPasses = 3;             // passes over the seeds after contractions
// Sweep nodes per leaf placement: a small leaf that needs more is usually the product of a
// wrong contraction, which no search inside it can repair. A large leaf (allocator-like traces
// contract little) is a sweep problem of its own and gets 16 times as many.
constexpr uint64_t kLeafNodes = uint64_t{1} << 16;
constexpr size_t kLargeLeaf = 64;
// Dive work per relaxed leaf (see Decomposer::relax), about 0.05 s of CPU: a leaf of 50-900
// items, where a quarter of this still lowers some leaves by points (docs/PLANNER.md).
constexpr uint64_t kRelaxLeafWork = uint64_t{1} << 24;
uint64_t leaf_nodes(const Problem& leaf) {
  return leaf.n() >= kLargeLeaf ? kLeafNodes * 16 : kLeafNodes;
}
// Disjoint sets contracted per index rebuild. More is cheaper, but a set found while others are
// set aside can differ from the one found after their contraction: 1 packed more (seeds
// 307138295 and 307138309 of the benchmark draw, both lost with unlimited batches).
constexpr size_t kBatch = 1;

// The decomposition tree: a time-cut node's parts all sit at its offset; a leaf's items (buffers
// and rectangles) are placed by the sweep.
struct Node {
  std::vector<uint32_t> parts;
  std::vector<Item> items;
  Problem problem;  // the leaf's items, for the sweep (leaves of 2+ items)
  // The largest alignment of a buffer inside: alignments are powers of two, so whether the node
  // can be placed at an offset depends only on the offset modulo this.
  uint64_t align = 1;
};

constexpr uint32_t kNoNode = UINT32_MAX;

class Decomposer {
 public:
  // whole_groups: newborn subsets take parallel groups whole (see `pick`); defer_parallel:
  // parallel sets contract only as whole groups, once nothing else does (contract_parallel).
  Decomposer(const Problem& p, uint64_t budget, bool whole_groups, bool defer_parallel)
      : p_(p),
        budget_(budget),
        whole_groups_(whole_groups),
        defer_parallel_(defer_parallel),
        off_(p.n(), 0) {}

  // Phase 1 builds the tree (independent of offsets), phase 2 places it top-down: a rectangle is
  // accepted at an offset only if its own block can be placed there (alignments), so the sweep
  // over a leaf tries other arrangements when it cannot.
  bool run() {
    std::vector<Item> items;
    for (uint32_t k = 0; k < p_.n(); ++k) {
      items.push_back({p_.sec_lo[k], p_.sec_hi[k], p_.size[k], p_.align[k], -1, k, false});
    }
    root_ = build(std::move(items));
    if (root_ == kNoNode || !place(root_, p_.lower_bound, 0)) return false;
    write(root_, 0);
    return true;
  }

  // After a failed run whose tree was built: a plan above the bound that keeps the tree, its
  // unplaceable top-level leaves packed by the greedy passes and bound-guided dives with room
  // to spare. Variants: 0, every rectangle whose block fits at some multiple of an alignment
  // stays one item, the others are opened into their items; 1, the same but a rectangle whose
  // block fits at one residue of its alignment stays one item there; 2-4, also every rectangle
  // within 1-3 levels of the leaf is opened (wrong contractions are undone at the price of
  // fewer guarantees). Returns the plan's height (offsets in offsets()), 0 if there is no
  // tree. `extra` steps on top of the budget (block placements); `dive_work` is charged for the
  // relaxed leaves' greedy passes and dives, and caps the dives.
  uint64_t relax(int variant, uint64_t extra, uint64_t& dive_work) {
    if (root_ == kNoNode) return 0;
    if (!relaxing_) budget_ = steps_ + extra;  // once: the steps for the blocks' placements
    relaxing_ = true;
    use_residues_ = variant == 1;
    open_depth_ = variant >= 2 ? variant - 1 : 0;
    dive_work_ = &dive_work;
    return relax_node(root_, p_.lower_bound);
  }
  uint64_t steps() const { return steps_; }
  bool built() const { return root_ != kNoNode; }
  const std::vector<uint64_t>& offsets() const { return off_; }

 private:
  bool over() const { return steps_ > budget_; }

  // Reduces `items` (bytes constant over their time range) to a node; kNoNode past the budget.
  uint32_t build(std::vector<Item> items) {
    steps_ += items.size();
    if (over()) return kNoNode;
    Node nd;
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
        nd.parts.push_back(build({items.begin() + static_cast<ptrdiff_t>(starts[g]),
                                  items.begin() + static_cast<ptrdiff_t>(starts[g + 1])}));
        if (nd.parts.back() == kNoNode) return kNoNode;
        nd.align = std::max(nd.align, nodes_[nd.parts.back()].align);
      }
    } else {
      const uint32_t p = items[0].lo, q = reach;
      std::vector<std::vector<uint32_t>> sets;
      for (int pass = 0; pass < kPasses && items.size() > kLeafItems; ++pass) {
        bool contracted = false;
        for (;;) {
          while (items.size() > kLeafItems && find_blocks(items, p, q, sets)) {
            contract(items, sets);
            contracted = true;
          }
          if (items.size() <= kLeafItems || !contract_parallel(items, p, q)) break;
          contracted = true;
        }
        if (!contracted || over()) break;
        for (Item& it : items) it.tried = false;  // a new rectangle can complete an old seed's set
      }
      std::vector<PlanBuffer> b;
      for (Item& it : items) {
        if (it.block >= 0) {
          it.block = static_cast<int32_t>(build(blocks_[static_cast<size_t>(it.block)]));
          if (static_cast<uint32_t>(it.block) == kNoNode) return kNoNode;
          nd.align = std::max(nd.align, nodes_[static_cast<size_t>(it.block)].align);
        }
        nd.align = std::max(nd.align, it.align);
        b.push_back({static_cast<int64_t>(b.size()), it.lo, it.hi, it.size, it.align});
      }
      if (items.size() > 1) nd.problem = build_problem(b);
      nd.items = std::move(items);
    }
    nodes_.push_back(std::move(nd));
    return static_cast<uint32_t>(nodes_.size() - 1);
  }

  // Can node `n` (height h) sit at `base`? Remembered per (node, base modulo its alignment):
  // the answer depends on nothing else; a leaf's answer keeps its items' offsets (relative).
  bool place(uint32_t n, uint64_t h, uint64_t base) {
    const Node& nd = nodes_[n];
    const std::pair<uint32_t, uint64_t> key{n, base % nd.align};
    if (const auto it = memo_.find(key); it != memo_.end()) return it->second.ok;
    if (over() || (relaxing_ && gave_up_.count(key) > 0)) return false;
    Solved sv;
    sv.ok = true;
    if (!nd.parts.empty()) {
      for (uint32_t part : nd.parts) sv.ok = sv.ok && place(part, h, base);
    } else if (nd.items.size() == 1) {
      sv.ok = nd.items[0].size == h && place_item(nd.items[0], base);
    } else {
      SweepHook hook;
      const Problem& bp = nd.problem;
      for (uint32_t k = 0; k < bp.n(); ++k) hook.special.push_back(nd.items[bp.orig[k]].block >= 0);
      hook.accept = [&](uint32_t k, uint64_t at) { return place_item(nd.items[bp.orig[k]], at); };
      std::vector<uint64_t> off;
      const TargetSearchResult r = sweep_search_at(
          bp, h, base, over() ? 0 : std::min(leaf_nodes(bp), budget_ - steps_), off, &hook);
      steps_ += r.nodes + nd.items.size();
      sv.ok = r.found;
      if (sv.ok) {
        sv.rel.assign(nd.items.size(), 0);
        for (uint32_t k = 0; k < bp.n(); ++k) sv.rel[bp.orig[k]] = off[k];
      }
    }
    const bool ok = sv.ok;
    if (ok || !over()) {
      memo_.emplace(key, std::move(sv));
    } else {
      gave_up_.insert(key);  // an abort proves nothing, but relax() does not retry it
    }
    return ok;
  }

  bool place_item(const Item& it, uint64_t at) {
    if (it.block >= 0) return place(static_cast<uint32_t>(it.block), it.size, at);
    return at % it.align == 0;
  }

  // Writes the offsets of a node that `place` accepted at `base`.
  void write(uint32_t n, uint64_t base) {
    const Node& nd = nodes_[n];
    const auto it = memo_.find({n, base % nd.align});
    MINFER_ASSERT(it != memo_.end() && it->second.ok, "decomposition: writing an unplaced node");
    for (uint32_t part : nd.parts) write(part, base);
    for (size_t i = 0; i < nd.items.size(); ++i) {
      const Item& item = nd.items[i];
      const uint64_t at = base + (nd.items.size() == 1 ? 0 : it->second.rel[i]);
      if (item.block >= 0) {
        write(static_cast<uint32_t>(item.block), at);
      } else {
        off_[item.buf] = at;
      }
    }
  }

  // Parallel items (the same lifetime, not the block's full span) form one rectangle, all of
  // them together: they are strips of one rectangle in the construction, in an order the sweep
  // chooses (pairs chosen blindly may have to be adjacent where alignments forbid it). Only once
  // nothing else contracts, so that every strip of the group is a single item by then. Contracts
  // the first group of two or more; false if there is none.
  bool contract_parallel(std::vector<Item>& items, uint32_t p, uint32_t q) {
    steps_ += items.size();
    for (size_t i = 0; i < items.size();) {  // sorted by (lo, hi): groups are runs
      size_t j = i + 1;
      while (j < items.size() && items[j].lo == items[i].lo && items[j].hi == items[i].hi) ++j;
      if (j - i >= 2 && !(items[i].lo == p && items[i].hi == q)) {
        std::vector<uint32_t> set;
        for (size_t k = i; k < j; ++k) set.push_back(static_cast<uint32_t>(k));
        contract(items, {set});
        return true;
      }
      i = j;
    }
    return false;
  }

  // Start, end, size descending; the rest only makes the order total (equal items used to fall
  // in whatever order std::sort left them, which differs between standard libraries), so that
  // a merge gives the same order as a sort.
  static bool item_before(const Item& a, const Item& b) {
    if (a.lo != b.lo) return a.lo < b.lo;
    if (a.hi != b.hi) return a.hi < b.hi;
    if (a.size != b.size) return a.size > b.size;
    if (a.align != b.align) return a.align < b.align;
    if (a.block != b.block) return a.block < b.block;
    return a.buf < b.buf;
  }
  static void sort_items(std::vector<Item>& items) {
    std::sort(items.begin(), items.end(), item_before);
  }

  // Replaces each of the disjoint `sets` of items by one rectangle.
  void contract(std::vector<Item>& items, const std::vector<std::vector<uint32_t>>& sets) {
    std::vector<uint8_t> gone(items.size(), 0);
    std::vector<Item> made;
    for (const std::vector<uint32_t>& set : sets) {
      std::vector<Item> members;
      Item r{UINT32_MAX, 0, 0, 1, static_cast<int32_t>(blocks_.size()), 0, false};
      for (uint32_t i : set) {
        members.push_back(items[i]);
        members.back().tried = false;
        r.lo = std::min(r.lo, items[i].lo);
        r.hi = std::max(r.hi, items[i].hi);
        gone[i] = 1;
      }
      for (const Item& m : members) r.size += m.lo == r.lo ? m.size : 0;
      r.align = base_alignment(members);
      blocks_.push_back(std::move(members));
      made.push_back(r);
    }
    size_t w = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!gone[i]) items[w++] = items[i];
    }
    items.resize(w);
    // The rest is still sorted: merge the new rectangles in (a sort per contraction was a
    // sixth of the decomposition's CPU).
    sort_items(made);
    items.insert(items.end(), made.begin(), made.end());
    std::inplace_merge(items.begin(), items.begin() + static_cast<ptrdiff_t>(w), items.end(),
                       item_before);
  }

  // An alignment the rectangle's offset must have: the block is full in every section, so in
  // each some member sits at its bottom, at the rectangle's offset, and that member's alignment
  // divides it; the weakest alignment live in the section is the most that can be concluded, and
  // the strongest of those over the sections holds. Alignments are powers of two or 1.
  static uint64_t base_alignment(const std::vector<Item>& members) {
    std::vector<uint32_t> times;
    for (const Item& m : members) times.push_back(m.lo);
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    uint64_t need = 1;
    for (uint32_t t : times) {
      uint64_t weakest = UINT64_MAX;
      for (const Item& m : members) {
        if (m.lo <= t && t < m.hi) weakest = std::min(weakest, m.align);
      }
      if (weakest != UINT64_MAX) need = std::max(need, weakest);
    }
    return need;
  }

  // A set of at least two items, not all of the block's, whose bytes are constant over its time
  // range (every full-span item excluded: it is a rectangle already). Tries untried seeds in
  // start order; a seed whose search fails is marked tried.
  bool find_blocks(std::vector<Item>& items, uint32_t p, uint32_t q,
                   std::vector<std::vector<uint32_t>>& sets) {
    const auto m = static_cast<uint32_t>(items.size());
    // The index: a sort of the ends and a few linear passes. Charged one step per item, about
    // what a sweep node costs per item here; at four (before the flat arrays) the rebuilds
    // took most of the budget on 1,000+ items, and later attempts never finished their trees.
    steps_ += m;
    Index& ix = index_;
    build_index(items, whole_groups_, ix, scratch_, scratch2_);
    size_t n_full = 0;
    for (const Item& it : items) n_full += it.lo == p && it.hi == q;
    // One scan collects disjoint sets (items of a set found are out of later searches), so the
    // index is rebuilt once per round of contractions, not once per contraction.
    sets.clear();
    std::vector<uint8_t> used(m, 0);
    std::vector<uint32_t> set;
    for (uint32_t x = 0; x < m && !over(); ++x) {
      const Item& s = items[x];
      if (used[x] || s.tried || (s.lo == p && s.hi == q)) continue;
      // A search that met an item set aside may have found another set than it would have
      // (or failed where it would not): left to the next round.
      const decompose::SeedResult sr =
          decompose::seed_search({items, ix, used, p, q, m - n_full, n_full, defer_parallel_},
                                 x, ix.boundary(s.lo), set, steps_, budget_);
      if (sr.touched_used) continue;
      const bool found = sr.found;
      if (found) {
        for (uint32_t i : set) used[i] = 1;
        sets.push_back(set);
        if (sets.size() >= kBatch) break;
      } else {
        items[x].tried = true;
      }
    }
    return !sets.empty();
  }

  // A relaxed leaf: items with the alignment and residue each is packed at.
  struct RelaxedLeaf {
    std::vector<Item> items;
    std::vector<uint64_t> align, residue;
  };

  // The largest alignment a (a power of two, from `need` up) such that block b fits at every
  // multiple of a modulo its largest alignment (at most 16 residues checked); 0 if none.
  uint64_t uniform_alignment(uint32_t b, uint64_t size, uint64_t need) {
    const uint64_t big = nodes_[b].align;
    uint64_t a = 0;
    for (uint64_t c = big; c >= std::max<uint64_t>(need, 1) && big / c <= 16; c /= 2) {
      bool all = true;
      for (uint64_t r = 0; r < big && all; r += c) all = place(b, size, r);
      if (!all) break;
      a = c;
      if (c == 1) break;
    }
    return a;
  }

  // One residue modulo block b's largest alignment at which it fits (15 tried), or UINT64_MAX.
  uint64_t one_residue(uint32_t b, uint64_t size, uint64_t need) {
    const uint64_t big = nodes_[b].align;
    const uint64_t stride = std::max(std::max<uint64_t>(need, 1), big / 16);
    for (uint64_t r = stride; r < big; r += stride) {
      if (place(b, size, r)) return r;
    }
    return UINT64_MAX;
  }

  // The items of leaf `nd` for the current variant: a rectangle stays one item at an alignment
  // (or, with residues, one residue) where its block fits, unless it lies within open_depth_
  // levels of the leaf; otherwise it is opened into its node's items (a time-cut node: its
  // parts' items), which are examined in turn.
  RelaxedLeaf relaxed_items(const Node& nd) {
    RelaxedLeaf lf{nd.items, {}, {}};
    std::vector<int> lvl(lf.items.size(), 0);
    lf.align.assign(lf.items.size(), 1);
    lf.residue.assign(lf.items.size(), 0);
    for (size_t i = 0; i < lf.items.size(); ++i) {
      const Item it = lf.items[i];
      lf.align[i] = it.align;
      if (it.block < 0) continue;
      const auto b = static_cast<uint32_t>(it.block);
      const uint64_t a = uniform_alignment(b, it.size, it.align);  // its placements: memoised
      if (lvl[i] >= open_depth_) {
        if (a > 0) {
          lf.align[i] = a;
          continue;
        }
        if (const uint64_t r = use_residues_ ? one_residue(b, it.size, it.align) : UINT64_MAX;
            r != UINT64_MAX) {
          lf.align[i] = nodes_[b].align;
          lf.residue[i] = r;
          continue;
        }
      }
      std::vector<Item> inner;
      const Node& bn = nodes_[b];
      for (uint32_t part : bn.parts)
        inner.insert(inner.end(), nodes_[part].items.begin(), nodes_[part].items.end());
      inner.insert(inner.end(), bn.items.begin(), bn.items.end());
      const int l = lvl[i] + 1;
      const auto at = static_cast<ptrdiff_t>(i);
      lf.items.erase(lf.items.begin() + at);
      lf.align.erase(lf.align.begin() + at);
      lf.residue.erase(lf.residue.begin() + at);
      lvl.erase(lvl.begin() + at);
      lf.items.insert(lf.items.end(), inner.begin(), inner.end());
      lf.align.resize(lf.items.size(), 1);
      lf.residue.resize(lf.items.size(), 0);
      lvl.resize(lf.items.size(), l);
      --i;
    }
    return lf;
  }

  // Packs a relaxed leaf: the greedy passes over five orders, then the bound-guided dives from
  // the best of them (charged to *dive_work_). A leaf met before reuses its plan. Offsets in
  // lp's indices into `best`; returns the height.
  uint64_t pack_relaxed(const RelaxedLeaf& lf, const Problem& lp, std::vector<uint64_t>& best) {
    uint64_t key = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < lf.items.size(); ++i) {
      const Item& it = lf.items[i];
      for (uint64_t v : {uint64_t{it.lo}, uint64_t{it.hi}, it.size, lf.align[i], lf.residue[i]})
        key = (key ^ v) * 0x100000001b3ull;
    }
    if (const auto seen = leaf_memo_.find(key); seen != leaf_memo_.end()) {
      best = seen->second.first;
      return seen->second.second;
    }
    std::vector<std::vector<uint32_t>> orders;
    uint64_t best_h = UINT64_MAX;
    for (OrderKey k :
         {OrderKey::Pressure, OrderKey::Area, OrderKey::Size, OrderKey::Length, OrderKey::Start}) {
      orders.push_back(make_order(lp, k));
      for (int packer = 0; packer < 2; ++packer) {
        std::vector<uint64_t> off =
            packer ? offline_best_fit(lp, orders.back()) : gravity_dive(lp, orders.back());
        const uint64_t hh = height_of(lp, off);
        if (hh < best_h) best_h = hh, best = std::move(off);
      }
    }
    // The greedy passes are charged too (each visits every overlap once or twice): with a tree
    // from every attempt there are up to 30 leaves, and uncharged passes over leaves of
    // hundreds of long-lived items took a fifth of a miss's CPU.
    uint64_t pairs = lp.n();
    for (const auto& o : lp.overlaps) pairs += o.size();
    *dive_work_ -= std::min(*dive_work_, 10 * pairs);
    BoundSearchParams bp;
    bp.dives = 200;
    bp.work = std::min(*dive_work_, kRelaxLeafWork);
    bp.stall_work = bp.work / 4;
    bp.work_check = BoundSearchParams::WorkCheck::InsideDives;
    if (bp.work > 0)
      *dive_work_ -= std::min(*dive_work_, bound_search(lp, orders, bp, best, best_h).work);
    leaf_memo_.emplace(key, std::make_pair(best, best_h));
    return best_h;
  }

  // Places node n (height h) at offset 0, exactly where it fits, else relaxed (see relax);
  // writes the offsets and returns the height reached.
  uint64_t relax_node(uint32_t n, uint64_t h) {
    if (place(n, h, 0)) {
      write(n, 0);
      return h;
    }
    const Node& nd = nodes_[n];
    uint64_t top = 0;
    for (uint32_t part : nd.parts) top = std::max(top, relax_node(part, h));
    if (!nd.parts.empty()) return top;
    const RelaxedLeaf lf = relaxed_items(nd);
    std::vector<PlanBuffer> bufs;
    for (size_t i = 0; i < lf.items.size(); ++i) {
      const Item& it = lf.items[i];
      bufs.push_back({static_cast<int64_t>(i), it.lo, it.hi, it.size, lf.align[i]});
    }
    Problem lp = build_problem(bufs);
    lp.residue.resize(lp.n());
    for (uint32_t k = 0; k < lp.n(); ++k) lp.residue[k] = lf.residue[lp.orig[k]];
    std::vector<uint64_t> best;
    const uint64_t best_h = pack_relaxed(lf, lp, best);
    steps_ += lf.items.size();
    for (uint32_t k = 0; k < lp.n(); ++k) {
      const Item& it = lf.items[lp.orig[k]];
      if (it.block >= 0) {
        write(static_cast<uint32_t>(it.block), best[k]);
      } else {
        off_[it.buf] = best[k];
      }
    }
    return best_h;
  }

  const Problem& p_;
  uint64_t budget_;
  uint32_t root_ = kNoNode;
  uint64_t* dive_work_ = nullptr;
  std::map<uint64_t, std::pair<std::vector<uint64_t>, uint64_t>> leaf_memo_;  // see relax_node
  bool use_residues_ = false, relaxing_ = false;
  std::set<std::pair<uint32_t, uint64_t>> gave_up_;  // placements aborted by the budget
  int open_depth_ = 0;
  const bool whole_groups_, defer_parallel_;
  uint64_t steps_ = 0;
  std::vector<uint64_t> off_;
  std::vector<std::vector<Item>> blocks_;  // members of the rectangles being formed
  std::vector<Node> nodes_;
  Index index_;                                // find_blocks' index, reused
  std::vector<uint32_t> scratch_, scratch2_;  // find_blocks' scratch
  struct Solved {
    bool ok = false;
    std::vector<uint64_t> rel;  // a leaf's items' offsets in the node
  };
  std::map<std::pair<uint32_t, uint64_t>, Solved> memo_;  // (node, offset mod its alignment)
};

}  // namespace

TargetSearchResult decompose_search(const Problem& p, uint64_t budget, std::vector<uint64_t>& out,
                                    RelaxedPlan* relaxed) {
  TargetSearchResult r;
  if (!sweep_applies(p, p.lower_bound)) return r;
  // Three rule sets, each forward and then with time reversed (same indices): the block search
  // grows sets from their first step, so the two directions contract different sets, and a
  // wrong contraction in one is often absent from the other. Taking newborn groups whole and
  // deferring parallel sets avoids coincidental subsets where many buffers share lifetimes;
  // where lifetimes coincide by chance it joins strips that are not adjacent. Each rule set
  // packs instances the others do not (benchmark seeds 307138293..: 336, 352, 408 only with
  // single newborns and deferral; 380, 390, 448, 463 only with neither). The first attempt
  // gets half of the budget, the others equal shares of the rest (unspent steps pass on).
  const Problem q = reversed_problem(p);
  constexpr uint64_t kShare[] = {2, 5, 4, 3, 2, 1};  // divisors of what is left
  std::vector<Decomposer> failed;
  for (int attempt = 0; attempt < 6 && !r.found && r.nodes < budget; ++attempt) {
    Decomposer d(attempt % 2 ? q : p, (budget - r.nodes) / kShare[attempt], attempt < 2,
                 attempt < 4);
    r.found = d.run();
    r.nodes += d.steps();
    if (r.found) out = d.offsets();
    if (!r.found && relaxed != nullptr) failed.push_back(std::move(d));
  }
  if (!r.found && relaxed != nullptr) {
    uint64_t work = relaxed->work;
    const auto trees = static_cast<uint64_t>(
        std::count_if(failed.begin(), failed.end(), [](const Decomposer& d) { return d.built(); }));
    const uint64_t extra = relaxed->steps / std::max<uint64_t>(trees, 1);
    for (int variant : {2, 0, 1, 3, 4}) {
      for (size_t a = 0; a < failed.size(); ++a) {
        if (work == 0 && relaxed->height < UINT64_MAX) break;  // spent: keep what there is
        const uint64_t before = failed[a].steps();
        const uint64_t h = failed[a].relax(variant, extra, work);
        r.nodes += failed[a].steps() - before;
        if (h > 0 && h < relaxed->height) {
          relaxed->height = h;
          relaxed->offsets = failed[a].offsets();  // reversed attempts: the same indices
        }
      }
    }
  }
  if (r.found || (relaxed != nullptr && relaxed->height < UINT64_MAX)) {
    // Valid by construction (every block is tiled inside its rectangle); checked anyway, since a
    // wrong plan here would be silent memory corruption in an arena. O(n log n + overlaps).
    std::vector<PlanBuffer> b(p.n());
    for (uint32_t k = 0; k < p.n(); ++k) {
      b[k] = {static_cast<int64_t>(k), p.lower[k], p.upper[k], p.size[k], p.align[k]};
    }
    MINFER_ASSERT(r.found ? check_offsets(b, out, p.lower_bound).empty()
                          : check_offsets(b, relaxed->offsets, relaxed->height).empty(),
                  "decomposition produced an invalid plan");
  }
  return r;
}

}  // namespace minfer::planner_detail
