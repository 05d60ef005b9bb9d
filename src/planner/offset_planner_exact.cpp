// Offset planner internals: branch and bound over canonical solutions (exact mode).
//
// Why canonical solutions suffice: take any valid plan, sort its buffers by offset and re-place
// them in that order, each as low as the buffers already placed allow ("gravity"); the result is
// valid and no higher. So the search only enumerates placement sequences in which (1) every
// buffer sits directly on the highest placed buffer it overlaps (or at 0) and (2) the keys
// (offset, rank) strictly increase along the sequence (rank: a priority order, set again for
// each piece of a decomposed problem, see rank_piece). The search state is then a skyline:
// min_off[b], the offset buffer b would get now, is the highest top of the placed buffers in its
// time sections.
//
// Pruning, each sound for the canonical sequence of some optimal plan (docs/PLANNER.md has the
// longer story and the measurements):
//  * blocked buffers: an unplaced buffer whose key (min_off, rank) is below the last placed key
//    can never sit at its current min_off again; it must first be lifted by an unplaced
//    neighbour placed at offset >= the last offset, so it lands at >= last offset + the smallest
//    unplaced neighbour's size, and a blocked buffer with no unplaced neighbour is dead;
//  * section inference (the key bound, see sections_fit): in every time section the unplaced
//    buffers stack above their lowest possible offsets and must end under the target. Space
//    below is lost for good; on perfect packings (target = lower bound) a tight section
//    tolerates no lost byte, so a wrong choice fails one level down;
//  * tight-section cutoff: candidates whose key would block every buffer able to fill the
//    bottom of a tight section are not tried at all;
//  * dominance: placing a buffer at offset o is useless when some unplaced buffer could still
//    sit entirely below o (min_off + size <= o): the plan with it moved down is found elsewhere;
//  * twins: buffers with identical (lifetime, size, alignment) are interchangeable, so they are
//    placed in rank order only;
//  * transposition table: a state proven empty is not searched again (see known_failure);
//  * decomposition: when no unplaced buffer crosses a section boundary any more, the two sides
//    are independent problems, solved one after the other; a failure on one side is final. The
//    whole is checked before it is split (a failing right side must not wait until the left
//    side's search is over), and each side is re-ranked by its own crowding (see rank_piece).
// The driver (exact_search) decides targets: see the comment there.
#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "common/error.h"
#include "planner/offset_planner_detail.h"

