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

// The probe's read loop over n words (n a multiple of 8; a tail is skipped): the sum of eight
// independent accumulators, so the adds never wait on each other and the loads set the pace.
// For benchmarks that pair the probe with a kernel sample by sample.
uint64_t probe_sum_words(const uint64_t* p, size_t n);

// The last-level cache of CPU 0 in bytes (sysfs, else sysconf), 0 when unknown.
size_t last_level_cache_bytes();

}  // namespace minfer::cpu
