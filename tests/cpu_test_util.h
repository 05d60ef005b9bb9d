#pragma once
// A CPU execution context for kernel tests: a thread pool, a scratch arena and the Exec that
// points at both, at a chosen SIMD level (kBest: whatever the CPU and build offer).
// Ownership: owns the pool and the arena; `ex` points into the object, so it is neither copied
// nor moved. Thread safety: one test thread drives it (the pool runs the kernels' workers).
// Cost: constructing starts `threads` - 1 worker threads; the arena grows on first use.
#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"

namespace minfer::test {

struct CpuCtx {
  explicit CpuCtx(int threads, cpu::SimdLevel s = cpu::SimdLevel::kBest) : pool(threads) {
    ex = cpu::Exec{&pool, &arena, s};
  }
  CpuCtx(const CpuCtx&) = delete;
  CpuCtx& operator=(const CpuCtx&) = delete;

  cpu::ThreadPool pool;
  cpu::Arena arena;
  cpu::Exec ex;
};

}  // namespace minfer::test