namespace minfer::planner_detail {
namespace {

constexpr uint64_t kUnplaced = UINT64_MAX;
constexpr uint32_t kNone = UINT32_MAX;

enum class Status : uint8_t { Found, NotFound, Aborted };

struct Partition {
  uint32_t s0 = 0, s1 = 0;     // its sections [s0, s1)
  std::vector<uint32_t> bufs;  // the buffers unplaced when it was formed
};

// Static priority orders (ties between equal offsets), after MiniMalloc's preorderings: each
// letter is one key, all descending, ties by index: W = lifetime width (steps), C = sections
// spanned, A = area (bytes x steps), T = the total of its most crowded section, Z = size.
// Different orders fail on different instances (K needs "WAT", A "TWA", B "TAW", H "TCA"
// here), hence a portfolio searched round robin.
// Sorts `bufs` by `keys`; `total[k]` is buffer k's T (the static order uses p.max_total, a
// piece of a decomposed problem its own unplaced totals).
void sort_by_keys(const Problem& p, std::string_view keys, std::span<const uint64_t> total,
                  std::vector<uint32_t>& bufs) {
  auto value = [&](uint32_t k, char c) -> long double {
    switch (c) {
      case 'W':
        return static_cast<long double>(p.upper[k] - p.lower[k]);
      case 'C':
        return static_cast<long double>(p.sec_hi[k] - p.sec_lo[k]);
      case 'A':
        return static_cast<long double>(p.size[k]) *
               static_cast<long double>(p.upper[k] - p.lower[k]);
      case 'T':
        return static_cast<long double>(total[k]);
      case 'Z':
        return static_cast<long double>(p.size[k]);
    }
    MINFER_ASSERT(false, "unknown preorder key");
    return 0;
  };
  std::sort(bufs.begin(), bufs.end(), [&](uint32_t a, uint32_t b) {
    for (char c : keys) {
      const long double va = value(a, c), vb = value(b, c);
      if (va != vb) return va > vb;
    }
    return a < b;
  });
}

std::vector<uint32_t> preorder(const Problem& p, std::string_view keys) {
  std::vector<uint32_t> order(p.n());
  for (uint32_t k = 0; k < p.n(); ++k) order[k] = k;
  sort_by_keys(p, keys, p.max_total, order);
  return order;
}

class Search {
 public:
  Search(const Problem& p, std::string_view keys, std::chrono::steady_clock::time_point deadline)
      : p_(p), keys_(keys), deadline_(deadline) {
    const size_t n = p.n();
    const std::vector<uint32_t> order = preorder(p, keys);
    rank_.resize(n);
    for (uint32_t r = 0; r < n; ++r) rank_[order[r]] = r;
    // lift_[k]: a blocked buffer k lands on some buffer placed later that overlaps it, so at
    // least this much above the last offset (the static floor of the dynamic lift in
    // set_lowest_offsets; the tight-section cutoff uses it).
    lift_.assign(n, 0);
    for (size_t k = 0; k < n; ++k) {
      uint64_t m = UINT64_MAX;
      for (uint32_t j : p.overlaps[k]) m = std::min(m, p.size[j]);
      lift_[k] = m == UINT64_MAX ? p.step : m;
    }
    // twin_prev_[k]: the identical buffer just before k in rank order (k waits for it). Twins
    // tie on every key (T included, in every piece), so rank_piece keeps this order.
    twin_prev_.assign(n, kNone);
    std::vector<uint32_t> by_shape(order.begin(), order.end());
    auto shape = [&](uint32_t k) {
      return std::make_tuple(p.lower[k], p.upper[k], p.size[k], p.align[k]);
    };
    std::stable_sort(by_shape.begin(), by_shape.end(),
                     [&](uint32_t a, uint32_t b) { return shape(a) < shape(b); });
    for (size_t i = 1; i < by_shape.size(); ++i) {
      if (shape(by_shape[i - 1]) == shape(by_shape[i])) twin_prev_[by_shape[i]] = by_shape[i - 1];
    }
    frames_.resize(n + 1);  // one per depth, sized once: frames are never reallocated
    // 2^16 entries (2 MiB) per search; replaced on collision, so it only ever forgets.
    table_.resize(size_t{1} << 16);
    eff_.assign(n, 0);
    piece_total_.assign(n, 0);
    subset_of_next_.assign(p.section_total.size(), 1);
    for (size_t k = 0; k < n; ++k) subset_of_next_[p.sec_hi[k] - 1] = 0;
  }

  // Looks for a plan with height <= target within node_limit nodes.
  Status run(uint64_t target, uint64_t node_limit, std::vector<uint64_t>& solution) {
    target_ = target;
    node_limit_ = node_limit;
    nodes_ = 0;
    off_.assign(p_.n(), kUnplaced);
    sol_.assign(p_.n(), 0);
    min_off_.assign(p_.n(), 0);
    total_ = p_.section_total;
    hash_ = salt_;
    for (uint32_t k = 0; k < p_.n(); ++k) hash_ ^= mix(k, 0);
    // cuts_[s]: unplaced buffers live in both section s and s + 1. Where it is 0 the problem
    // splits into independent time partitions (MiniMalloc's dynamic decomposition).
    cuts_.assign(p_.section_total.size(), 0);
    for (uint32_t k = 0; k < p_.n(); ++k) {
      for (uint32_t s = p_.sec_lo[k]; s + 1 < p_.sec_hi[k]; ++s) ++cuts_[s];
    }
    Partition all{0, static_cast<uint32_t>(p_.section_total.size()), {}};
    all.bufs.resize(p_.n());
    for (uint32_t k = 0; k < p_.n(); ++k) all.bufs[k] = k;
    std::vector<uint32_t> cutpoints;
    for (uint32_t s = 0; s + 1 < all.s1; ++s) {
      if (cuts_[s] == 0) cutpoints.push_back(s + 1);
    }
    Status s = solve_parts(all, cutpoints, 0);
    if (s == Status::Found) solution = sol_;
    total_nodes_ += nodes_;
    return s;
  }
  uint64_t total_nodes() const { return total_nodes_; }
  uint64_t last_nodes() const { return nodes_; }

