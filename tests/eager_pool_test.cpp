// minfer-test-libs: minfer_eager minfer_common
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "eager/buffer_pool.h"

namespace minfer::eager {
namespace {

TEST(EagerPool, AllocationLenRounding) {
  EXPECT_EQ(BufferPool::allocation_len(0), 1u);
  EXPECT_EQ(BufferPool::allocation_len(1), 1u);
  EXPECT_EQ(BufferPool::allocation_len(3), 4u);
  EXPECT_EQ(BufferPool::allocation_len(64), 64u);
  EXPECT_EQ(BufferPool::allocation_len(65), 128u);
  EXPECT_EQ(BufferPool::allocation_len(1000), 1024u);
  EXPECT_EQ(BufferPool::allocation_len(1024), 1024u);
  // Above 1024: multiples of 1024, not powers of two.
  EXPECT_EQ(BufferPool::allocation_len(1025), 2048u);
  EXPECT_EQ(BufferPool::allocation_len(2049), 3072u);
  EXPECT_EQ(BufferPool::allocation_len(4864 * 7), 34816u);
}

TEST(EagerPool, SlabRounding) {
  EXPECT_EQ(BufferPool::slab_bytes(0), 4096u);
  EXPECT_EQ(BufferPool::slab_bytes(1), 4096u);
  EXPECT_EQ(BufferPool::slab_bytes(4096), 4096u);
  EXPECT_EQ(BufferPool::slab_bytes(4097), 8192u);
}

TEST(EagerPool, BuffersAreAligned) {
  BufferPool pool;
  for (size_t n : {1u, 3u, 1000u, 5000u}) {
    StorageRef f = pool.acquire_f32(n);
    StorageRef s = pool.acquire_slab(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.bytes()) % kBufferAlign, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.bytes()) % kBufferAlign, 0u);
    EXPECT_EQ(f->capacity_bytes(), BufferPool::allocation_len(n) * 4);
    EXPECT_EQ(s->capacity_bytes(), BufferPool::slab_bytes(n));
  }
}

TEST(EagerPool, RecycleInvariantSameSizeReturnsSameBuffer) {
  BufferPool pool;
  StorageRef first = pool.acquire_f32(896);
  Storage* first_ptr = first.get();
  first.reset();
  StorageRef second = pool.acquire_f32(896);
  EXPECT_EQ(second.get(), first_ptr);
  // A request that rounds to the same length shares the bucket.
  second.reset();
  StorageRef third = pool.acquire_f32(1000);
  EXPECT_EQ(third.get(), first_ptr);
  const BufferPoolStats st = pool.stats();
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.heap_allocations, 1u);
}

TEST(EagerPool, LifoWithinALength) {
  BufferPool pool;
  StorageRef a = pool.acquire_f32(256);
  StorageRef b = pool.acquire_f32(256);
  StorageRef c = pool.acquire_f32(256);
  Storage* pa = a.get();
  Storage* pb = b.get();
  Storage* pc = c.get();
  a.reset();
  b.reset();
  c.reset();  // released last -> handed out first
  StorageRef x = pool.acquire_f32(256);
  StorageRef y = pool.acquire_f32(256);
  StorageRef z = pool.acquire_f32(256);
  EXPECT_EQ(x.get(), pc);
  EXPECT_EQ(y.get(), pb);
  EXPECT_EQ(z.get(), pa);
}

TEST(EagerPool, FirstFitTakesSmallestThatFits) {
  BufferPool pool;
  StorageRef big = pool.acquire_f32(8192);
  StorageRef mid = pool.acquire_f32(2048);
  StorageRef small = pool.acquire_f32(16);
  Storage* pbig = big.get();
  Storage* pmid = mid.get();
  Storage* psmall = small.get();
  big.reset();
  small.reset();
  mid.reset();
  // 1500 rounds to 2048: the 2048 buffer, not the 8192 one.
  StorageRef r = pool.acquire_f32(1500);
  EXPECT_EQ(r.get(), pmid);
  // 3000 rounds to 3072: only the 8192 buffer fits (internal fragmentation, by design).
  StorageRef r2 = pool.acquire_f32(3000);
  EXPECT_EQ(r2.get(), pbig);
  StorageRef r3 = pool.acquire_f32(9);
  EXPECT_EQ(r3.get(), psmall);
}

