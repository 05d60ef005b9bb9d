// Offset planner internals: branch and bound over canonical solutions (exact mode).
//
// Why canonical solutions suffice: take any valid plan, sort its buffers by offset and re-place
// them in that order, each as low as the buffers already placed allow ("gravity"); the result is
// valid and no higher. So the search only enumerates placement sequences in which (1) every
// buffer sits directly on the highest placed buffer it overlaps (or at 0) and (2) offsets never
// decrease along the sequence (ties in priority order). Two more prunings keep it small:
//  * dominance: placing a buffer at offset o is useless when some unplaced buffer b could still
//    be placed entirely below o (min_off[b] + size[b] <= o) — that space would stay empty forever
//    in this branch, and the plan with b moved down is found in another branch;
//  * section inference: in every time section, the unplaced bytes must fit between the
//    section's floor (its highest placed byte, or the current offset — offsets never decrease)
//    and the target height. (Raising the floor further to the lowest offset any unplaced buffer
//    of the section can take, as MiniMalloc does, cost more time per node than it saved in
//    nodes on ../shared/planner-bench here, so it is not done.)
//  * decomposition: when no unplaced buffer crosses a section boundary any more, the two sides
//    are independent problems, solved one after the other; a failure on one side is final.
// Targets: the lower bound first (when it is reached the plan is optimal), then one step below
// the incumbent; each search runs under a node limit that doubles per round, over two priority
// orders, so that one unlucky order cannot eat the whole time budget.
#include <algorithm>
#include <chrono>

#include "alloc/offset_planner_detail.h"
#include "common/error.h"

namespace minfer::planner_detail {
namespace {

constexpr uint64_t kUnplaced = UINT64_MAX;

enum class Status { Found, NotFound, Aborted };

struct Partition {
  uint32_t s0 = 0, s1 = 0;     // its sections [s0, s1)
  std::vector<uint32_t> bufs;  // the buffers unplaced when it was formed
};

class Search {
 public:
  Search(const Problem& p, std::span<const uint32_t> order,
         std::chrono::steady_clock::time_point deadline)
      : p_(p), deadline_(deadline) {
    rank_.resize(p.n());
    for (uint32_t r = 0; r < p.n(); ++r) rank_[order[r]] = r;
    frames_.resize(p.n() + 1);  // one per depth, sized once: frames are never reallocated
  }

  // Looks for a plan with height <= target within node_limit nodes.
  Status run(uint64_t target, uint64_t node_limit, std::vector<uint64_t>& solution) {
    target_ = target;
    node_limit_ = node_limit;
    nodes_ = 0;
    off_.assign(p_.n(), kUnplaced);
    sol_.assign(p_.n(), 0);
    min_off_.assign(p_.n(), 0);
    floor_.assign(p_.section_total.size(), 0);
    total_ = p_.section_total;
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
    std::vector<Change> offsets, floors;
    std::vector<uint32_t> cutpoints;
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
      Status s = dfs(sub, 0, 0, depth);
      if (s != Status::Found) return s;
    }
    return Status::Found;
  }

  Status dfs(const Partition& part, uint64_t last_off, uint32_t last_rank, size_t depth) {
    if (++nodes_ > node_limit_) return Status::Aborted;
    if ((nodes_ & 1023) == 0 && std::chrono::steady_clock::now() > deadline_) {
      return Status::Aborted;
    }
    Frame& f = frames_[depth];
    f.cands.clear();
    uint64_t min_height = UINT64_MAX;
    for (uint32_t k : part.bufs) {
      if (off_[k] != kUnplaced) continue;
      f.cands.push_back({min_off_[k], rank_[k], k});
      min_height = std::min(min_height, min_off_[k] + p_.size[k]);
    }
    if (f.cands.empty()) return Status::Found;
    std::sort(f.cands.begin(), f.cands.end(), [](const Cand& a, const Cand& b) {
      return a.off != b.off ? a.off < b.off : a.rank < b.rank;
    });
    for (size_t ci = 0; ci < f.cands.size(); ++ci) {
      const Cand c = f.cands[ci];
      if (c.off < last_off || (c.off == last_off && c.rank < last_rank)) continue;
      if (c.off >= min_height) break;  // dominated, and so is every later candidate
      if (c.off + p_.size[c.buf] > target_) continue;
      place(c.buf, c.off, depth);
      Status s = Status::NotFound;
      if (feasible(part, c.off)) {
        // Cut the buffer's internal section boundaries; new zero cuts split the partition.
        f.cutpoints.clear();
        for (uint32_t sec = p_.sec_lo[c.buf]; sec + 1 < p_.sec_hi[c.buf]; ++sec) {
          if (--cuts_[sec] == 0) f.cutpoints.push_back(sec + 1);
        }
        if (f.cutpoints.empty()) {
          s = dfs(part, c.off, c.rank, depth + 1);
        } else {
          Partition narrowed{part.s0, part.s1, part.bufs};
          s = solve_parts(narrowed, std::vector<uint32_t>(f.cutpoints), depth + 1);
        }
        for (uint32_t sec = p_.sec_lo[c.buf]; sec + 1 < p_.sec_hi[c.buf]; ++sec) ++cuts_[sec];
      }
      unplace(c.buf, depth);
      if (s != Status::NotFound) return s;
    }
    return Status::NotFound;
  }