 private:
  struct Cand {
    uint64_t off;
    uint32_t rank, buf;
  };
  struct Change {
    uint32_t index;
    uint64_t old;
  };
  struct Frame {
    std::vector<Cand> cands;
    std::vector<Change> offsets;
    std::vector<uint32_t> cutpoints;
    uint64_t hash = 0;  // hash_ before this depth's placement
  };

  // Solves the pieces of `part` between the cut points independently: all must succeed, and a
  // failure of one cannot be repaired by another's choices.
  Status solve_parts(const Partition& part, const std::vector<uint32_t>& cutpoints, size_t depth) {
    if (cutpoints.empty()) return dfs(part, 0, 0, depth);
    uint32_t begin = part.s0;
    for (size_t c = 0; c <= cutpoints.size(); ++c) {
      uint32_t end = c < cutpoints.size() ? cutpoints[c] : part.s1;
      Partition sub{begin, end, {}};
      for (uint32_t k : part.bufs) {
        if (off_[k] == kUnplaced && p_.sec_lo[k] < end && begin < p_.sec_hi[k]) {
          sub.bufs.push_back(k);
        }
      }
      begin = end;
      if (sub.bufs.empty()) continue;
      std::vector<uint32_t> saved(sub.bufs.size());
      for (size_t i = 0; i < sub.bufs.size(); ++i) saved[i] = rank_[sub.bufs[i]];
      const uint64_t salt = rank_piece(sub.bufs);
      hash_ ^= salt;
      Status s = dfs(sub, 0, 0, depth);
      hash_ ^= salt;
      for (size_t i = 0; i < sub.bufs.size(); ++i) rank_[sub.bufs[i]] = saved[i];
      if (s != Status::Found) return s;
    }
    return Status::Found;
  }

  // A piece of a decomposed problem is searched with ranks of its own: the same keys, but T
  // from the piece's unplaced totals, as MiniMalloc re-sorts a sub-partition. On
  // ../shared/planner-bench this is what lets "TWA" pack E and I (with the parent's ranks the
  // search thrashed for millions of nodes). The ranks are a function of the piece's buffer set,
  // and so is the returned salt: mixed into the transposition table's hash, it keeps a failure
  // proven under one ranking from pruning a node searched under another.
  uint64_t rank_piece(std::vector<uint32_t> bufs) {
    uint64_t salt = 0x6a09e667f3bcc909ull;
    for (uint32_t k : bufs) {
      uint64_t t = 0;
      for (uint32_t s = p_.sec_lo[k]; s < p_.sec_hi[k]; ++s) t = std::max(t, total_[s]);
      piece_total_[k] = t;
      salt ^= splitmix(k ^ 0x243f6a8885a308d3ull);
    }
    sort_by_keys(p_, keys_, piece_total_, bufs);
    for (uint32_t r = 0; r < bufs.size(); ++r) rank_[bufs[r]] = r;
    return splitmix(salt);
  }

