// Perfect-packing generator (see perfect_packing.h).
#include "planner/perfect_packing.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include "common/error.h"

namespace minfer {
namespace {

// Own helpers instead of std distributions: their output is implementation-defined, and the
// fixed-seed test set must be the same instances on every standard library.
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  uint64_t below(uint64_t n) { return n <= 1 ? 0 : g() % n; }  // bias < n / 2^64: irrelevant
  double unit() { return static_cast<double>(g() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }
};

struct Rect {
  int64_t t0, t1;   // steps [t0, t1)
  uint64_t b0, b1;  // bytes [b0, b1)
};

// A cut position strictly inside [lo, hi) on multiples of `unit` (relative to lo), or false.
bool cut_inside(Rng& rng, uint64_t lo, uint64_t hi, uint64_t unit, uint64_t& at) {
  const uint64_t slots = (hi - lo) / unit;
  if (slots < 2) return false;
  at = lo + unit * (1 + rng.below(slots - 1));
  return true;
}

// Guillotine and Pinwheel: split the largest rectangles (area with noise, so sizes vary) until
// there are n. The direction follows the rectangle's own shape relative to the whole, biased by
// `aspect`: a rectangle long in time relative to its bytes is more likely cut across time.
std::vector<Rect> cut_recursively(const PackingParams& pp, Rng& rng) {
  std::vector<Rect> done, open{{0, pp.steps, 0, pp.height}};
  const double T = static_cast<double>(pp.steps), H = static_cast<double>(pp.height);
  auto weight = [&](const Rect& r) {
    return static_cast<double>(r.t1 - r.t0) / T * static_cast<double>(r.b1 - r.b0) / H;
  };
  while (open.size() + done.size() < pp.n_buffers && !open.empty()) {
    // Pick among a few random open rectangles the one of largest area (a cheap noisy "largest
    // first": pure largest-first gives near-uniform sizes).
    size_t pick = rng.below(open.size());
    for (int k = 0; k < 2; ++k) {
      const size_t c = rng.below(open.size());
      if (weight(open[c]) > weight(open[pick])) pick = c;
    }
    const Rect r = open[pick];
    open[pick] = open.back();
    open.pop_back();
    const size_t need = pp.n_buffers - open.size() - done.size();  // pieces still to make + 1
    uint64_t tx1 = 0, tx2 = 0, by1 = 0, by2 = 0;
    const auto tlo = static_cast<uint64_t>(r.t0), thi = static_cast<uint64_t>(r.t1);
    if (pp.cuts == PackingCuts::Pinwheel && need >= 5 && rng.chance(pp.pinwheel_share) &&
        cut_inside(rng, tlo, thi, 1, tx1) && cut_inside(rng, tx1, thi, 1, tx2) &&
        cut_inside(rng, r.b0, r.b1, pp.granule, by1) &&
        cut_inside(rng, by1, r.b1, pp.granule, by2)) {
      const auto a = static_cast<int64_t>(tx1), b = static_cast<int64_t>(tx2);
      open.push_back({r.t0, b, r.b0, by1});  // bottom, left to the second time cut
      open.push_back({b, r.t1, r.b0, by2});  // right, up to the second byte cut
      open.push_back({a, r.t1, by2, r.b1});  // top, right from the first time cut
      open.push_back({r.t0, a, by1, r.b1});  // left, down to the first byte cut
      open.push_back({a, b, by1, by2});      // the hub
      continue;
    }
    const double shape = std::log2(static_cast<double>(r.t1 - r.t0) / T) -
                         std::log2(static_cast<double>(r.b1 - r.b0) / H) + pp.aspect;
    const bool across_time_first = rng.chance(1.0 / (1.0 + std::exp2(-shape)));
    uint64_t at = 0;
    if (across_time_first ? cut_inside(rng, tlo, thi, 1, at) : false) {
      open.push_back({r.t0, static_cast<int64_t>(at), r.b0, r.b1});
      open.push_back({static_cast<int64_t>(at), r.t1, r.b0, r.b1});
    } else if (cut_inside(rng, r.b0, r.b1, pp.granule, at)) {
      open.push_back({r.t0, r.t1, r.b0, at});
      open.push_back({r.t0, r.t1, at, r.b1});
    } else if (cut_inside(rng, tlo, thi, 1, at)) {
      open.push_back({r.t0, static_cast<int64_t>(at), r.b0, r.b1});
      open.push_back({static_cast<int64_t>(at), r.t1, r.b0, r.b1});
    } else {
      done.push_back(r);  // one step by one granule: cannot be cut
    }
  }
  done.insert(done.end(), open.begin(), open.end());
  return done;
}

// Sweep: the bytes are tiled by live buffers (in byte order); each event kills a run of 1-3
// adjacent ones born before it and re-cuts their bytes into 1-3 new ones. The run count drifts
// towards sweep_live. At the end every live buffer dies at the last step.
std::vector<Rect> cut_by_sweep(const PackingParams& pp, Rng& rng) {
  std::vector<Rect> done, live{{0, 0, 0, pp.height}};
  int64_t t = 0;
  size_t made = 1;
  while (made < pp.n_buffers) {
    t += 1 + static_cast<int64_t>(rng.below(3));
    const size_t k = 1 + rng.below(std::min<size_t>(3, live.size()));
    const size_t first = rng.below(live.size() - k + 1);
    bool old_enough = true;
    for (size_t i = first; i < first + k; ++i) old_enough = old_enough && live[i].t0 < t;
    if (!old_enough) continue;  // t has moved on, so this cannot loop forever
    const uint64_t b0 = live[first].b0, b1 = live[first + k - 1].b1;
    for (size_t i = first; i < first + k; ++i)
      done.push_back({live[i].t0, t, live[i].b0, live[i].b1});
    // Fewer live than wanted: cut into more pieces; more: fewer.
    const size_t lo = live.size() < pp.sweep_live ? k : 1;
    const size_t hi = live.size() < pp.sweep_live ? 3 : k;
    size_t m = lo + rng.below(hi - lo + 1);
    m = std::min<size_t>(m, (b1 - b0) / pp.granule);
    std::vector<uint64_t> cuts{b0, b1};
    for (size_t c = 1; c < m; ++c) {
      uint64_t at = 0;
      if (cut_inside(rng, b0, b1, pp.granule, at) &&
          std::find(cuts.begin(), cuts.end(), at) == cuts.end()) {
        cuts.push_back(at);
      }
    }
    std::sort(cuts.begin(), cuts.end());
    std::vector<Rect> born;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) born.push_back({t, 0, cuts[c], cuts[c + 1]});
    made += born.size();
    live.erase(live.begin() + static_cast<ptrdiff_t>(first),
               live.begin() + static_cast<ptrdiff_t>(first + k));
    live.insert(live.begin() + static_cast<ptrdiff_t>(first), born.begin(), born.end());
  }
  t += 1 + static_cast<int64_t>(rng.below(3));
  for (const Rect& r : live) done.push_back({r.t0, t, r.b0, r.b1});
  return done;
}

void check_params(const PackingParams& pp) {
  if (pp.n_buffers < 2 || pp.n_buffers > 100000) {
    fail(ErrorKind::InvalidArgument, "perfect packing: n_buffers {} (2 .. 100000)", pp.n_buffers);
  }
  if (pp.granule == 0 || !std::has_single_bit(pp.granule) || pp.height % pp.granule != 0 ||
      pp.height > kMaxPlanBytes / 2) {
    fail(ErrorKind::InvalidArgument,
         "perfect packing: granule {} / height {} (granule a power of two dividing height)",
         pp.granule, pp.height);
  }
  if (pp.steps < 2) fail(ErrorKind::InvalidArgument, "perfect packing: steps {} (>= 2)", pp.steps);
  if (pp.sweep_live < 2) {
    fail(ErrorKind::InvalidArgument, "perfect packing: sweep_live {} (>= 2)", pp.sweep_live);
  }
}

}  // namespace