  void place(uint32_t b, uint64_t o, size_t depth) {
    Frame& f = frames_[depth];
    f.offsets.clear();
    f.floors.clear();
    off_[b] = o;
    sol_[b] = o;  // the last write on the successful path is the answer
    const uint64_t top = o + p_.size[b];
    for (uint32_t s = p_.sec_lo[b]; s < p_.sec_hi[b]; ++s) {
      f.floors.push_back({s, floor_[s]});
      floor_[s] = std::max(floor_[s], top);
      total_[s] -= p_.size[b];
    }
    for (uint32_t j : p_.overlaps[b]) {
      if (off_[j] != kUnplaced || min_off_[j] >= top) continue;
      f.offsets.push_back({j, min_off_[j]});
      min_off_[j] = align_up(top, p_.align[j]);
    }
  }

  void unplace(uint32_t b, size_t depth) {
    Frame& f = frames_[depth];
    for (auto it = f.floors.rbegin(); it != f.floors.rend(); ++it) floor_[it->index] = it->old;
    for (auto it = f.offsets.rbegin(); it != f.offsets.rend(); ++it) {
      min_off_[it->index] = it->old;
    }
    for (uint32_t s = p_.sec_lo[b]; s < p_.sec_hi[b]; ++s) total_[s] += p_.size[b];
    off_[b] = kUnplaced;
  }

  bool feasible(const Partition& part, uint64_t offset) const {
    for (uint32_t s = part.s0; s < part.s1; ++s) {
      if (total_[s] != 0 && std::max(floor_[s], offset) + total_[s] > target_) return false;
    }
    return true;
  }

  const Problem& p_;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<uint32_t> rank_;
  std::vector<uint64_t> off_, sol_, min_off_, floor_, total_;
  std::vector<uint32_t> cuts_;
  std::vector<Frame> frames_;
  uint64_t target_ = 0, node_limit_ = 0, nodes_ = 0, total_nodes_ = 0;
};

uint64_t round_up(uint64_t x, uint64_t step) {
  return (x + step - 1) / step * step;
}

}  // namespace

ExactResult exact_search(const Problem& p, std::vector<uint64_t>& best, uint64_t& best_height,
                         std::chrono::steady_clock::time_point deadline) {
  ExactResult result;
  // Heights are sums of sizes and alignment paddings: multiples of p.step.
  uint64_t lo = round_up(p.lower_bound, p.step);
  if (best_height <= lo) return result;
  Search searches[] = {Search(p, make_order(p, OrderKey::Pressure), deadline),
                       Search(p, make_order(p, OrderKey::Area), deadline)};
  std::vector<uint64_t> sol;
  uint64_t node_limit = std::max<uint64_t>(p.n(), 64);
  while (lo < best_height && std::chrono::steady_clock::now() < deadline) {
    node_limit *= 2;
    // The bound first (success there is optimal), then just below the incumbent.
    for (int which = 0; which < 2 && lo < best_height; ++which) {
      uint64_t target = which == 0 ? lo : best_height - p.step;
      if (which == 1 && target == lo) break;
      for (Search& s : searches) {
        Status st = s.run(target, node_limit, sol);
        if (st == Status::Found) {
          uint64_t h = height_of(p, sol);
          MINFER_ASSERT(h <= target, "exact search returned a plan above its target");
          best = sol;
          best_height = h;
          result.improved = true;
          break;
        }
        if (st == Status::NotFound) {  // complete search: nothing fits under target
          lo = target + p.step;
          break;
        }
        if (std::chrono::steady_clock::now() >= deadline) break;
      }
    }
  }
  result.exhausted = lo >= best_height;
  for (const Search& s : searches) result.nodes += s.total_nodes();
  return result;
}

}  // namespace minfer::planner_detail
