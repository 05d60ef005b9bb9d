#include "backend/cpu/membw.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

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

ReadBandwidth measure_read_bandwidth(int n_threads, double budget_s, size_t buffer_bytes) {
  using Clock = std::chrono::steady_clock;
  ReadBandwidth r;
  r.threads = std::max(1, n_threads);
  r.llc_bytes = last_level_cache_bytes();
  size_t bytes = buffer_bytes;
  // 4 x the LLC defeats it. VMs may report the whole host's L3 (this 2-vCPU EPYC guest: 508
  // MiB), while a few threads only ever see their own CCD's share (32-96 MiB), hence the cap.
  if (bytes == 0) bytes = std::clamp<size_t>(4 * r.llc_bytes, size_t{256} << 20, size_t{512} << 20);
  // Whole 4 KiB pages per thread, so each slice starts on its own page.
  const size_t unit = size_t{4096} * size_t(r.threads);
  bytes = std::max(unit, bytes / unit * unit);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED)
    fail(ErrorKind::OutOfMemory, "bandwidth probe: cannot map {} bytes", bytes);
#ifdef MADV_HUGEPAGE
  madvise(mem, bytes, MADV_HUGEPAGE);  // fewer page faults and TLB misses; advisory
#endif
  auto* words = static_cast<uint64_t*>(mem);
  const size_t n_words = bytes / sizeof(uint64_t);
  ThreadPool pool(r.threads);
  std::vector<uint64_t> sink(size_t(r.threads) * 8, 0);  // one cache line per thread
  auto slice = [&](int ith, int nth, size_t* b, size_t* e) {
    int64_t b64, e64;
    split_range(int64_t(n_words / 8), ith, nth, &b64, &e64);
    *b = size_t(b64) * 8;
    *e = size_t(e64) * 8;
  };
  pool.run([&](int ith, int nth) {  // first touch by the thread that will read the slice
    size_t b, e;
    slice(ith, nth, &b, &e);
    std::memset(words + b, ith + 1, (e - b) * sizeof(uint64_t));
  });
  const auto start = Clock::now();
  double best_s = 0;
  std::vector<double> pass_s;
  for (;;) {
    const auto t0 = Clock::now();
    pool.run([&](int ith, int nth) {
      size_t b, e;
      slice(ith, nth, &b, &e);
      sink[size_t(ith) * 8] += probe_sum_words(words + b, e - b);
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r.passes == 0 || s < best_s) best_s = s;
    pass_s.push_back(s);
    ++r.passes;
    const double spent = std::chrono::duration<double>(Clock::now() - start).count();
    if (r.passes >= 3 && (spent >= budget_s || r.passes >= 50)) break;
  }
  munmap(mem, bytes);
  // The sums must look used, or the reads could be dropped.
  uint64_t all = 0;
  for (uint64_t x : sink) all += x;
  asm volatile("" : : "r"(all) : "memory");
  r.buffer_bytes = bytes;
  r.bytes_per_s = best_s > 0 ? double(bytes) / best_s : 0;
  std::sort(pass_s.begin(), pass_s.end());
  const double median_s = pass_s[pass_s.size() / 2];
  r.median_bytes_per_s = median_s > 0 ? double(bytes) / median_s : 0;
  return r;
}

}  // namespace minfer::cpu