const char* packing_cuts_name(PackingCuts c) {
  switch (c) {
    case PackingCuts::Guillotine:
      return "guillotine";
    case PackingCuts::Pinwheel:
      return "pinwheel";
    case PackingCuts::Sweep:
      return "sweep";
  }
  return "?";
}

std::string PerfectPacking::describe() const {
  static const char* const kAlign[] = {"align 1", "align granule", "mixed align"};
  int64_t steps = 0;
  for (const PlanBuffer& b : buffers) steps = std::max(steps, b.upper);
  return fmt::format(
      "seed {} {} n={} steps={} granule={} {} {}", params.seed, packing_cuts_name(params.cuts),
      buffers.size(), steps, params.granule, kAlign[static_cast<int>(params.align)],
      params.cuts == PackingCuts::Sweep ? fmt::format("live={}", params.sweep_live)
                                        : fmt::format("aspect={:+.1f}", params.aspect));
}

PerfectPacking make_perfect_packing(const PackingParams& pp) {
  check_params(pp);
  Rng rng(pp.seed);
  std::vector<Rect> rects =
      pp.cuts == PackingCuts::Sweep ? cut_by_sweep(pp, rng) : cut_recursively(pp, rng);
  // Shuffle (Fisher-Yates with our own draws): ids must not reveal the construction.
  for (size_t i = rects.size(); i > 1; --i) std::swap(rects[i - 1], rects[rng.below(i)]);
  PerfectPacking out;
  out.params = pp;
  out.optimum = pp.height;
  for (size_t i = 0; i < rects.size(); ++i) {
    const Rect& r = rects[i];
    uint64_t align = 1;
    if (pp.align == PackingAlign::Granule) {
      align = pp.granule;
    } else if (pp.align == PackingAlign::Mixed) {
      // A power of two up to 64 x granule that the constructed offset satisfies.
      const uint64_t cap = pp.granule * 64;
      const uint64_t divides =
          r.b0 == 0 ? cap : std::min(cap, uint64_t{1} << std::countr_zero(r.b0));
      align = uint64_t{1} << rng.below(static_cast<uint64_t>(std::countr_zero(divides)) + 1);
    }
    out.buffers.push_back({static_cast<int64_t>(i), r.t0, r.t1, r.b1 - r.b0, align});
    out.offsets.push_back(r.b0);
  }
  return out;
}

PackingParams draw_packing_params(uint64_t seed) {
  Rng rng(seed ^ 0x70616b6b696e67ull);  // "packing": draws differ from the instance's own
  PackingParams pp;
  pp.seed = seed;
  pp.cuts = static_cast<PackingCuts>(rng.below(3));
  pp.align = static_cast<PackingAlign>(rng.below(3));
  // Log-uniform over 200-2,000 buffers.
  pp.n_buffers =
      static_cast<uint32_t>(std::lround(200.0 * std::exp2(rng.unit() * std::log2(10.0))));
  pp.granule = uint64_t{1} << (rng.below(5) * 3);  // 1, 8, 64, 512, 4096
  const int64_t steps_choice[] = {pp.n_buffers / 2, int64_t{pp.n_buffers} * 4, int64_t{1} << 20};
  pp.steps = steps_choice[rng.below(3)];
  pp.aspect = -3.0 + 6.0 * rng.unit();
  pp.pinwheel_share = 0.1 + 0.5 * rng.unit();
  pp.sweep_live = 4 + static_cast<uint32_t>(rng.below(61));
  return pp;
}

}  // namespace minfer
