// Offset planner internals: the nested search for a plan at the lower bound of a perfect packing
// (issue 21; docs/PLANNER.md "Nested search").
//
// Allocator-like traces are built so that at every boundary the buffers dying there are one run
// of neighbours in the layout and the buffers born there re-cut exactly those bytes. Call a plan
// *nested* when that holds: its layout at any step is then an order of the live buffers (no
// slack: the offsets are prefix sums), and each boundary replaces the contiguous block of the
// dying buffers by a block of the newborns, in any order. Whether such a plan exists is a
// consecutive-ones question over time, answered without search by a PQ-tree (Booth and Lueker,
// 1976): sweeping the boundaries, the tree represents every order of the live buffers that some
// nested history reaches; the dying set is reduced to be consecutive (no way to do that: no
// nested plan exists), and its block is replaced by a P-node of the newborns (any order). The
// time sweep fails on these traces because it must fix the newborns' order at birth, long before
// the deaths that constrain it; the tree keeps every order open until then.
//
// Other packings need boundaries whose dying buffers form several runs, each re-cut by some of
// the newborns (with the splits, every plan at the bound is nested in this sense). Those splits
// are a choice: a depth-first search over the boundaries tries either the one-run option first
// and, only when that fails, the splits into runs of equal bytes on both sides (small boundaries
// only), or the splits first (finest first) and one run last; both orders run, each within a
// share of the step budget. A boundary where no proper subset of the dying bytes equals a sum
// of newborns must be one run; its dying set is reduced to be consecutive as soon as its last
// member is born, so a choice that contradicts it fails there instead of many boundaries later.
//
// A plan is then read backwards: the tree stored after each boundary's reductions, pinned to the
// already chosen order of the buffers that cross the boundary, gives an order of the dying ones.
// Alignments are not part of the tree: the read-back searches each dying run's arrangements
// (its P-nodes' orders, its Q-nodes' directions) for one in which every dying buffer is aligned,
// boundary by boundary without going back (repeated with other child orders, then with time
// reversed), so mixed alignments can make it fail.
//
// Never a proof (budgets, alignments); a plan it returns is at the bound and checked. Cost
// without splits: per boundary one reduction and a few tree copies (O(live)); read back, one
// reduction per buffer crossing the boundary (O(live^2) per boundary). Memory: one tree per
// boundary, O(n * live). Thread safety: state is local to one call.
#include <algorithm>
#include <bit>
#include <iterator>

#include "common/error.h"
#include "planner/offset_planner_detail.h"
#include "planner/pq_tree.h"

namespace minfer::planner_detail {
namespace {

// Steps of the alignment search per boundary (PQTree::arrange): without alignments beyond the
// sizes' granule the first arrangement fits.
constexpr uint64_t kArrangeSteps = 4096;
// Read-backs per direction, each trying the P-nodes' children in another rotation: the
// alignment choices are made boundary by boundary without going back, so a choice that suits
// one boundary can leave an earlier one without an aligned arrangement.
constexpr uint32_t kReadBacks = 16;

struct Boundary {
  std::vector<uint32_t> dying, born;
};

// One run of neighbours dying at a boundary and the newborns that re-cut its bytes.
struct Run {
  std::vector<uint32_t> dying, born;
};

// Multi-run options are enumerated only for boundaries this small (subsets of both sides).
constexpr size_t kMaxSplitSide = 10;
constexpr size_t kMaxOptions = 16;  // options per boundary, one run first
// Subset sums kept per side when looking for boundaries that must be one run.
constexpr size_t kMaxSums = 1024;

// Which options a boundary that need not be one run tries first. One run suits allocator-like
// traces (one run re-cut per event); the splits (finest first, one run last) suit cuts across
// time shared by several rectangles (few steps), where one run is often accepted by the tree
// and wrong. Neither order packs what the other does, so both are tried.
enum class RunOrder : uint8_t { OneRunFirst, SplitsFirst };

class Nested {
 public:
  // `budget`: steps for the splits' backtracking, on top of what one pass without splits costs
  // (so that the budget does not decide whether large traces are packed).
  // `problem` must outlive the search.
  Nested(const Problem& problem, uint64_t budget, RunOrder order)
      : p_(problem), order_(order), budget_(budget), marks_(p_.n(), 0) {
    bd_.assign(p_.section_total.size() + 1, {});
    for (uint32_t k = 0; k < p_.n(); ++k) {
      bd_[p_.sec_lo[k]].born.push_back(k);
      bd_[p_.sec_hi[k]].dying.push_back(k);
    }
    size_t live = 0;
    for (const Boundary& b : bd_) {
      budget_ += 8 * (live + 1);  // the steps `forward` counts for one run per boundary
      live = live - b.dying.size() + b.born.size();
    }
    kept_.assign(bd_.size(), PQTree(0));
    chosen_.assign(bd_.size(), {});
    run_of_.assign(p_.n(), 0);
    find_forced_runs();
  }

