// Persistent worker pool for the CPU kernels.
//
// run(fn) executes fn(ith, nth) on every thread of the pool (the caller is thread 0) and returns
// when all have finished. Workers spin for a short while after each job (dispatch in the
// decode loop costs ~100 ns instead of a futex wake-up), then sleep on an atomic wait.
// barrier() may be called from inside a job by all nth threads (e.g. matmul: quantize the
// activations, barrier, multiply).
//
// run_elastic(fn): the same, except that a worker that has not picked the job up by the time
// the caller's own fn(0, nth) returns skips it, and the caller waits only for the workers that
// did. For jobs whose threads share the work dynamically (WorkSplit: the caller takes what a
// missing thread would have done) and never call barrier(). Why: on a loaded machine a worker
// that is descheduled between jobs (it yields after a short spin) otherwise costs the caller a
// whole scheduler time slice at the end of the job, though there is nothing left for it to do.
//
// Ownership: the pool owns its threads; the destructor joins them. Thread safety: run() and
// run_elastic() must be called from one thread at a time and never from inside a job. Failure:
// a job must not throw (an exception escaping it on a worker calls std::terminate, and on the
// caller it would leave the workers running on a dead frame); barrier() inside an elastic job is
// an assertion failure; the constructor throws Error(Io) naming the thread that could not be
// started, after stopping and joining the ones that were (never std::terminate). Cost: no heap
// allocation per run() (the job is a function pointer + context pointer); one CAS per worker
// per job to join it.
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
    run_raw(trampoline<F>, const_cast<void*>(static_cast<const void*>(&f)), /*elastic=*/false);
  }
  template <typename F>
  void run_elastic(F&& f) {
    run_raw(trampoline<F>, const_cast<void*>(static_cast<const void*>(&f)), /*elastic=*/true);
  }
  void run_raw(void (*fn)(void*, int, int), void* ctx, bool elastic = false);

  // All nth threads of the current job must call it (not in an elastic job).
  void barrier();

  // Profiling (cpu/profile.h): the calling thread's waits for the workers, in nanoseconds and
  // counts. sync: in-job barriers, and the part of a job's end spent until every worker that
  // must take part had picked the job up (wake-up). tail: the rest of a job's end, every such
  // worker busy with its last work (imbalance). jobs: run() / run_elastic() calls on more than
  // one thread; joins: the workers that took part in them, out of `slots` (jobs x workers;
  // fewer: elastic jobs the caller finished before some worker woke up).
  struct Waits {
    uint64_t sync_ns = 0, sync_waits = 0;
    uint64_t tail_ns = 0, tail_waits = 0;
    uint64_t jobs = 0, joins = 0, slots = 0;
    uint64_t total_ns() const { return sync_ns + tail_ns; }
  };
  // While set, the caller's waits (end of run(), barrier()) are added to *w; nullptr (the
  // default) = off: no clock is read. Call between jobs, from the caller thread.
  void set_wait_clock(Waits* w) { waits_ = w; }

 private:
  template <typename F>
  static void trampoline(void* ctx, int ith, int nth) {
    (*static_cast<std::remove_reference_t<F>*>(ctx))(ith, nth);
  }
  void worker(int ith);
  bool join(uint32_t gen);        // worker: takes part in job `gen` unless it is closed or over
  void stop_and_join();           // wakes every worker to exit and joins them; idempotent
  void wait_done(int n_workers);  // caller: until n_workers workers finished the job
  void wait_done_timed(int n_workers);

  Waits* waits_ = nullptr;  // profiling, see set_wait_clock

  int n_;
  std::vector<std::thread> threads_;
  void (*fn_)(void*, int, int) = nullptr;
  void* ctx_ = nullptr;
  bool elastic_ = false;
  alignas(64) std::atomic<uint32_t> generation_{0};
  // The current job: its generation in the high 32 bits, kClosed, and in the low bits the
  // number of workers that joined it. Workers join by CAS; run_elastic's caller closes it.
  alignas(64) std::atomic<uint64_t> join_{0};
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
