#include "backend/cpu/membw.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/stats.h"
#include "backend/cpu/thread_pool.h"
#include "common/error.h"

namespace minfer::cpu {
namespace {

size_t parse_cache_size(const std::string& text) {
  size_t v = 0;
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') v = v * 10 + size_t(text[i++] - '0');
  if (i < text.size() && (text[i] == 'K' || text[i] == 'k')) v <<= 10;
  if (i < text.size() && (text[i] == 'M' || text[i] == 'm')) v <<= 20;
  return v;
}

}  // namespace

// The compiler vectorizes this to full-width loads.
uint64_t probe_sum_words(const uint64_t* p, size_t n) {
  uint64_t s[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  uint64_t t = 0;
  for (uint64_t x : s) t += x;
  return t;
}

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    std::string text;
    if (!(f >> text)) continue;
    best = std::max(best, parse_cache_size(text));
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best == 0) {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) best = static_cast<size_t>(l3);
  }
#endif
  return best;
}

ReadProbe::ReadProbe(int n_threads, size_t buffer_bytes) {
  shape_.threads = std::max(1, n_threads);
  shape_.llc_bytes = last_level_cache_bytes();
  size_t bytes = buffer_bytes;
  // 4 x the LLC defeats it. VMs may report the whole host's L3 (this 2-vCPU EPYC guest: 508
  // MiB), while a few threads only ever see their own CCD's share (32-96 MiB), hence the cap.
  if (bytes == 0)
    bytes = std::clamp<size_t>(4 * shape_.llc_bytes, size_t{256} << 20, size_t{512} << 20);
  // Whole 4 KiB pages per thread, so each slice starts on its own page.
  const size_t unit = size_t{4096} * size_t(shape_.threads);
  bytes = std::max(unit, bytes / unit * unit);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED)
    fail(ErrorKind::OutOfMemory, "bandwidth probe: cannot map {} bytes", bytes);
#ifdef MADV_HUGEPAGE
  madvise(mem, bytes, MADV_HUGEPAGE);  // fewer page faults and TLB misses; advisory
#endif
  shape_.buffer_bytes = bytes;
  words_ = static_cast<uint64_t*>(mem);
  pool_ = std::make_unique<ThreadPool>(shape_.threads);
  sink_.assign(size_t(shape_.threads) * 8, 0);  // one cache line per thread
  const size_t n_words = bytes / sizeof(uint64_t);
  pool_->run([&](int ith, int nth) {  // first touch by the thread that will read the slice
    int64_t b, e;
    split_range(int64_t(n_words / 8), ith, nth, &b, &e);
    std::memset(words_ + b * 8, ith + 1, size_t(e - b) * 8 * sizeof(uint64_t));
  });
}

ReadProbe::~ReadProbe() {
  pool_.reset();
  munmap(words_, shape_.buffer_bytes);
  // The sums must look used, or the reads could be dropped.
  uint64_t all = 0;
  for (uint64_t x : sink_) all += x;
  asm volatile("" : : "r"(all) : "memory");
}

ProbePass ReadProbe::single_pass() {
  using Clock = std::chrono::steady_clock;
  const size_t n_words = shape_.buffer_bytes / sizeof(uint64_t);
  // An empty job first wakes workers that went to sleep since the last pass (a futex wake-up,
  // on a VM up to a few hundred microseconds of a ~5 ms pass): a lone pass between decode steps
  // would otherwise read low by that much.
  pool_->run([](int, int) {});
  const auto t0 = Clock::now();
  pool_->run([&](int ith, int nth) {
    int64_t b, e;
    split_range(int64_t(n_words / 8), ith, nth, &b, &e);
    sink_[size_t(ith) * 8] += probe_sum_words(words_ + b * 8, size_t(e - b) * 8);
  });
  const auto t1 = Clock::now();
  const double s = std::chrono::duration<double>(t1 - t0).count();
  const double mid = std::chrono::duration<double>((t0 + (t1 - t0) / 2).time_since_epoch()).count();
  return {mid, s > 0 ? double(shape_.buffer_bytes) / s : 0};
}

void ReadProbe::burst(double budget_s, int min_passes) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int n = 1;; ++n) {
    passes_.push_back(single_pass());
    const double spent = std::chrono::duration<double>(Clock::now() - start).count();
    if (n >= min_passes && (spent >= budget_s || n >= 50)) break;
  }
}