  bool run(std::vector<uint64_t>& off) {
    const bool fw = forward();
    forward_ok_ = fw;
    bool ok = false;
    for (uint32_t k = 0; fw && !ok && k < kReadBacks && steps_ <= budget_; ++k) {
      ok = backward(off, k * 0x9e3779b9u);
    }
    return ok;
  }
  uint64_t steps() const { return steps_; }
  bool forward_ok() const { return forward_ok_; }  // a tree reached the last boundary

 private:
  bool forward_ok_ = false;
  void lend(PQTree& t) { t.lend_marks(marks_, epoch_); }
  uint64_t bytes(const std::vector<uint32_t>& set) const {
    uint64_t s = 0;
    for (uint32_t b : set) s += p_.size[b];
    return s;
  }

  // Distinct sums of the subsets of `set` other than the empty and the whole one, sorted;
  // empty when there are more than kMaxSums (then nothing is concluded from them).
  std::vector<uint64_t> proper_sums(const std::vector<uint32_t>& set, bool& capped) const {
    std::vector<uint64_t> all{0}, shifted, merged;
    capped = false;
    for (uint32_t k : set) {
      shifted.resize(all.size());
      for (size_t i = 0; i < all.size(); ++i) shifted[i] = all[i] + p_.size[k];
      merged.resize(2 * all.size());
      merged.erase(
          std::set_union(all.begin(), all.end(), shifted.begin(), shifted.end(), merged.begin()),
          merged.end());
      all.swap(merged);
      if (all.size() > kMaxSums) {
        capped = true;
        return {};
      }
    }
    all.erase(all.begin());  // the empty set; the whole set is the largest sum
    if (!all.empty()) all.pop_back();
    return all;
  }

  // A boundary whose dying bytes no proper subset of its newborns can match (by subset sums)
  // must be one run in every plan at the bound: the dying buffers then cover one byte range,
  // at the same offsets since the last of them was born, so from that boundary on they are
  // consecutive. Reducing them there, long before they die, rejects the choices that
  // contradict it at once (chronological backtracking otherwise returns to the choice that
  // broke it only after exploring everything in between).
  void find_forced_runs() {
    forced_.assign(bd_.size(), {});
    one_run_.assign(bd_.size(), 0);
    for (uint32_t v = 0; v < bd_.size(); ++v) {
      const Boundary& b = bd_[v];
      if (b.dying.size() < 2 || b.born.empty()) continue;
      bool cd = false, cb = false;
      const std::vector<uint64_t> sd = proper_sums(b.dying, cd);
      const std::vector<uint64_t> sb = proper_sums(b.born, cb);
      if (cd || cb) continue;
      std::vector<uint64_t> common;
      std::set_intersection(sd.begin(), sd.end(), sb.begin(), sb.end(), std::back_inserter(common));
      if (!common.empty()) continue;
      one_run_[v] = 1;
      uint32_t last_birth = 0;
      for (uint32_t k : b.dying) last_birth = std::max(last_birth, p_.sec_lo[k]);
      forced_[last_birth].push_back(v);
    }
  }

  // Subsets of `nrem` (a mask over boundary b's newborns) of `bytes` bytes (`nsum`: the bytes of
  // every mask). Identical newborns (size, death, alignment) are interchangeable, so only one
  // subset per multiset of them.
  std::vector<uint32_t> born_subsets(const Boundary& b, uint32_t nrem, uint64_t bytes,
                                     const std::vector<uint64_t>& nsum) const {
    std::vector<uint32_t> out;
    std::vector<std::vector<uint64_t>> seen;
    for (uint32_t nm = nrem; nm != 0; nm = (nm - 1) & nrem) {
      if (nsum[nm] != bytes) continue;
      std::vector<uint64_t> sig;
      for (uint32_t i = 0; i < b.born.size(); ++i) {
        if (nm >> i & 1) {
          const uint32_t k = b.born[i];
          sig.push_back(p_.size[k] * 1000003u ^ (uint64_t{p_.sec_hi[k]} << 40) ^ p_.align[k]);
        }
      }
      std::sort(sig.begin(), sig.end());
      if (std::find(seen.begin(), seen.end(), sig) != seen.end()) continue;
      seen.push_back(std::move(sig));
      out.push_back(nm);
    }
    return out;
  }