  // One node: the last placed key is (o, r). Returns Found with sol_ filled for every buffer
  // of `part`, NotFound when the subtree is exhausted, Aborted on the node or time limit.
  Status dfs(const Partition& part, uint64_t o, uint32_t r, size_t depth) {
    if (++nodes_ > node_limit_) return Status::Aborted;
    if ((nodes_ & 255) == 0 && std::chrono::steady_clock::now() > deadline_) {
      return Status::Aborted;
    }
    if (known_failure(o, r)) return Status::NotFound;
    Frame& f = frames_[depth];
    f.cands.clear();
    uint64_t min_height = UINT64_MAX;
    bool any = false;
    if (!set_lowest_offsets(part, o, r)) return Status::NotFound;
    for (uint32_t k : part.bufs) {
      if (off_[k] != kUnplaced) continue;
      any = true;
      const uint64_t m = min_off_[k];
      min_height = std::min(min_height, m + p_.size[k]);
      if (eff_[k] != m) continue;  // blocked: lifted above m (set_lowest_offsets)
      if (twin_prev_[k] != kNone && off_[twin_prev_[k]] == kUnplaced) continue;
      f.cands.push_back({m, rank_[k], k});
    }
    if (!any) return Status::Found;
    if (f.cands.empty() || !sections_fit(part, o, r)) return Status::NotFound;
    // Drop the dominated candidates (a buffer would fit entirely below them) and those past
    // the cutoff (they block a tight section) before sorting: usually most of them.
    const std::pair<uint64_t, uint32_t> cutoff = cutoff_;
    std::erase_if(f.cands, [&](const Cand& c) {
      return c.off >= min_height || std::pair<uint64_t, uint32_t>{c.off, c.rank} > cutoff;
    });
    std::sort(f.cands.begin(), f.cands.end(), [](const Cand& a, const Cand& b) {
      return a.off != b.off ? a.off < b.off : a.rank < b.rank;
    });
    for (size_t ci = 0; ci < f.cands.size(); ++ci) {
      const Cand c = f.cands[ci];
      place(c.buf, c.off, depth);
      Status s = descend(part, c, depth);
      unplace(c.buf, depth);
      if (s != Status::NotFound) return s;
    }
    record_failure(o, r);
    return Status::NotFound;
  }

  // After placing c: cut its internal section boundaries; new zero cuts split the partition.
  Status descend(const Partition& part, const Cand& c, size_t depth) {
    Frame& f = frames_[depth];
    f.cutpoints.clear();
    for (uint32_t sec = p_.sec_lo[c.buf]; sec + 1 < p_.sec_hi[c.buf]; ++sec) {
      if (--cuts_[sec] == 0 && part.s0 < sec + 1 && sec + 1 < part.s1) {
        f.cutpoints.push_back(sec + 1);
      }
    }
    Status s;
    if (f.cutpoints.empty()) {
      s = dfs(part, c.off, c.rank, depth + 1);
    } else if (!set_lowest_offsets(part, c.off, c.rank) || !sections_fit(part, c.off, c.rank)) {
      // The check the child would make, on the whole: solve_parts searches the left side to
      // the end before it looks at the right one (E of ../shared/planner-bench: 8x the nodes).
      s = Status::NotFound;
    } else {
      s = solve_parts(part, std::vector<uint32_t>(f.cutpoints), depth + 1);
    }
    for (uint32_t sec = p_.sec_lo[c.buf]; sec + 1 < p_.sec_hi[c.buf]; ++sec) ++cuts_[sec];
    return s;
  }

  // Sets eff_[k], the lowest offset buffer k can still get, for every unplaced buffer of `part`
  // under the last key (o, r); false when some buffer can no longer fit under the target at all.
  // A blocked buffer (key below the last) must be lifted by an unplaced neighbour placed at
  // offset >= o: it lands at least the smallest such neighbour's size above o, and never when
  // it has no unplaced neighbour left (MiniMalloc's "hatless" case, seen from the buffer left
  // behind). On E of ../shared/planner-bench this cut the nodes to a seventh.
  bool set_lowest_offsets(const Partition& part, uint64_t o, uint32_t r) {
    for (uint32_t k : part.bufs) {
      if (off_[k] != kUnplaced) continue;
      const uint64_t m = min_off_[k];
      if (m < o || (m == o && rank_[k] < r)) {
        uint64_t lift = UINT64_MAX;
        for (uint32_t j : p_.overlaps[k]) {
          if (off_[j] == kUnplaced) lift = std::min(lift, p_.size[j]);
        }
        if (lift == UINT64_MAX) return false;
        eff_[k] = align_up(o + lift, p_.align[k]);
      } else {
        eff_[k] = m;
      }
      if (eff_[k] + p_.size[k] > target_) return false;
    }
    return true;
  }

