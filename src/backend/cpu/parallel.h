// Internal helpers: run a job on Exec's pool (or inline) and barrier inside it.
// Ownership: borrows Exec's pool. Thread safety and failure: ThreadPool::run's (one caller at a
// time, jobs must not throw). Cost: a pool dispatch, or none when the job runs inline.
#pragma once

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"

namespace minfer::cpu {

template <typename F>
void parallel(const Exec& ex, F&& f) {
  if (ex.pool && ex.pool->size() > 1) {
    ex.pool->run(f);
  } else {
    f(0, 1);
  }
}

// As parallel, but workers that have not picked the job up when thread 0's part returns skip
// it (ThreadPool::run_elastic): for jobs that share their work dynamically (WorkSplit), never
// call barrier() and do not need every ith to run.
template <typename F>
void parallel_elastic(const Exec& ex, F&& f) {
  if (ex.pool && ex.pool->size() > 1) {
    ex.pool->run_elastic(f);
  } else {
    f(0, 1);
  }
}

inline void barrier(const Exec& ex) {
  if (ex.pool) ex.pool->barrier();
}

// Row-split helper for simple kernels: fn(begin, end) on each thread's share of [0, n).
// Small jobs run inline: waking the workers costs more than the work.
template <typename F>
void parallel_rows(const Exec& ex, int64_t n, int64_t min_per_thread, F&& fn) {
  if (!ex.pool || ex.pool->size() == 1 || n < 2 * min_per_thread) {
    fn(int64_t{0}, n);
    return;
  }
  parallel(ex, [&](int ith, int nth) {
    int64_t b, e;
    split_range(n, ith, nth, &b, &e);
    if (b < e) fn(b, e);
  });
}

}  // namespace minfer::cpu