  // The ways to split boundary v's dying and born buffers into runs: the whole as one run
  // first, then (small boundaries only) partitions into runs of equal bytes on both sides
  // whose dying sides the tree can each make consecutive.
  std::vector<std::vector<Run>> options(size_t v, const PQTree& t) {
    const Boundary& b = bd_[v];
    std::vector<std::vector<Run>> out{{Run{b.dying, b.born}}};
    if (b.born.empty() || b.dying.size() < 2 || b.born.size() < 2 ||
        b.dying.size() > kMaxSplitSide || b.born.size() > kMaxSplitSide) {
      return out;
    }
    const uint32_t nd = static_cast<uint32_t>(b.dying.size());
    const uint32_t nn = static_cast<uint32_t>(b.born.size());
    std::vector<uint64_t> nsum(1u << nn, 0);
    for (uint32_t m = 1; m < (1u << nn); ++m) {
      const uint32_t low = static_cast<uint32_t>(std::countr_zero(m));
      nsum[m] = nsum[m & (m - 1)] + p_.size[b.born[low]];
    }
    std::vector<int8_t> consecutive(1u << nd, -1);  // memo: can the tree make it consecutive?
    auto can = [&](uint32_t m) {
      if (consecutive[m] < 0) {
        PQTree c = t.copy();
        lend(c);
        std::vector<uint32_t> set;
        for (uint32_t i = 0; i < nd; ++i) {
          if (m >> i & 1) set.push_back(b.dying[i]);
        }
        PQTree::Part part;
        steps_ += 2 * live_ + 1;
        consecutive[m] = c.reduce(set, part) ? 1 : 0;
      }
      return consecutive[m] == 1;
    };
    std::vector<std::pair<uint32_t, uint32_t>> cur;  // (dying mask, born mask) per run
    auto rec = [&](auto&& self, uint32_t drem, uint32_t nrem) -> void {
      if (out.size() >= kMaxOptions || steps_ > budget_) return;
      if (drem == 0) {
        if (nrem == 0 && cur.size() >= 2) {
          std::vector<Run> o;
          for (const auto& [dm, nm] : cur) {
            Run r;
            for (uint32_t i = 0; i < nd; ++i) {
              if (dm >> i & 1) r.dying.push_back(b.dying[i]);
            }
            for (uint32_t i = 0; i < nn; ++i) {
              if (nm >> i & 1) r.born.push_back(b.born[i]);
            }
            o.push_back(std::move(r));
          }
          out.push_back(std::move(o));
        }
        return;
      }
      const uint32_t x = drem & (~drem + 1);  // the lowest dying buffer left starts a run
      const uint32_t others = drem & ~x;
      // Subsets of the others, smallest runs first (a run of the whole rest is the last).
      for (uint32_t sub = 0;; sub = (sub - others) & others) {
        const uint32_t dm = x | sub;
        if (dm != drem || !cur.empty()) {
          uint64_t s = 0;
          for (uint32_t i = 0; i < nd; ++i) {
            if (dm >> i & 1) s += p_.size[b.dying[i]];
          }
          ++steps_;
          bool sum_ok = false;
          for (uint32_t nm = nrem; nm != 0 && !sum_ok; nm = (nm - 1) & nrem) sum_ok = nsum[nm] == s;
          if (sum_ok && can(dm)) {
            for (uint32_t nm : born_subsets(b, nrem, s, nsum)) {
              cur.push_back({dm, nm});
              self(self, drem & ~dm, nrem & ~nm);
              cur.pop_back();
              if (out.size() >= kMaxOptions) return;
            }
          }
        }
        if (sub == others) break;
      }
    };
    rec(rec, (1u << nd) - 1, (1u << nn) - 1);
    return out;
  }

