// Offset planner internals: the bound-guided dive and the search around it (fast mode, when the
// cheap greedy passes stay above the lower bound).
//
// The dive builds a canonical plan like the gravity dive: the next buffer always goes at the
// lowest offset any unplaced buffer can take (just above every placed buffer it overlaps).
// What differs is the choice among the buffers that tie at that offset. The gravity dive takes
// the first in a fixed priority order, blind to the consequences; this dive places each candidate
// tentatively and keeps the one whose *projected lower bound* stays lowest. The projection is the
// section inference of MiniMalloc turned into a score: in a canonical plan no buffer ever goes
// below its current lowest feasible offset, so in every time section the bytes still unplaced
// must stack above the section's floor = max(highest placed byte, lowest feasible offset of any
// unplaced buffer live there). max over sections of (floor + unplaced bytes) bounds the height
// this dive can still reach. On ../shared/planner-bench this one-step lookahead alone lands at
// 0-15% over the best known height where the blind dives land at 10-30%.
//
// Ties on the projection are the rule early in a dive (every choice still projects the bound),
// so they are broken first by a tiling test: the sections next to the candidate still open at
// its offset must be tiled exactly in time by unplaced buffers sitting there, or their bytes are
// lost for good (nothing can go lower, no offset ever falls). Candidates leaving fewer untileable
// fragments go first, then the priority order. This took the fixed-seed perfect packings (issue
// 21, seeds 5-24) from +19.0% to +15.2% on average and A-K from a median of +2.15% to 0.
//
// The projection is also a cut: a dive whose bound reaches the incumbent height cannot improve
// on it and stops at once, which makes the restarts cheap once a good plan is known.
//
// Around the dive: several priority orders (ties between equal projections), then an iterated
// perturbation of the best dive's decisions (replay a prefix, take a different candidate at one
// decision, finish greedily with jittered priorities), all on a deterministic work budget.
#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"
#include "planner/offset_planner_detail.h"

namespace minfer::planner_detail {
namespace {

constexpr uint64_t kNone = UINT64_MAX;
constexpr uint32_t kNoBuffer = UINT32_MAX;
// Before the first improvement the stall window is this many times BoundSearchParams::stall_work:
// the first dives often start above the incumbent, and the walk needs time to get below it.
constexpr uint64_t kFirstStall = 2;

// One decision of a dive: at step `step` the buffer `chosen` was placed; `n_cand` buffers tied
// at the lowest offset (only steps with n_cand > 1 are decisions worth revisiting).
struct Decision {
  uint32_t chosen = 0;
  uint32_t n_cand = 0;
};

class BoundDive {
 public:
  explicit BoundDive(const Problem& p) : p_(p), ns_(p.section_total.size()) {
    // Per-section lists of unplaced buffers, stored flat: section s owns [start_[s], start_[s+1])
    // of live_, its first count_[s] entries are the unplaced buffers. pos_ maps (buffer, section)
    // to the entry, found at pos_base_[k] + (s - sec_lo[k]).
    start_.assign(ns_ + 1, 0);
    for (uint32_t s = 0; s < ns_; ++s) {
      start_[s + 1] = start_[s] + static_cast<uint32_t>(p.section_buffers[s].size());
    }
    pos_base_.assign(p.n() + 1, 0);
    for (uint32_t k = 0; k < p.n(); ++k)
      pos_base_[k + 1] = pos_base_[k] + p.sec_hi[k] - p.sec_lo[k];
  }