  // Section inference: in every section the unplaced buffers stack one above another, each at
  // or above its lowest possible offset eff_ (computed by dfs). Like jobs with release times on
  // one machine, the stack ends no lower than max over e of (e + bytes of buffers with eff_ >= e);
  // that must fit under the target. (e = the lowest eff_ alone is MiniMalloc's section bound.)
  //
  // It also sets cutoff_, the highest candidate key worth trying at this node: a section whose
  // slack is smaller than the rise it would suffer if its lowest buffers ("fillers", eff_ = the
  // minimum) were skipped needs one of them placed next-ish; every candidate key above the
  // largest filler key blocks them all, so the loop in dfs stops there.
  bool sections_fit(const Partition& part, uint64_t o, uint32_t r) {
    // Most nodes fail, and mostly in the section that failed last: try it first, before the
    // full pass (which also computes the cutoff). A third of the exact search's time on E of
    // ../shared/planner-bench.
    const uint32_t hot = last_failed_section_;
    if (part.s0 <= hot && hot < part.s1 && !section_fits(hot, {o, r})) return false;
    cutoff_ = {UINT64_MAX, UINT32_MAX};
    for (uint32_t s = part.s0; s < part.s1; ++s) {
      // A section whose right edge ends no buffer holds a subset of the next one's buffers:
      // when its bound fails, the next section's release-date bound fails too (see below).
      if (subset_of_next_[s] && s + 1 < part.s1) continue;
      if (!section_fits(s, {o, r})) {
        last_failed_section_ = s;
        return false;
      }
    }
    return true;
  }

  // One section of sections_fit; also lowers cutoff_ when the section is tight.
  bool section_fits(uint32_t s, std::pair<uint64_t, uint32_t> last) {
    using Key = std::pair<uint64_t, uint32_t>;
    if (total_[s] == 0) return true;
    // One pass: the lowest eff_ (e1), the next distinct one or a filler's lift (e2), the
    // highest, and the largest key among the fillers.
    uint64_t e1 = UINT64_MAX, e2 = UINT64_MAX, e_max = 0;
    Key kmax{0, 0};
    bool blocked_filler = false;
    for (uint32_t k : p_.section_buffers[s]) {
      if (off_[k] != kUnplaced) continue;
      const uint64_t e = eff_[k];
      e_max = std::max(e_max, e);
      if (e > e1) {
        e2 = std::min(e2, e);
        continue;
      }
      if (e < e1) {
        e2 = std::min(e1, e2);
        e1 = e;
        kmax = {0, 0};
        blocked_filler = false;
      }
      const Key key{min_off_[k], rank_[k]};
      blocked_filler = blocked_filler || min_off_[k] != e || key < last;
      kmax = std::max(kmax, key);
      e2 = std::min(e2, e + lift_[k]);
    }
    if (e1 + total_[s] > target_) return false;
    const uint64_t slack = target_ - (e1 + total_[s]);
    // The release-date bound can only fail where eff_ values spread wider than the slack.
    if (e_max - e1 > slack && !release_bound_fits(s)) return false;
    if (!blocked_filler && slack < e2 - e1) cutoff_ = std::min(cutoff_, kmax);
    return true;
  }