  // Depth-first over the boundaries, iteratively (thousands deep): level v holds the tree of
  // every order of the live buffers that the choices before boundary v allow, and the options
  // of boundary v not yet tried.
  struct Level {
    PQTree tree{0};
    size_t live = 0;
    bool started = false;
    bool split = false;  // the multi-run options were added
    std::vector<std::vector<Run>> opts;
    size_t next = 0;
  };
  bool forward() {
    std::vector<Level> lv(bd_.size() + 1);
    lend(lv[0].tree);
    size_t v = 0;
    while (v < bd_.size()) {
      if (steps_ > budget_) return false;
      Level& L = lv[v];
      const Boundary& b = bd_[v];
      live_ = L.live;
      if (!L.started) {
        L.started = true;
        L.split = false;
        L.next = 0;
        steps_ += 1 + L.live;
        if (b.dying.empty()) {
          // Births only: valid on an empty tree (else the live bytes would pass the bound).
          L.opts.clear();
          if (L.tree.empty()) L.opts.push_back({Run{{}, b.born}});
        } else if (b.born.empty() && b.dying.size() != L.live) {
          L.opts.clear();
        } else {
          L.opts = {{Run{b.dying, b.born}}};  // one run; the splits when it fails, or first:
          if (!one_run_[v] && order_ == RunOrder::SplitsFirst) {
            L.split = true;
            std::vector<std::vector<Run>> more = options(v, L.tree);
            std::rotate(more.begin(), more.begin() + 1, more.end());
            L.opts = std::move(more);
          }
        }
      }
      if (L.next == L.opts.size() && L.next == 1 && !L.split && !b.dying.empty() &&
          !b.born.empty()) {
        L.split = true;
        std::vector<std::vector<Run>> more = options(v, L.tree);
        L.opts.insert(L.opts.end(), std::make_move_iterator(more.begin() + 1),
                      std::make_move_iterator(more.end()));
      }
      bool advanced = false;
      while (L.next < L.opts.size() && !advanced && steps_ <= budget_) {
        const std::vector<Run>& opt = L.opts[L.next++];
        PQTree n = L.tree.copy();
        lend(n);
        PQTree::Part part;
        bool ok = true;
        if (b.dying.empty()) {
          n.plant(b.born);
        } else {
          for (const Run& r : opt) ok = ok && n.reduce(r.dying, part);
          steps_ += (1 + opt.size()) * (2 * L.live + 1);
          if (!ok) continue;
          kept_[v] = n.copy();
          for (const Run& r : opt) {
            n.reduce(r.dying, part);  // consecutive already: finds the run after the others' changes
            n.replace(part, r.born);
          }
        }
        for (uint32_t w : forced_[v]) ok = ok && n.reduce(bd_[w].dying, part);
        steps_ += forced_[v].size() * (2 * L.live + 1);
        if (!ok) continue;
        chosen_[v] = opt;
        Level& N = lv[v + 1];
        N.tree = n.copy();  // drops the abandoned nodes
        lend(N.tree);
        N.live = L.live - b.dying.size() + b.born.size();
        N.started = false;
        advanced = true;
      }
      if (advanced) {
        ++v;
      } else {
        L.started = false;
        if (v == 0) return false;
        --v;
      }
    }
    return true;
  }

  // Reads a plan back: the order of the live buffers after each boundary, latest first; offsets
  // are prefix sums.
  bool backward(std::vector<uint64_t>& off, uint32_t rot) {
    off.assign(p_.n(), 0);
    std::vector<uint32_t> sigma, f, order;
    std::vector<Unit> units;
    for (size_t v = bd_.size(); v-- > 0;) {
      const std::vector<Run>& runs = chosen_[v];
      for (uint32_t i = 0; i < runs.size(); ++i) {
        for (uint32_t x : runs[i].born) run_of_[x] = i;
      }
      // The units of sigma: buffers that cross the boundary, and each run's newborn block.
      units.clear();
      uint64_t at = 0;
      std::vector<uint8_t> seen(runs.size(), 0);
      for (uint32_t x : sigma) {
        if (p_.sec_lo[x] == v) {
          off[x] = at;
          const uint32_t g = run_of_[x];
          if (!seen[g]) units.push_back({true, g, at});
          seen[g] = 1;
        } else {
          units.push_back({false, x, at});
        }
        at += p_.size[x];
      }
      steps_ += 1 + sigma.size() * sigma.size();
      if (bd_[v].dying.empty()) {
        sigma.clear();
        continue;
      }
      for (uint32_t g = 0; g < runs.size(); ++g) {
        if (!seen[g]) units.push_back({true, g, at});  // the whole tree dies here
      }
      PQTree t = kept_[v].copy();  // pinning changes it, and a later read-back needs it again
      lend(t);
      steps_ += 2 * sigma.size() + 1;
      if (!read_back(t, runs, units, rot, sigma)) return false;
    }
    return true;
  }

  struct Unit {
    bool run;
    uint32_t id;    // the run's index or the buffer
    uint64_t base;  // offset of its first byte
  };
  const std::vector<uint32_t>& members(const std::vector<Run>& runs, const Unit& u,
                                       std::vector<uint32_t>& one) const {
    if (u.run) return runs[u.id].dying;
    one = {u.id};
    return one;
  }