  // Runs one dive with tie-break ranks `rank` (lower = first). The first `forced.size()` steps
  // replay `forced` (buffer per step); at step `forced.size()` the candidate ranked `skip`-th by
  // projected bound is taken instead of the best (0 = best), and at every later decision the
  // second best with probability `noise`. Stops early, returning false, as soon as the
  // projected bound reaches `cutoff` or the work reaches its limit. On success fills `off` and
  // `log`.
  bool run(std::span<const uint32_t> rank, std::span<const uint32_t> forced, uint32_t skip,
           double noise, std::mt19937_64& rng, uint64_t cutoff, std::vector<uint64_t>& off,
           std::vector<Decision>& log) {
    std::uniform_real_distribution<double> coin(0, 1);
    reset();
    log.clear();
    off.assign(p_.n(), 0);
    for (size_t step = 0; step < p_.n(); ++step) {
      const uint64_t o = gather_candidates();
      work_ += p_.n() + ns_;  // the candidate scan and the projection refresh
      if (work_ >= work_limit_) return false;
      uint32_t k;
      if (step < forced.size()) {
        k = forced[step];
        MINFER_ASSERT(!placed_[k] && mo_[k] == o, "replayed dive diverged");
      } else {
        refresh_base();
        if (base_bound_ >= cutoff) return false;
        uint32_t sk = step == forced.size() ? skip : 0;
        if (sk == 0 && noise > 0 && cand_.size() > 1 && coin(rng) < noise) sk = 1;
        k = choose(rank, sk, cutoff);
        if (k == kNoBuffer) return false;  // every candidate reaches the cutoff
      }
      log.push_back({k, static_cast<uint32_t>(cand_.size())});
      place(k, o);
      off[k] = o;
    }
    return true;
  }

  // Elementary steps (buffers and sections visited) of all dives so far.
  uint64_t work() const { return work_; }
  // A dive stops, returning false, once the total work reaches this (never, by default).
  void set_work_limit(uint64_t limit) { work_limit_ = limit; }

 private:
  void reset() {
    sky_.assign(ns_, 0);
    rem_ = p_.section_total;
    mo_.assign(p_.n(), 0);
    if (!p_.residue.empty()) {
      for (uint32_t k = 0; k < p_.n(); ++k) mo_[k] = fit_up(p_, k, 0);
    }
    placed_.assign(p_.n(), 0);
    min1_.assign(ns_, 0);  // every buffer can start at 0
    min2_.assign(ns_, 0);
    arg1_.assign(ns_, kNoBuffer);
    dirty_lo_ = 0;
    dirty_hi_ = ns_;
    live_.resize(start_[ns_]);
    pos_.resize(pos_base_[p_.n()]);
    count_.resize(ns_);
    for (uint32_t s = 0; s < ns_; ++s) {
      count_[s] = static_cast<uint32_t>(p_.section_buffers[s].size());
      for (uint32_t i = 0; i < count_[s]; ++i) {
        const uint32_t k = p_.section_buffers[s][i];
        live_[start_[s] + i] = k;
        pos_[pos_base_[k] + (s - p_.sec_lo[k])] = start_[s] + i;
      }
    }
  }

  // The lowest feasible offset over unplaced buffers, and the buffers that take it.
  uint64_t gather_candidates() {
    uint64_t o = kNone;
    cand_.clear();
    for (uint32_t k = 0; k < p_.n(); ++k) {
      if (placed_[k]) continue;
      if (mo_[k] < o) {
        o = mo_[k];
        cand_.clear();
      }
      if (mo_[k] == o) cand_.push_back(k);
    }
    return o;
  }

  void place(uint32_t k, uint64_t o) {
    placed_[k] = 1;
    const uint64_t top = o + p_.size[k];
    // Floors can change wherever k or a neighbour whose offset rises is live.
    dirty_lo_ = std::min(dirty_lo_, p_.sec_lo[k]);
    dirty_hi_ = std::max(dirty_hi_, p_.sec_hi[k]);
    for (uint32_t s = p_.sec_lo[k]; s < p_.sec_hi[k]; ++s) {
      sky_[s] = top;
      rem_[s] -= p_.size[k];
      // Swap k out of the section's unplaced prefix.
      const uint32_t at = pos_[pos_base_[k] + (s - p_.sec_lo[k])];
      const uint32_t last = start_[s] + --count_[s];
      const uint32_t other = live_[last];
      live_[at] = other;
      live_[last] = k;
      pos_[pos_base_[other] + (s - p_.sec_lo[other])] = at;
      pos_[pos_base_[k] + (s - p_.sec_lo[k])] = last;
    }
    for (uint32_t j : p_.overlaps[k]) {
      if (placed_[j] || mo_[j] >= top) continue;
      mo_[j] = fit_up(p_, j, top);
      dirty_lo_ = std::min(dirty_lo_, p_.sec_lo[j]);
      dirty_hi_ = std::max(dirty_hi_, p_.sec_hi[j]);
    }
  }