  bool release_bound_fits(uint32_t s) {
    scratch_.clear();
    for (uint32_t k : p_.section_buffers[s]) {
      if (off_[k] == kUnplaced) scratch_.push_back({eff_[k], k});
    }
    std::sort(scratch_.begin(), scratch_.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    uint64_t above = 0;
    for (const auto& [e, k] : scratch_) {
      above += p_.size[k];
      if (e + above > target_) return false;
    }
    return true;
  }

  void place(uint32_t b, uint64_t o, size_t depth) {
    Frame& f = frames_[depth];
    f.offsets.clear();
    f.hash = hash_;
    hash_ ^= mix(b, min_off_[b]);  // b leaves the unplaced set
    off_[b] = o;
    sol_[b] = o;  // the last write on the successful path is the answer
    const uint64_t top = o + p_.size[b];
    for (uint32_t s = p_.sec_lo[b]; s < p_.sec_hi[b]; ++s) total_[s] -= p_.size[b];
    for (uint32_t j : p_.overlaps[b]) {
      if (off_[j] != kUnplaced || min_off_[j] >= top) continue;
      f.offsets.push_back({j, min_off_[j]});
      hash_ ^= mix(j, min_off_[j]);
      min_off_[j] = align_up(top, p_.align[j]);
      hash_ ^= mix(j, min_off_[j]);
    }
  }

  void unplace(uint32_t b, size_t depth) {
    Frame& f = frames_[depth];
    for (auto it = f.offsets.rbegin(); it != f.offsets.rend(); ++it) {
      min_off_[it->index] = it->old;
    }
    for (uint32_t s = p_.sec_lo[b]; s < p_.sec_hi[b]; ++s) total_[s] += p_.size[b];
    off_[b] = kUnplaced;
    hash_ = f.hash;
  }

  // Transposition table. The subtree below a node depends only on the unplaced set U, the
  // min_off_ of each buffer in U, the last key (o, r) and the target; it shrinks as the key
  // grows or the target falls. So a subtree proven empty for (key, target) is empty for every
  // node with the same (U, min_off_) and a key >= it and a target <= it. Nodes reached along
  // different paths often share that state: stacking buffers in a different order leaves the
  // same skyline once nothing unplaced sees the intermediate tops. The state is identified by a
  // 64-bit hash (XOR over U of mix(buffer, min_off_)); a collision could wrongly prune one
  // subtree, with odds around 2^-40 per search here, which we accept.
  static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  uint64_t mix(uint32_t k, uint64_t m) const { return splitmix(splitmix(k) ^ m); }

  struct TableEntry {
    uint64_t hash = 0, target = 0, off = 0;
    uint32_t rank = 0;
  };
  bool known_failure(uint64_t o, uint32_t r) const {
    const TableEntry& e = table_[hash_ & (table_.size() - 1)];
    return e.hash == hash_ && e.target >= target_ &&
           std::pair<uint64_t, uint32_t>{e.off, e.rank} <= std::pair<uint64_t, uint32_t>{o, r};
  }
  void record_failure(uint64_t o, uint32_t r) {
    table_[hash_ & (table_.size() - 1)] = {hash_, target_, o, r};
  }

  const Problem& p_;
  std::string keys_;  // the preorder (see sort_by_keys)
  std::chrono::steady_clock::time_point deadline_;
  std::vector<uint32_t> rank_, twin_prev_;
  std::vector<uint64_t> lift_;
  std::vector<uint64_t> off_, sol_, min_off_, total_, eff_;
  std::vector<uint8_t> subset_of_next_;
  std::vector<uint64_t> piece_total_;  // T of a piece's buffers (rank_piece)
  std::vector<uint32_t> cuts_;
  std::vector<std::pair<uint64_t, uint32_t>> scratch_;  // (eff_, buffer) of one section
  std::pair<uint64_t, uint32_t> cutoff_;                // see sections_fit
  uint32_t last_failed_section_ = 0;                    // see sections_fit
  std::vector<Frame> frames_;
  std::vector<TableEntry> table_;
  uint64_t hash_ = 0, salt_ = 0;
  uint64_t target_ = 0, node_limit_ = 0, nodes_ = 0, total_nodes_ = 0;
};

// The portfolio of static orders, searched round robin (see preorder). MiniMalloc's three plus
// TCA, the only one of those tried that packs H quickly (355 nodes; the others abort at 300k).
// TWA first: it packs A, E and I of ../shared/planner-bench (8k, 89k and 20k nodes), TAW packs
// B (31k), WAT K.
constexpr std::string_view kPreorders[] = {"TWA", "TAW", "TCA", "WAT"};

uint64_t round_up(uint64_t x, uint64_t step) {
  return (x + step - 1) / step * step;
}

}  // namespace

// Targets. A search for "height <= T" is a decision problem: fast when T is feasible and the
// pruning is tight (T = the lower bound on a perfect packing), hopeless to refute when T is just
// infeasible. So every round (node budget doubling per round, as MiniMalloc does, over the
// orders round robin so that one unlucky order cannot eat the time) first tries the lower
// bound — success there is optimal — and then descends from the incumbent (see descend). A
// search that exhausts its tree proves the target infeasible and raises the bound instead.
ExactResult exact_search(const Problem& p, std::vector<uint64_t>& best, uint64_t& best_height,
                         std::chrono::steady_clock::time_point deadline, uint64_t capacity) {
  ExactResult result;
  const auto t0 = std::chrono::steady_clock::now();
  // Heights are sums of sizes and alignment paddings: multiples of p.step.
  uint64_t lo = round_up(p.lower_bound, p.step);
  if (best_height <= lo) return result;
  std::vector<Search> searches;
  for (std::string_view h : kPreorders) searches.emplace_back(p, h, deadline);
  std::vector<uint64_t> sol;
  auto timed_out = [&] { return std::chrono::steady_clock::now() >= deadline; };
  // With a capacity the question is "does it fit?": the bound attempts target the capacity
  // itself (MiniMalloc's decision problem) and there is no descent.
  auto done = [&] {
    return lo >= best_height || timed_out() ||
           (capacity > 0 && (best_height <= capacity || lo > capacity));
  };
  // Runs one search; false when it was cut short (node budget or time).
  auto attempt = [&](Search& s, uint64_t target, uint64_t budget) {
    const Status st = s.run(target, budget, sol);
    if (st == Status::Found) {
      const uint64_t h = height_of(p, sol);
      MINFER_ASSERT(h <= target, "exact search returned a plan above its target");
      best = sol;
      best_height = h;
      result.improved = true;
      result.best_found_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else if (st == Status::NotFound) {
      lo = std::max(lo, target + p.step);  // the tree was exhausted: target is infeasible
    }
    return st != Status::Aborted;
  };
  // The descent: per order, targets 1, 2, 4, ... steps below the incumbent. Difficulty is not
  // monotone in the target (a looser one prunes less), so one step at a time can stall a few
  // steps above a height that a bolder jump reaches at once (D: stuck at 1029 KiB for 8 s, while
  // a search at 1024 KiB succeeds in 17.5k nodes). A success keeps the jump, an abort doubles
  // it, until the jump passes the bound. Each round the descent may spend as many nodes as that
  // round's bound attempts did (the next order continues where a round stopped): it used to run
  // every order's jumps to the end, 7x the bound attempts' time on E of
  // ../shared/planner-bench, which starved the bound attempts that E and I need.
  auto nodes_so_far = [&] {
    uint64_t n = 0;
    for (const Search& s : searches) n += s.total_nodes();
    return n;
  };
  size_t next = 0;  // the order whose descent runs next
  uint64_t budget = std::max<uint64_t>(p.n(), 64);
  while (!done()) {
    budget *= 2;
    const uint64_t n0 = nodes_so_far();
    for (Search& s : searches) {
      if (done()) break;
      const uint64_t target = capacity > 0 ? std::max(lo, capacity / p.step * p.step) : lo;
      if (attempt(s, target, budget)) break;  // optimal, fits, or the bound rose
    }
    const uint64_t n1 = nodes_so_far(), share = n1 - n0;
    while (capacity == 0 && !done() && nodes_so_far() - n1 < share) {
      // The order that found the incumbent goes on while it keeps improving it.
      Search& s = searches[next];
      const uint64_t before = best_height;
      for (uint64_t jump = p.step; lo + jump <= best_height && !timed_out();) {
        if (!attempt(s, best_height - jump, budget)) jump *= 2;
      }
      if (best_height == before) next = (next + 1) % searches.size();
    }
  }
  result.exhausted = lo >= best_height;
  for (const Search& s : searches) result.nodes += s.total_nodes();
  return result;
}

}  // namespace minfer::planner_detail
