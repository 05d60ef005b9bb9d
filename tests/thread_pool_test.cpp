// minfer-test-libs: minfer_backend_cpu minfer_common
// The CPU thread pool: run/barrier correctness, and the publication guarantees the kernels rely
// on (what the caller wrote before run() is seen by every worker; what the workers wrote is seen
// by the caller after run() returns). scripts/test.sh also runs this file under
// ThreadSanitizer (MINFER_TSAN, build-tsan/), where a missing happens-before is a report.
// The dynamic work split (work_split.h): every unit handed out exactly once under any timing,
// stealing when a thread lags, claims whole multiples of the alignment.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "backend/cpu/work_split.h"

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
// a barrier, are counted; workers' own waits are not; a worker busy at the job's end counts as
// tail (imbalance), a barrier as sync; with the clock detached nothing is.
TEST(ThreadPool, WaitClockCountsTheCallersWaitsOnly) {
  ThreadPool pool(2);
  ThreadPool::Waits w;
  pool.set_wait_clock(&w);
  pool.run([&](int ith, int) {  // worker late to the barrier: the caller waits there
    if (ith == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pool.barrier();
  });
  EXPECT_GE(w.sync_ns, 15'000'000u);
  EXPECT_GE(w.sync_waits, 1u);
  const uint64_t after_barrier = w.total_ns();
  // Caller late: the worker waits, the caller does not. The caller first sees the worker reach
  // the barrier (bounded), so a worker descheduled on a busy machine cannot make it wait.
  std::atomic<bool> worker_there{false};
  pool.run([&](int ith, int) {
    if (ith == 0) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!worker_there.load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else {
      worker_there.store(true);
    }
    pool.barrier();
  });
  EXPECT_LT(w.total_ns() - after_barrier, 10'000'000u);
  const uint64_t tail0 = w.tail_ns;
  pool.run([&](int ith, int) {  // worker finishing late: the caller waits at the job's end
    if (ith == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  EXPECT_GE(w.tail_ns - tail0, 15'000'000u);
  EXPECT_GE(w.tail_waits, 1u);
  pool.set_wait_clock(nullptr);
  const ThreadPool::Waits frozen = w;
  pool.run([&](int ith, int) {
    if (ith == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pool.barrier();
  });
  EXPECT_EQ(w.total_ns(), frozen.total_ns());
  EXPECT_EQ(w.sync_waits + w.tail_waits, frozen.sync_waits + frozen.tail_waits);
}

// run_elastic: a worker that picked the job up runs it to the end and the caller waits for it;
// workers that come after the caller's part skip the job (each job runs at most once per
// thread, never after run_elastic returned), and the next jobs still reach every worker.
TEST(ThreadPool, ElasticJobsSkipLateWorkersOnly) {
  for (int n : {2, 3, 4}) {
    ThreadPool pool(n);
    std::vector<std::atomic<int>> runs(n);
    std::atomic<bool> returned{false};
    std::atomic<int> after_return{0};
    for (int iter = 0; iter < 300; ++iter) {
      for (auto& r : runs) r = 0;
      returned = false;
      pool.run_elastic([&](int ith, int) {
        runs[ith].fetch_add(1);
        if (returned.load()) after_return.fetch_add(1);
        if (ith > 0 && iter % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      });
      returned = true;
      ASSERT_EQ(runs[0].load(), 1);
      for (int i = 1; i < n; ++i) ASSERT_LE(runs[i].load(), 1) << "iter " << iter;
    }
    EXPECT_EQ(after_return.load(), 0);
    // A plain job after elastic ones still runs on every thread, barrier included.
    std::vector<int> seen(n, 0);
    pool.run([&](int ith, int) {
      seen[ith] = 1;
      pool.barrier();
    });
    for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1);
  }
}

// A caller that finishes its part of an elastic job before a sleeping worker wakes does not
// wait for it (a plain run() would): the job's end costs no wake-up.
TEST(ThreadPool, ElasticJobDoesNotWaitForASleepingWorker) {
  ThreadPool pool(2);
  std::atomic<int> worker_runs{0};
  int64_t skipped = 0;
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // worker past its spin: asleep
    const int before = worker_runs.load();
    pool.run_elastic([&](int ith, int) {
      if (ith == 1) worker_runs.fetch_add(1);
    });
    skipped += worker_runs.load() == before;
  }
  // The futex wake-up takes microseconds, the caller's part nothing: most rounds skip it.
  EXPECT_GE(skipped, 1);
}

// Shares for nth threads, 64-byte aligned as WorkSplit needs.
struct SplitMem {
  explicit SplitMem(int nth) : p(std::aligned_alloc(64, WorkSplit::bytes(nth))) {}
  ~SplitMem() { std::free(p); }
  void* p;
};

std::atomic<int> g_steals{0};
std::atomic<int> g_slow_thread{-1};
// Claim hook: the slow thread sleeps after each of its own claims; steals are counted.
void slow_hook(int ith, int64_t, int64_t, bool stolen) {
  if (stolen) g_steals.fetch_add(1, std::memory_order_relaxed);
  if (!stolen && ith == g_slow_thread.load(std::memory_order_relaxed))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// Under uneven timing (a thread sleeping between claims, more threads than cores), every unit
// goes to exactly one thread, chunks never cross the range, and with align a claim of at least
// `align` units is a multiple of it.
TEST(WorkSplit, EveryUnitExactlyOnce) {
  WorkSplit::set_claim_hook(slow_hook);
  for (int nth : {1, 2, 3, 5}) {
    ThreadPool pool(nth);
    SplitMem mem(nth);
    for (int64_t n : {0, 1, 2, 7, 64, 1001}) {
      for (WorkSplit::Params prm :
           {WorkSplit::Params{}, WorkSplit::Params{3, 1}, WorkSplit::Params{16, 4}}) {
        for (int slow : {-1, nth - 1}) {
          g_slow_thread = slow;
          WorkSplit::init(mem.p, n, nth);
          std::unique_ptr<std::atomic<int>[]> hits(new std::atomic<int>[n + 1]);
          for (int64_t i = 0; i <= n; ++i) hits[i] = 0;
          std::atomic<int> bad{0};
          pool.run([&](int ith, int nth_) {
            WorkSplit ws(mem.p, nth_, prm);
            int64_t b, e;
            while (ws.next(ith, &b, &e)) {
              if (b < 0 || e > n || b >= e || e - b > prm.max_claim ||
                  (e - b > prm.align && (e - b) % prm.align != 0))
                bad.fetch_add(1);
              for (int64_t i = b; i < e && i < n; ++i) hits[i].fetch_add(1);
            }
          });
          ASSERT_EQ(bad.load(), 0) << "nth=" << nth << " n=" << n;
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(hits[i].load(), 1) << "unit " << i << " nth=" << nth << " n=" << n;
        }
      }
    }
  }
  g_slow_thread = -1;
  WorkSplit::set_claim_hook(nullptr);
}

// A thread that lags has the back of its share taken by the others, in chunks from the back,
// while what it took itself stays at the front.
TEST(WorkSplit, LaggingThreadIsRobbedFromTheBack) {
  WorkSplit::set_claim_hook(slow_hook);
  ThreadPool pool(2);
  SplitMem mem(2);
  const int64_t n = 400;
  auto run_once = [&] {
    g_steals = 0;
    WorkSplit::init(mem.p, n, 2);
    std::vector<int> owner(n, -1);
    pool.run([&](int ith, int nth) {
      WorkSplit ws(mem.p, nth, WorkSplit::Params{8, 1});
      int64_t b, e;
      while (ws.next(ith, &b, &e))
        for (int64_t i = b; i < e; ++i) owner[i] = ith;
    });
    return owner;
  };
  // Thread 1 sleeps 2 ms after each claim of its own (at most 8 of its 200 units): thread 0
  // finishes its share long before and takes most of thread 1's.
  g_slow_thread = 1;
  int taken = 0;
  for (int attempt = 0; attempt < 5 && taken < n / 4; ++attempt) {
    const auto owner = run_once();
    taken = 0;
    for (int64_t i = n / 2; i < n; ++i) taken += owner[i] == 0;
    // Thread 1's own claims are at the front of its share, the stolen chunks at its back.
    for (int64_t i = n / 2 + 1; i < n; ++i) {
      if (owner[i - 1] == 0) {
        ASSERT_EQ(owner[i], 0) << "unit " << i;
      }
    }
  }
  EXPECT_GE(taken, n / 4);
  EXPECT_GT(g_steals.load(), 0);
  g_slow_thread = -1;
  WorkSplit::set_claim_hook(nullptr);
}

}  // namespace
}  // namespace minfer::cpu