ReadBandwidth ReadProbe::summary() const {
  ReadBandwidth r = shape_;
  r.passes = static_cast<int>(passes_.size());
  if (passes_.empty()) return r;
  std::vector<double> rates;
  for (const ProbePass& p : passes_) rates.push_back(p.bytes_per_s);
  std::sort(rates.begin(), rates.end());
  r.bytes_per_s = rates.back();
  // The median pass: rates[(n - 1) / 2] is the pass of times[n / 2] (sorted the other way).
  r.median_bytes_per_s = rates[(rates.size() - 1) / 2];
  return r;
}

ReadBandwidth measure_read_bandwidth(int n_threads, double budget_s, size_t buffer_bytes) {
  ReadProbe probe(n_threads, buffer_bytes);
  probe.burst(budget_s);
  return probe.summary();
}

std::vector<PairedRun> pair_runs_with_probe(const std::vector<TimedRun>& runs,
                                            const std::vector<ProbePass>& passes) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<PairedRun> out(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    MINFER_ASSERT(runs[i].t0_s <= runs[i].t1_s,
                  "pair_runs_with_probe: a run ends before it starts");
    MINFER_ASSERT(i == 0 || runs[i - 1].t1_s <= runs[i].t0_s,
                  "pair_runs_with_probe: runs out of time order or overlapping");
    const double before = i > 0 ? runs[i - 1].t1_s : -kInf;
    const double after = i + 1 < runs.size() ? runs[i + 1].t0_s : kInf;
    PairedRun& p = out[i];
    for (const ProbePass& pass : passes) {
      const bool adjacent = (pass.t_s > before && pass.t_s < runs[i].t0_s) ||
                            (pass.t_s > runs[i].t1_s && pass.t_s < after);
      if (!adjacent) continue;
      ++p.adjacent_passes;
      p.probe_bytes_per_s = std::max(p.probe_bytes_per_s, pass.bytes_per_s);
    }
    if (p.probe_bytes_per_s > 0) p.fraction = runs[i].bytes_per_s / p.probe_bytes_per_s;
  }
  return out;
}

InterleavedRoofline summarize_interleaved(const std::vector<double>& step_ns, int steps_per_pass,
                                          const std::vector<double>& pass_bytes_per_s,
                                          double bytes_per_step) {
  MINFER_ASSERT(steps_per_pass >= 1, "summarize_interleaved: steps_per_pass < 1");
  const size_t k = size_t(steps_per_pass);
  const size_t chunks = (step_ns.size() + k - 1) / k;
  MINFER_ASSERT(step_ns.empty() || pass_bytes_per_s.size() == chunks + 1,
                "summarize_interleaved: not one pass more than chunks");
  InterleavedRoofline r;
  r.steps_per_pass = steps_per_pass;
  if (step_ns.empty()) return r;
  r.pairs = int64_t(chunks);
  std::vector<double> first;
  double total_ns = 0;
  for (size_t j = 0; j < chunks; ++j) {
    const size_t b = j * k, e = std::min(step_ns.size(), b + k);
    double ns = 0;
    for (size_t i = b; i < e; ++i) ns += step_ns[i];
    total_ns += ns;
    const double probe = 0.5 * (pass_bytes_per_s[j] + pass_bytes_per_s[j + 1]);
    const double decode = ns > 0 ? bytes_per_step * double(e - b) * 1e9 / ns : 0;
    r.ratios.push_back(probe > 0 ? decode / probe : 0);
    if (e - b >= 2)
      first.push_back(step_ns[b] /
                      quantile(std::vector<double>(step_ns.begin() + std::ptrdiff_t(b + 1),
                                                   step_ns.begin() + std::ptrdiff_t(e)),
                               0.5));
  }
  r.ratio_median = quantile(r.ratios, 0.5);
  r.ratio_q1 = quantile(r.ratios, 0.25);
  r.ratio_q3 = quantile(r.ratios, 0.75);
  r.probe_median_bytes_per_s = quantile(pass_bytes_per_s, 0.5);
  r.steps_per_s = total_ns > 0 ? double(step_ns.size()) * 1e9 / total_ns : 0;
  if (!first.empty()) r.first_step_ratio_median = quantile(first, 0.5);
  return r;
}

}  // namespace minfer::cpu
