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

namespace {
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kJoinedMask = kClosed - 1;

template <typename Cond>
void spin_until(Cond&& done) {
  int spins = 0;
  while (!done()) {
    if (++spins < kWaitSpins) {
      MINFER_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}
}  // namespace

void ThreadPool::run_raw(void (*fn)(void*, int, int), void* ctx, bool elastic) {
  if (n_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  elastic_ = elastic;
  done_.store(0, std::memory_order_relaxed);
  // join_ is published with the generation: a worker that sees this generation (acquire) sees
  // at least this join_ value, and no worker can still be in the previous job (its done_ was
  // awaited), so none can join it late.
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  join_.store(uint64_t{gen} << 32, std::memory_order_relaxed);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
  fn(ctx, 0, n_);
  // Elastic: close the job; the workers that joined so far are all that will.
  const int n_workers =
      elastic ? static_cast<int>(join_.fetch_or(kClosed, std::memory_order_acq_rel) & kJoinedMask)
              : n_ - 1;
  if (waits_ != nullptr) {
    ++waits_->jobs;
    waits_->joins += static_cast<uint64_t>(n_workers);
    waits_->slots += static_cast<uint64_t>(n_ - 1);
  }
  if (done_.load(std::memory_order_acquire) == n_workers) return;
  if (waits_ == nullptr) return wait_done(n_workers);
  wait_done_timed(n_workers);
}

void ThreadPool::wait_done(int n_workers) {
  spin_until([&] { return done_.load(std::memory_order_acquire) == n_workers; });
}

// As wait_done, split in two: until every worker that must take part has joined (wake-up,
// sync), then until they are done (their last work: the imbalance of the job's split, tail).
void ThreadPool::wait_done_timed(int n_workers) {
  uint64_t t0 = now_ns();
  auto joined = [&] {
    return static_cast<int>(join_.load(std::memory_order_acquire) & kJoinedMask) >= n_workers;
  };
  if (!joined()) {
    spin_until(joined);
    const uint64_t t1 = now_ns();
    waits_->sync_ns += t1 - t0;
    ++waits_->sync_waits;
    t0 = t1;
    if (done_.load(std::memory_order_acquire) == n_workers) return;
  }
  wait_done(n_workers);
  waits_->tail_ns += now_ns() - t0;
  ++waits_->tail_waits;
}

bool ThreadPool::join(uint32_t gen) {
  uint64_t v = join_.load(std::memory_order_acquire);
  do {
    if ((v >> 32) != gen || (v & kClosed) != 0) return false;
  } while (
      !join_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  return true;
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
    if (!join(g)) continue;  // an elastic job the caller finished without us
    fn_(ctx_, ith, n_);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::barrier() {
  if (n_ == 1) return;
  MINFER_ASSERT(!elastic_, "ThreadPool::barrier() inside an elastic job");
  const uint32_t gen = barrier_gen_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_gen_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  const bool timed = waits_ != nullptr && !t_is_worker;
  const uint64_t t0 = timed ? now_ns() : 0;
  spin_until([&] { return barrier_gen_.load(std::memory_order_acquire) != gen; });
  if (timed) {
    waits_->sync_ns += now_ns() - t0;
    ++waits_->sync_waits;
  }
}

}  // namespace minfer::cpu
