// Read bandwidth probe for the decode roofline (`minfer bench`): a short STREAM-like
// read-only pass (sum of 64-bit words) over a buffer much larger than the last-level cache,
// split over n_threads threads like the kernels, each thread reading its own contiguous slice
// (which it also first-touched, so pages sit near it). Repeated for about `budget_s` seconds;
// the best pass counts (as STREAM reports the best of its trials): the noise on a shared
// machine only ever slows a pass down.
//
// Ownership: allocates and frees its buffer (and a private ThreadPool) inside the call.
// Thread safety: none needed; call it while no kernel job runs, or the two compete for memory.
// Failure: Error(OutOfMemory) when the buffer cannot be mapped. Cost: mapping and touching the
// buffer (4 x the LLC, within [256, 512] MiB) plus ~budget_s seconds of reading.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace minfer::cpu {

struct ReadBandwidth {
  double bytes_per_s = 0;  // best pass
  // The median pass: the rate a stream longer than one pass can count on when the host's
  // bandwidth varies (a decode's mean over its tokens), next to the best pass's ceiling.
  double median_bytes_per_s = 0;
  size_t buffer_bytes = 0;  // bytes read per pass
  size_t llc_bytes = 0;     // last-level cache size detected (0: unknown)
  int threads = 0;
  int passes = 0;
};

ReadBandwidth measure_read_bandwidth(int n_threads, double budget_s = 0.25,
                                     size_t buffer_bytes = 0 /* 0: from the LLC size */);

// One probe pass: its midpoint in seconds on std::chrono::steady_clock (the clock the runs it
// is paired with are timed on) and its rate.
struct ProbePass {
  double t_s = 0;
  double bytes_per_s = 0;
};

// The probe kept open, so that passes can be taken in bursts around the runs they are paired
// with (a host whose bandwidth drifts within minutes makes a probe taken at another moment a
// different yardstick). The buffer stays mapped, and its pool's threads alive (asleep between
// bursts), for the object's lifetime. Thread safety: none; as measure_read_bandwidth, call it
// while no kernel job runs. Failure: Error(OutOfMemory) from the constructor. Cost: mapping and
// touching the buffer once; each burst ~budget_s seconds.
class ReadProbe {
 public:
  explicit ReadProbe(int n_threads, size_t buffer_bytes = 0 /* 0: from the LLC size */);
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;

  // Passes for about budget_s seconds, at least min_passes, appended to passes().
  void burst(double budget_s, int min_passes = 3);
  // One pass, returned and not kept in passes() (nor in summary()): for a caller that pairs
  // passes of its own with the runs (the step-interleaved probe), so that the bursts' figures
  // keep their meaning.
  ProbePass single_pass();
  const std::vector<ProbePass>& passes() const { return passes_; }
  // Best and median over every pass so far (bytes_per_s 0 before the first burst).
  ReadBandwidth summary() const;

 private:
  ReadBandwidth shape_;  // buffer_bytes, llc_bytes, threads
  uint64_t* words_ = nullptr;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<uint64_t> sink_;
  std::vector<ProbePass> passes_;
};

// A timed run paired with the probe: [t0_s, t1_s] on the passes' clock, and the bytes it read
// per second of its own time.
struct TimedRun {
  double t0_s = 0, t1_s = 0;
  double bytes_per_s = 0;
};

struct PairedRun {
  // The best of the passes adjacent to the run: those after the previous run ended and before
  // this one started, and those after it ended and before the next one started (no previous /
  // next run: every pass on that side). 0 when no pass is adjacent.
  double probe_bytes_per_s = 0;
  int adjacent_passes = 0;
  double fraction = 0;  // run bytes_per_s / probe_bytes_per_s (0 when no pass is adjacent)
};

// Each run against the best pass taken next to it in time: the machine's bandwidth stays the
// best pass (as STREAM), taken where the run ran. `runs` in time order, not overlapping (an
// assertion); `passes` in any order.
std::vector<PairedRun> pair_runs_with_probe(const std::vector<TimedRun>& runs,
                                            const std::vector<ProbePass>& passes);

// The step-interleaved probe (`minfer bench`'s interleaved pass, issue #16): probe passes and
// decode chunks alternate in one sequence P c P c ... c P, each chunk `steps_per_pass` decode
// steps (the last one may be shorter), so that every chunk has a pass on each side within a few
// milliseconds. Why: on a shared VM the memory bandwidth moves within a second, so a whole
// repetition (~1 s) held against bursts before and after it meets a different host than its
// own; a chunk against the passes touching it gives the host no time to change.
struct InterleavedRoofline {
  int steps_per_pass = 0;
  int64_t pairs = 0;  // chunks, each paired with its two passes
  // Per chunk: its decode rate (bytes_per_step x its steps / their summed time) over the mean
  // rate of the pass before and the pass after it; in chunk order, then median and quartiles.
  std::vector<double> ratios;
  double ratio_median = 0, ratio_q1 = 0, ratio_q3 = 0;
  double probe_median_bytes_per_s = 0;  // the median pass
  double steps_per_s = 0;               // every step / their total time (passes not counted)
  // steps_per_pass >= 2: per chunk, its first step's time (the step right after a pass, which
  // evicted the last-level cache) over the median of its other steps; the median over chunks.
  // What a pass costs the step after it. 0 when steps_per_pass < 2.
  double first_step_ratio_median = 0;
};

// step_ns[i]: the wall time of decode step i; chunk j = steps [j * k, (j + 1) * k) (k =
// steps_per_pass >= 1, the last chunk cut at step_ns.size()); pass_bytes_per_s[j]: the pass
// before chunk j, so one more pass than chunks (assertion). No steps: pairs == 0 and zeros.
InterleavedRoofline summarize_interleaved(const std::vector<double>& step_ns, int steps_per_pass,
                                          const std::vector<double>& pass_bytes_per_s,
                                          double bytes_per_step);

// The probe's read loop over n words (n a multiple of 8; a tail is skipped): the sum of eight
// independent accumulators, so the adds never wait on each other and the loads set the pace.
// For benchmarks that pair the probe with a kernel sample by sample.
uint64_t probe_sum_words(const uint64_t* p, size_t n);

// The last-level cache of CPU 0 in bytes (sysfs, else sysconf), 0 when unknown.
size_t last_level_cache_bytes();

}  // namespace minfer::cpu