  static uint64_t projection(uint64_t sky, uint64_t rem, uint64_t floor) {
    return rem == 0 ? sky : std::max(sky, floor) + rem;
  }

  // Per-section projection of the current state, with prefix/suffix maxima so that a tentative
  // placement only recomputes the sections it can change. Floors are recomputed only in the
  // range that placements touched since the last refresh.
  void refresh_base() {
    for (uint32_t s = dirty_lo_; s < dirty_hi_; ++s) {
      uint64_t m1 = kNone, m2 = kNone;
      uint32_t a1 = kNoBuffer;
      for (uint32_t i = start_[s]; i < start_[s] + count_[s]; ++i) {
        const uint32_t j = live_[i];
        if (mo_[j] < m1) {
          m2 = m1;
          m1 = mo_[j];
          a1 = j;
        } else {
          m2 = std::min(m2, mo_[j]);
        }
      }
      min1_[s] = m1;
      min2_[s] = m2;
      arg1_[s] = a1;
    }
    dirty_lo_ = ns_;
    dirty_hi_ = 0;
    pre_.assign(ns_ + 1, 0);
    suf_.assign(ns_ + 1, 0);
    for (uint32_t s = 0; s < ns_; ++s) {
      pre_[s + 1] = std::max(pre_[s], projection(sky_[s], rem_[s], min1_[s]));
    }
    for (uint32_t s = ns_; s-- > 0;) {
      suf_[s] = std::max(suf_[s + 1], projection(sky_[s], rem_[s], min1_[s]));
    }
    base_bound_ = pre_[ns_];
  }

  // j is live in a section of k's range, so it overlaps k exactly when their section ranges meet.
  bool overlaps_k(uint32_t j, uint32_t k) const {
    return p_.sec_lo[j] < p_.sec_hi[k] && p_.sec_lo[k] < p_.sec_hi[j];
  }

  // Projected bound after placing candidate k at its offset; stops counting at `limit`.
  uint64_t tentative_bound(uint32_t k, uint64_t limit) const {
    const uint64_t top = mo_[k] + p_.size[k];
    // Only k's sections and those of its unplaced neighbours change: a contiguous range, since
    // every neighbour's lifetime meets k's.
    uint32_t lo = p_.sec_lo[k], hi = p_.sec_hi[k];
    for (uint32_t j : p_.overlaps[k]) {
      if (placed_[j]) continue;
      lo = std::min(lo, p_.sec_lo[j]);
      hi = std::max(hi, p_.sec_hi[j]);
    }
    work_ += p_.overlaps[k].size();
    uint64_t b = std::max(pre_[lo], suf_[hi]);
    for (uint32_t s = lo; s < hi && b < limit; ++s) {
      ++work_;
      const bool in_k = s >= p_.sec_lo[k] && s < p_.sec_hi[k];
      const uint64_t sky = in_k ? top : sky_[s];
      const uint64_t rem = rem_[s] - (in_k ? p_.size[k] : 0);
      uint64_t floor = kNone;
      if (rem != 0 && in_k) {
        // Every other unplaced buffer live here overlaps k and now starts at top or higher.
        const uint64_t rest = arg1_[s] == k ? min2_[s] : min1_[s];
        floor = std::max(rest, top);  // alignment can only raise it: still a valid bound
      } else if (rem != 0 && !overlaps_k(arg1_[s], k)) {
        floor = min1_[s];  // the lowest buffer here keeps its offset; the others only rise
      } else if (rem != 0) {
        // The lowest buffer here overlaps k and rises to top; every other one ends at min2 or
        // above, so only when min2 < top does the new minimum need a scan (which can stop as
        // soon as it reaches min2).
        floor = std::max(min1_[s], top);
        for (uint32_t i = start_[s]; i < start_[s] + count_[s] && floor > min2_[s]; ++i) {
          const uint32_t j = live_[i];
          ++work_;
          if (j == arg1_[s]) continue;
          floor = std::min(floor, overlaps_k(j, k) ? std::max(mo_[j], fit_up(p_, j, top)) : mo_[j]);
        }
      }
      b = std::max(b, projection(sky, rem, floor));
    }
    return b;
  }

