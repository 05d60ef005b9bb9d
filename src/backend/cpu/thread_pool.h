// Persistent worker pool for the CPU kernels.
//
// run(fn) executes fn(ith, nth) on every thread of the pool (the caller is thread 0) and returns
// when all have finished. Workers spin for a short while after each job (dispatch in the
// decode loop costs ~100 ns instead of a futex wake-up), then sleep on an atomic wait.
// barrier() may be called from inside a job by all nth threads (e.g. matmul: quantize the
// activations, barrier, multiply).
//
// Ownership: the pool owns its threads; the destructor joins them. Thread safety: run() must be
// called from one thread at a time and never from inside a job. Failure: a job must not throw
// (an exception escaping it on a worker calls std::terminate, and on the caller it would leave
// the workers running on a dead frame); the constructor throws Error(Io) naming the thread that
// could not be started, after stopping and joining the ones that were (never std::terminate). Cost:
// no heap allocation per run() (the job is a function pointer + context pointer).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace minfer::cpu {

class ThreadPool {
 public:
  // n_threads >= 1 (1 = caller only, no workers).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }

  template <typename F>
  void run(F&& f) {
    using Fn = std::remove_reference_t<F>;
    auto tramp = [](void* ctx, int ith, int nth) { (*static_cast<Fn*>(ctx))(ith, nth); };
    run_raw(tramp, const_cast<void*>(static_cast<const void*>(&f)));
  }
  void run_raw(void (*fn)(void*, int, int), void* ctx);

  // All nth threads of the current job must call it.
  void barrier();

  // Profiling (cpu/profile.h): while set, the calling thread's waits for the workers (at the
  // end of run() and in barrier()) add their nanoseconds to *ns and their count to *count.
  // nullptr (the default) = off: no clock is read. Call between jobs, from the caller thread.
  void set_wait_clock(uint64_t* ns, uint64_t* count) {
    wait_ns_ = ns;
    wait_count_ = count;
  }

 private:
  void worker(int ith);
  void stop_and_join();  // wakes every worker to exit and joins them; idempotent
  void wait_done();      // caller: until every worker finished the job
  void account_wait(uint64_t t0_ns);

  uint64_t* wait_ns_ = nullptr;  // profiling, see set_wait_clock
  uint64_t* wait_count_ = nullptr;

  int n_;
  std::vector<std::thread> threads_;
  void (*fn_)(void*, int, int) = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> done_{0};
  alignas(64) std::atomic<int> barrier_count_{0};
  alignas(64) std::atomic<uint32_t> barrier_gen_{0};
  std::atomic<bool> stop_{false};
};

// Split [0, n) into nth near-equal contiguous chunks; returns chunk ith as [begin, end).
inline void split_range(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t per = n / nth, rem = n % nth;
  *begin = ith * per + (ith < rem ? ith : rem);
  *end = *begin + per + (ith < rem ? 1 : 0);
}

}  // namespace minfer::cpu