  // Pins `t` (every run's dying set consecutive) to the sequence `units` and writes the order
  // of the live buffers before the boundary into `sigma`, each run's dying buffers arranged so
  // that their alignments hold.
  bool read_back(PQTree& t, const std::vector<Run>& runs, const std::vector<Unit>& units,
                 uint32_t rot, std::vector<uint32_t>& sigma) {
    PQTree::Part part;
    std::vector<uint32_t> set, one;
    for (size_t i = 0; i + 1 < units.size(); ++i) {
      set = members(runs, units[i], one);
      const std::vector<uint32_t>& b = members(runs, units[i + 1], one);
      set.insert(set.end(), b.begin(), b.end());
      steps_ += 2 * sigma.size() + 1;
      if (!t.reduce(set, part)) return false;
    }
    std::vector<uint32_t> f;
    t.frontier(f);
    auto matches = [&] {
      size_t pos = 0;
      for (const Unit& u : units) {
        const std::vector<uint32_t>& m = members(runs, u, one);
        if (pos + m.size() > f.size()) return false;
        for (size_t j = 0; j < m.size(); ++j) {
          if (std::find(m.begin(), m.end(), f[pos + j]) == m.end()) return false;
        }
        pos += m.size();
      }
      return pos == f.size();
    };
    bool flip = false;
    if (!matches()) {
      std::reverse(f.begin(), f.end());
      if (!matches()) return false;
      flip = true;
    }
    sigma.clear();
    std::vector<uint32_t> order;
    for (const Unit& u : units) {
      if (!u.run) {
        sigma.push_back(u.id);
        continue;
      }
      if (!t.reduce(runs[u.id].dying, part)) return false;
      uint64_t budget = kArrangeSteps;
      order.clear();
      const bool ok = t.arrange(part, flip, u.base, p_, budget, order, rot);
      steps_ += kArrangeSteps - budget;
      if (!ok) return false;
      sigma.insert(sigma.end(), order.begin(), order.end());
    }
    return true;
  }

  const Problem& p_;
  const RunOrder order_;
  uint64_t budget_;
  uint64_t steps_ = 0;
  size_t live_ = 0;
  std::vector<uint32_t> marks_;
  uint32_t epoch_ = 0;
  std::vector<Boundary> bd_;
  std::vector<PQTree> kept_;              // per boundary: the tree after its runs' reductions
  std::vector<std::vector<Run>> chosen_;  // per boundary: the runs chosen
  std::vector<uint32_t> run_of_;          // per buffer: its run at its birth (read-back scratch)
  std::vector<uint8_t> one_run_;          // per boundary: no split has equal bytes
  std::vector<std::vector<uint32_t>> forced_;  // per boundary: later one-run boundaries due here
};

}  // namespace

TargetSearchResult nested_search(const Problem& p, uint64_t budget, std::vector<uint64_t>& out,
                                 std::vector<uint64_t>* unaligned) {
  TargetSearchResult r;
  if (!sweep_applies(p, p.lower_bound)) return r;
  // Forward, then with time reversed (same indices): the reductions agree (the question is
  // symmetric in time), but the read-back goes the other way, so its alignment choices differ.
  std::vector<uint64_t> off;
  const Problem rev = reversed_problem(p);
  int tree = -1;  // the first attempt whose forward pass completed
  for (int k = 0; k < 4 && !r.found; ++k) {
    Nested nested(k % 2 == 0 ? p : rev, budget / 4,
                  k < 2 ? RunOrder::OneRunFirst : RunOrder::SplitsFirst);
    r.found = nested.run(off);
    r.nodes += nested.steps();
    if (tree < 0 && nested.forward_ok()) tree = k;
  }
  if (!r.found && unaligned != nullptr && tree >= 0) {
    // A tree but no aligned read-back: the same attempt with every alignment 1 (the forward pass
    // never looks at them, so it completes again and its first read-back succeeds).
    Problem u = tree % 2 == 0 ? p : rev;
    std::fill(u.align.begin(), u.align.end(), uint64_t{1});
    Nested nested(u, budget / 4, tree < 2 ? RunOrder::OneRunFirst : RunOrder::SplitsFirst);
    if (nested.run(off)) *unaligned = std::move(off);
    r.nodes += nested.steps();
  }
  if (!r.found) return r;
  // Valid by construction up to alignments (checked while reading back); checked anyway, since
  // a wrong plan here would be silent memory corruption in an arena.
  std::vector<PlanBuffer> buf(p.n());
  for (uint32_t k = 0; k < p.n(); ++k) {
    buf[k] = {static_cast<int64_t>(k), p.lower[k], p.upper[k], p.size[k], p.align[k]};
  }
  MINFER_ASSERT(check_offsets(buf, off, p.lower_bound).empty(),
                "nested search produced an invalid plan");
  out = std::move(off);
  return r;
}

}  // namespace minfer::planner_detail