TEST(EagerPool, ArmsAreSeparate) {
  BufferPool pool;
  StorageRef f = pool.acquire_f32(1024);  // 4096 bytes
  Storage* pf = f.get();
  f.reset();
  StorageRef s = pool.acquire_slab(4096);
  EXPECT_NE(s.get(), pf);
  EXPECT_EQ(s->arm(), StorageArm::Slab);
  Storage* ps = s.get();
  s.reset();
  // Slabs are untyped: a slab released by an f16 user serves scratch of another type.
  ScratchLease<int32_t> lease = pool.scratch<int32_t>(1000);
  EXPECT_EQ(lease.storage().get(), ps);
  EXPECT_EQ(lease.size(), 1000u);
  lease[999] = 7;
  EXPECT_EQ(lease.data()[999], 7);
}

TEST(EagerPool, ScratchLeaseReturnsOnDestruction) {
  BufferPool pool;
  {
    ScratchLease<uint16_t> lease = pool.scratch<uint16_t>(10);
    EXPECT_EQ(pool.stats().outstanding, 1);
  }
  EXPECT_EQ(pool.stats().outstanding, 0);
  EXPECT_EQ(pool.stats().cached_bytes, 4096u);
}

TEST(EagerPool, OversizedBufferIsFreedNotCached) {
  BufferPool pool(BufferPoolParams{.max_cached_bytes = 64 * 1024});
  StorageRef huge = pool.acquire_f32(32 * 1024);  // 128 KiB > budget
  huge.reset();
  BufferPoolStats st = pool.stats();
  EXPECT_EQ(st.cached_bytes, 0u);
  EXPECT_EQ(st.cached_buffers, 0u);
  EXPECT_EQ(st.heap_frees, 1u);
  EXPECT_EQ(st.outstanding, 0);
}

TEST(EagerPool, OverBudgetIsFreedAndAccountingSpansBothArms) {
  BufferPool pool(BufferPoolParams{.max_cached_bytes = 16 * 1024});
  StorageRef f = pool.acquire_f32(2048);   // 8 KiB
  StorageRef s = pool.acquire_slab(6000);  // 8 KiB slab
  StorageRef t = pool.acquire_slab(10);    // 4 KiB slab
  f.reset();
  EXPECT_EQ(pool.stats().cached_bytes, 8u * 1024);
  s.reset();
  EXPECT_EQ(pool.stats().cached_bytes, 16u * 1024);  // exactly at the budget: still cached
  t.reset();                                         // would exceed it: freed
  BufferPoolStats st = pool.stats();
  EXPECT_EQ(st.cached_bytes, 16u * 1024);
  EXPECT_EQ(st.cached_buffers, 2u);
  EXPECT_EQ(st.heap_frees, 1u);
  // Taking a slab out of the cache frees budget for the next return.
  StorageRef again = pool.acquire_slab(5000);
  EXPECT_EQ(pool.stats().cached_bytes, 8u * 1024);
  again.reset();
  EXPECT_EQ(pool.stats().cached_bytes, 16u * 1024);
  pool.trim();
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
}