  // Placing k at o leaves the sections next to it that are still open at o (top at or below o,
  // bytes unplaced) as up to two fragments. Nothing can go below o and no buffer's offset ever
  // falls, so a fragment wastes bytes unless unplaced buffers sitting at o (not k's neighbours,
  // which k lifts) tile it exactly in time. The buffers that can tile a fragment lie inside it,
  // so they never overlap k, and they are candidates (every unplaced buffer sitting at o is):
  // one reachability pass per step answers the question for every candidate. prepare_tiling
  // fills, per maximal run of open sections, fwd_[x] (section boundary x is reachable from the
  // run's start through candidates placed end to end) and bwd_[x] (the run's end is reachable
  // from x). O(sections + candidates log candidates) per step; it used to be one pass over the
  // fragments' buffer lists per candidate (1.5x the CPU of the whole dive, same choices).
  void prepare_tiling(uint64_t o) {
    run_lo_.resize(ns_);
    run_hi_.resize(ns_);
    fwd_.assign(ns_ + 1, 0);
    bwd_.assign(ns_ + 1, 0);
    auto open = [&](uint32_t s) { return sky_[s] <= o && rem_[s] > 0; };
    for (uint32_t s = 0; s < ns_;) {
      if (!open(s)) {
        ++s;
        continue;
      }
      uint32_t e = s;
      while (e < ns_ && open(e)) ++e;
      for (uint32_t t = s; t < e; ++t) {
        run_lo_[t] = s;
        run_hi_[t] = e;
      }
      fwd_[s] = 1;
      bwd_[e] = 1;
      s = e;
    }
    // A candidate's sections are all open (top at or below o, its own bytes unplaced), so each
    // lies inside one run. In start order, fwd_ of a start is final when it is read (the edges
    // that set it start earlier); in reverse order the same holds for bwd_ of an end.
    edges_ = cand_;
    std::sort(edges_.begin(), edges_.end(),
              [&](uint32_t x, uint32_t y) { return p_.sec_lo[x] < p_.sec_lo[y]; });
    for (uint32_t j : edges_) {
      if (fwd_[p_.sec_lo[j]]) fwd_[p_.sec_hi[j]] = 1;
    }
    for (size_t i = edges_.size(); i-- > 0;) {
      const uint32_t j = edges_[i];
      if (bwd_[p_.sec_hi[j]]) bwd_[p_.sec_lo[j]] = 1;
    }
  }

  // How many of the (up to two) fragments next to candidate k cannot be tiled, after
  // prepare_tiling at k's offset.
  uint32_t untileable(uint32_t k) const {
    const uint32_t lo = p_.sec_lo[k], hi = p_.sec_hi[k];
    return static_cast<uint32_t>(run_lo_[lo] != lo && !fwd_[lo]) +
           static_cast<uint32_t>(run_hi_[hi - 1] != hi && !bwd_[hi]);
  }

