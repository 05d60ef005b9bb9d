// minfer-test-libs: minfer_backend_cpu minfer_common
// The CPU thread pool: run/barrier correctness, and the publication guarantees the kernels rely
// on (what the caller wrote before run() is seen by every worker; what the workers wrote is seen
// by the caller after run() returns). scripts/test.sh also runs this file under
// ThreadSanitizer (MINFER_TSAN, build-tsan/), where a missing happens-before is a report.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace minfer::cpu {
namespace {

TEST(ThreadPool, RunAndBarrierManyTimes) {
  for (int n = 1; n <= 3; ++n) {
    ThreadPool pool(n);
    std::vector<int64_t> slots(n * 2, 0);
    for (int iter = 0; iter < 500; ++iter) {
      pool.run([&](int ith, int nth) {
        slots[ith] = iter;
        pool.barrier();
        // After the barrier every thread's write is visible.
        int64_t s = 0;
        for (int j = 0; j < nth; ++j) s += slots[j];
        slots[nth + ith] = s;
      });
      for (int j = 0; j < n; ++j) ASSERT_EQ(slots[n + j], (int64_t)iter * n);
    }
  }
}

// Plain (non-atomic) data handed to the workers and back, as every kernel does: the pool's
// generation / done counters are the only synchronisation.
TEST(ThreadPool, PlainDataIsPublishedBothWays) {
  ThreadPool pool(4);
  std::vector<int64_t> in(4096), out(4096);
  for (int iter = 0; iter < 200; ++iter) {
    for (size_t i = 0; i < in.size(); ++i) in[i] = iter * 7 + static_cast<int64_t>(i);
    pool.run([&](int ith, int nth) {
      int64_t b = 0, e = 0;
      split_range(static_cast<int64_t>(in.size()), ith, nth, &b, &e);
      for (int64_t i = b; i < e; ++i) out[i] = in[i] * 2;
    });
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(out[i], (iter * 7 + static_cast<int64_t>(i)) * 2);
  }
}

// Workers that went to sleep (atomic wait after the spin phase) wake for the next job and for
// the destructor.
TEST(ThreadPool, SleepingWorkersWakeForJobsAndShutdown) {
  ThreadPool pool(3);
  int64_t sum = 0;
  std::vector<int64_t> part(3, 0);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past the spin phase
    pool.run([&](int ith, int) { part[ith] = ith + 1; });
    for (int64_t v : part) sum += v;
  }
  EXPECT_EQ(sum, 3 * (1 + 2 + 3));
}

// Profiling (set_wait_clock): the caller's waits for a slow worker, at the end of a job and in
// a barrier, are counted; workers' own waits are not; with the clock detached nothing is.
TEST(ThreadPool, WaitClockCountsTheCallersWaitsOnly) {
  ThreadPool pool(2);
  uint64_t ns = 0, count = 0;
  pool.set_wait_clock(&ns, &count);
  pool.run([&](int ith, int) {  // worker late to the barrier: the caller waits there
    if (ith == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pool.barrier();
  });
  EXPECT_GE(ns, 15'000'000u);
  EXPECT_GE(count, 1u);
  const uint64_t after_barrier = ns;
  pool.run([&](int ith, int) {  // caller late: the worker waits, the caller does not
    if (ith == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pool.barrier();
  });
  EXPECT_LT(ns - after_barrier, 10'000'000u);
  pool.run([&](int ith, int) {  // worker finishing late: the caller waits at the job's end
    if (ith == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  EXPECT_GE(ns - after_barrier, 15'000'000u);
  pool.set_wait_clock(nullptr, nullptr);
  const uint64_t frozen = ns, frozen_count = count;
  pool.run([&](int ith, int) {
    if (ith == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pool.barrier();
  });
  EXPECT_EQ(ns, frozen);
  EXPECT_EQ(count, frozen_count);
}

}  // namespace
}  // namespace minfer::cpu
