#include "backend/cpu/thread_pool.h"

#include <chrono>
#include <system_error>

#include "common/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MINFER_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define MINFER_CPU_RELAX() asm volatile("yield")
#else
#define MINFER_CPU_RELAX() ((void)0)
#endif

namespace minfer::cpu {
namespace {
// Idle iterations (pause-spins, then yields) before a worker sleeps: a few ms, long enough to
// cover the gap between two nodes and between decode steps, short enough not to burn a core
// when idle.
constexpr int kSpinIters = 3000;
// Spins before yielding while waiting for other threads of the same job (done / barrier):
// short, because with more threads than free cores the thread we wait for may be descheduled.
constexpr int kWaitSpins = 1000;

// Workers mark themselves, so barrier() can tell the caller thread (the one profiled) apart.
thread_local bool t_is_worker = false;

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_(n_threads < 1 ? 1 : n_threads) {
  threads_.reserve(n_ - 1);
  try {
    for (int i = 1; i < n_; ++i) threads_.emplace_back([this, i] { worker(i); });
  } catch (const std::system_error& e) {
    // The OS refused a thread (RLIMIT_NPROC, memory). A throwing constructor runs no destructor,
    // so the workers already started must be stopped and joined here: a joinable std::thread
    // destroyed during unwinding calls std::terminate.
    const size_t started = threads_.size();
    stop_and_join();
    fail(ErrorKind::Io, "cannot start thread {} of {}: {} (lower -t, or raise the process limit)",
         started + 1, n_, e.what());
  }
}

ThreadPool::~ThreadPool() {
  stop_and_join();
}

void ThreadPool::stop_and_join() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void ThreadPool::run_raw(void (*fn)(void*, int, int), void* ctx) {
  if (n_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(ctx, 0, n_);
  if (done_.load(std::memory_order_acquire) == n_ - 1) return;
  if (wait_ns_ == nullptr) return wait_done();
  const uint64_t t0 = now_ns();
  wait_done();
  account_wait(t0);
}

void ThreadPool::wait_done() {
  int spins = 0;
  while (done_.load(std::memory_order_acquire) != n_ - 1) {
    if (++spins < kWaitSpins) {
      MINFER_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::account_wait(uint64_t t0_ns) {
  *wait_ns_ += now_ns() - t0_ns;
  ++*wait_count_;
}

void ThreadPool::worker(int ith) {
  t_is_worker = true;
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint32_t g;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      ++spins;
      if (spins < kWaitSpins) {
        MINFER_CPU_RELAX();
      } else if (spins < kSpinIters) {
        // Yielding spin: cheap wake-up, yet lets an oversubscribed sibling run.
        std::this_thread::yield();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    fn_(ctx_, ith, n_);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::barrier() {
  if (n_ == 1) return;
  const uint32_t gen = barrier_gen_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_gen_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  const bool timed = wait_ns_ != nullptr && !t_is_worker;
  const uint64_t t0 = timed ? now_ns() : 0;
  int spins = 0;
  while (barrier_gen_.load(std::memory_order_acquire) == gen) {
    if (++spins < kWaitSpins) {
      MINFER_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  if (timed) account_wait(t0);
}

}  // namespace minfer::cpu