  // The candidate with the lowest projected bound (ties by rank), or the skip-th best.
  uint32_t choose(std::span<const uint32_t> rank, uint32_t skip, uint64_t cutoff) {
    if (cand_.size() == 1) return skip == 0 ? cand_[0] : kNoBuffer;
    scored_.clear();
    prepare_tiling(mo_[cand_[0]]);
    // For the best candidate, anything strictly worse than the best so far can stop counting.
    uint64_t limit = cutoff;
    for (uint32_t k : cand_) {
      const uint64_t b = tentative_bound(k, limit);
      // Ties on the projection (the common case: early on every choice projects the bound)
      // go to the candidate that leaves fewer fragments no buffer set can tile, then rank.
      scored_.push_back({b, untileable(k), rank[k], k});
      if (skip == 0 && b < limit) limit = b + 1;
    }
    std::sort(scored_.begin(), scored_.end());
    skip = std::min<uint32_t>(skip, static_cast<uint32_t>(scored_.size()) - 1);
    if (std::get<0>(scored_[skip]) >= cutoff) return kNoBuffer;
    return std::get<3>(scored_[skip]);
  }

  const Problem& p_;
  const uint32_t ns_;
  std::vector<uint64_t> sky_, rem_, mo_, pre_, suf_;
  // Per section: the lowest and second-lowest feasible offset of its unplaced buffers, and the
  // buffer with the lowest (so a tentative placement can exclude itself in O(1)).
  std::vector<uint64_t> min1_, min2_;
  std::vector<uint32_t> arg1_;
  std::vector<uint32_t> start_, count_, live_, pos_base_, pos_;
  std::vector<uint8_t> placed_;
  std::vector<uint32_t> cand_;
  std::vector<std::tuple<uint64_t, uint32_t, uint32_t, uint32_t>> scored_;
  std::vector<uint32_t> run_lo_, run_hi_, edges_;  // prepare_tiling's per-step state
  std::vector<uint8_t> fwd_, bwd_;
  uint64_t base_bound_ = 0;
  // Work done by all dives so far, in elementary steps (buffers and sections visited): the
  // search's deterministic budget (BoundSearchParams::work).
  mutable uint64_t work_ = 0;
  uint64_t work_limit_ = UINT64_MAX;
  uint32_t dirty_lo_ = 0, dirty_hi_ = 0;  // sections whose floor_ is stale
};

// The state of the perturbation walk: its current dive's decisions, ranks and height.
struct Walk {
  std::vector<Decision> log;
  std::vector<uint32_t> rank;
  uint64_t height = UINT64_MAX;
};

std::vector<uint32_t> ranks_of(std::span<const uint32_t> order) {
  std::vector<uint32_t> rank(order.size());
  for (uint32_t r = 0; r < order.size(); ++r) rank[order[r]] = r;
  return rank;
}

}  // namespace

BoundSearchStats bound_search(const Problem& p, std::span<const std::vector<uint32_t>> orders,
                              const BoundSearchParams& params, std::vector<uint64_t>& best,
                              uint64_t& best_height) {
  BoundSearchStats stats;
  const size_t n = p.n();
  if (n == 0 || orders.empty() || best_height <= p.lower_bound) return stats;
  BoundDive dive(p);
  if (params.work > 0 && params.work_check == BoundSearchParams::WorkCheck::InsideDives) {
    dive.set_work_limit(params.work);
  }
  Walk walk;
  std::mt19937_64 rng(params.seed);
  std::vector<uint64_t> off;
  std::vector<Decision> log;
  std::vector<uint32_t> forced;
  // Runs a dive; a plan no higher than the walk's current one becomes the walk's new state
  // (sideways moves keep the walk moving across the plateaus of equal height that tight
  // instances are full of), a lower one also replaces the incumbent.
  uint64_t improved_at = 0;  // work when the incumbent last fell
  auto try_dive = [&](std::span<const uint32_t> rank, uint32_t skip) {
    ++stats.dives;
    const uint64_t cutoff = walk.height;
    // Only perturbation dives (skip > 0) get the extra random deviations.
    if (!dive.run(rank, forced, skip, skip ? params.noise : 0.0, rng, cutoff, off, log)) return;
    const uint64_t h = height_of(p, off);
    if (h < best_height) {
      best_height = h;
      best = off;
      ++stats.improvements;
      improved_at = dive.work();
    }
    if (h < walk.height) {
      walk.height = h;
      walk.log = log;
      walk.rank.assign(rank.begin(), rank.end());
    }
  };
  // 1. One dive per priority order.
  auto out_of_work = [&] {
    return (params.work > 0 && dive.work() >= params.work) ||
           (params.stall_work > 0 &&
            dive.work() - improved_at >=
                (stats.improvements > 0 ? 1 : kFirstStall) * params.stall_work);
  };
  for (const auto& order : orders) {
    if (stats.dives >= params.dives || best_height <= p.lower_bound || out_of_work()) break;
    if (std::chrono::steady_clock::now() >= params.deadline) break;  // the walk stops too
    try_dive(ranks_of(order), 0);
  }
  // 2. Iterated perturbation of the walk's dive: keep a prefix of its decisions, deviate at one
  // decision point (and, with probability `noise`, at later ones), finish with jittered
  // priorities. The prefix is replayed without scoring.

  std::vector<uint32_t> rank(n), order(n), points;
  std::vector<double> key(n);
  size_t base = 0;
  while (stats.dives < params.dives && best_height > p.lower_bound && !out_of_work() &&
         std::chrono::steady_clock::now() < params.deadline) {
    points.clear();
    for (uint32_t st = 0; st < walk.log.size(); ++st) {
      if (walk.log[st].n_cand > 1) points.push_back(st);
    }
    if (points.empty()) {  // no dive finished yet, or it had no choice: a jittered fixed order
      forced.clear();
      jitter_ranks(orders[base++ % orders.size()],
                   0.05 + 0.25 * std::uniform_real_distribution<double>(0, 1)(rng), rng, key, rank);
      try_dive(rank, 0);
      continue;
    }
    // The lower of two uniform draws: early decisions shape the whole rest of the dive and paid
    // off more on ../shared/planner-bench (K: +7..11% over seeds vs +8..14% uniform; biasing
    // towards late decisions was clearly worse).
    const size_t draw1 = rng() % points.size();  // two statements: argument order is unspecified
    const size_t at_i = std::min(draw1, rng() % points.size());
    const uint32_t at = points[at_i];
    forced.resize(at);
    for (uint32_t st = 0; st < at; ++st) forced[st] = walk.log[st].chosen;
    const uint32_t skip =
        1 + static_cast<uint32_t>(rng() % std::min<uint32_t>(3, walk.log[at].n_cand - 1));
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return walk.rank[a] < walk.rank[b]; });
    jitter_ranks(order, 0.02 + 0.1 * std::uniform_real_distribution<double>(0, 1)(rng), rng, key,
                 rank);
    try_dive(rank, skip);
  }
  forced.clear();
  stats.work = dive.work();
  return stats;
}

void jitter_ranks(std::span<const uint32_t> order, double width, std::mt19937_64& rng,
                  std::vector<double>& key, std::vector<uint32_t>& rank) {
  const size_t n = order.size();
  key.resize(n);
  rank.resize(n);
  std::uniform_real_distribution<double> jitter(0, width * static_cast<double>(n));
  for (size_t r = 0; r < n; ++r) key[order[r]] = static_cast<double>(r) + jitter(rng);
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  std::sort(idx.begin(), idx.end(),
            [&](uint32_t a, uint32_t b) { return key[a] < key[b] || (key[a] == key[b] && a < b); });
  for (uint32_t r = 0; r < n; ++r) rank[idx[r]] = r;
}

}  // namespace minfer::planner_detail