TEST(EagerPool, OutstandingAndPeakTransient) {
  BufferPool pool;
  StorageRef a = pool.acquire_f32(1024);  // 4 KiB
  StorageRef b = pool.acquire_slab(100);  // 4 KiB
  StorageRef a2 = a;                      // a second reference is not a second buffer
  EXPECT_EQ(pool.stats().outstanding, 2);
  EXPECT_EQ(pool.stats().transient_bytes, 8192u);
  a.reset();
  EXPECT_EQ(pool.stats().outstanding, 2);
  a2.reset();
  b.reset();
  BufferPoolStats st = pool.stats();
  EXPECT_EQ(st.outstanding, 0);
  EXPECT_EQ(st.transient_bytes, 0u);
  EXPECT_EQ(st.peak_transient_bytes, 8192u);
  EXPECT_EQ(st.peak_requested_bytes, 4096u + 100u);
  EXPECT_EQ(st.requested_bytes, 0u);
  pool.reset_peak();
  EXPECT_EQ(pool.stats().peak_transient_bytes, 0u);
  EXPECT_EQ(pool.stats().peak_requested_bytes, 0u);
  // First fit hands a cached 4 KiB buffer to a 40-byte request: capacity counts 4 KiB
  // transient, the request 40 bytes.
  StorageRef small = pool.acquire_f32(10);
  EXPECT_EQ(small->capacity_bytes(), 4096u);
  EXPECT_EQ(small->requested_bytes(), 40u);
  EXPECT_EQ(pool.stats().transient_bytes, 4096u);
  EXPECT_EQ(pool.stats().requested_bytes, 40u);
}

TEST(EagerPool, StandaloneStorageIsNotPooled) {
  BufferPool pool;
  StorageRef s = BufferPool::make_standalone(1 << 20);
  EXPECT_EQ(s->arm(), StorageArm::Standalone);
  EXPECT_EQ(s->pool(), nullptr);
  s.reset();  // freed, never cached
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  EXPECT_EQ(pool.stats().outstanding, 0);
}

TEST(EagerPool, TeardownWithOutstandingBuffersIsReported) {
  Storage* leaked = nullptr;
#ifdef NDEBUG
  testing::internal::CaptureStderr();
  {
    BufferPool pool;
    leaked = pool.acquire_f32(10).detach();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("1 outstanding buffer"), std::string::npos) << err;
  BufferPool::free_orphan(leaked);
#else
  EXPECT_DEATH(
      {
        BufferPool pool;
        leaked = pool.acquire_f32(10).detach();
      },
      "outstanding");
  (void)leaked;
#endif
}

// Several threads acquire and release overlapping sizes from both arms; the pool must end with
// nothing outstanding, every buffer intact (each thread checks its own fill pattern), and the
// cached bytes equal to the sum of what the free lists hold.
TEST(EagerPool, ConcurrentAcquireRelease) {
  BufferPool pool(BufferPoolParams{.max_cached_bytes = 1 << 20});
  constexpr int kThreads = 4;
  constexpr int kIters = 2000;
  std::vector<std::thread> threads;
  std::atomic<int> corrupt{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::vector<std::pair<StorageRef, uint8_t>> held;
      for (int i = 0; i < kIters; ++i) {
        const size_t n = 1 + rng() % 3000;
        StorageRef s = (rng() & 1) ? pool.acquire_f32(n) : pool.acquire_slab(n * 2);
        const auto tag = static_cast<uint8_t>(t * 31 + i);
        s.bytes()[0] = tag;
        s.bytes()[s->capacity_bytes() - 1] = tag;
        held.emplace_back(std::move(s), tag);
        if (held.size() > 8 || (rng() & 3) == 0) {
          const size_t k = rng() % held.size();
          const auto& [h, want] = held[k];
          if (h.bytes()[0] != want || h.bytes()[h->capacity_bytes() - 1] != want) corrupt++;
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  const BufferPoolStats st = pool.stats();
  EXPECT_EQ(st.outstanding, 0);
  EXPECT_EQ(st.transient_bytes, 0u);
  EXPECT_LE(st.cached_bytes, size_t{1} << 20);
  EXPECT_EQ(st.hits + st.misses, static_cast<uint64_t>(kThreads * kIters));
  EXPECT_EQ(st.heap_allocations - st.heap_frees, st.cached_buffers);
}

}  // namespace
}  // namespace minfer::eager
