// BufferPool: the recycling allocator behind eager mode
// (../shared/design/buffer-pool-vs-arena.txt).
//
// Eager mode runs op by op; every transient (matmul/norm/add output, typed scratch) is acquired
// from this pool and returned the instant its last reference dies. The pool has two arms that
// share ONE byte budget for what they keep cached:
//
//  * the f32 arm — buffers measured in f32 elements. A request of n elements is served by the
//    first cached buffer (free list sorted ascending by length) whose length is >=
//    allocation_len(n); a miss allocates allocation_len(n) elements. Rounding: n <= 1024 ->
//    next power of two, else the next multiple of 1024. Within one length reuse is LIFO: a
//    returned buffer is inserted BEFORE cached buffers of the same length, so the most
//    recently released buffer (warm in L1/L2) is handed out first.
//  * the byte-slab arm — raw 64-byte-aligned slabs rounded up to 4096 bytes, serving every
//    non-f32 dtype (f16/bf16/i32 tensors, quantized activation blocks) and ScratchLease<T>.
//    A slab is untyped, so an f16 slab can serve q8 scratch on the next op.
//
// Budget: a returned buffer whose bytes alone exceed max_cached_bytes, or whose bytes would push
// the cached total over it, is freed instead of cached. Retention is therefore bounded by
// min(budget, peak transient working set).
//
// Ownership: every buffer is one heap block holding a Storage header followed by the data, so a
// pool hit allocates nothing (the header is recycled with the data). A Storage is refcounted
// (StorageRef); the LAST release returns it to its pool (or frees it when the budget says so).
// Standalone storages (make_standalone: KV caches, anything session-lifetime) never enter a
// free list and are freed on their last release; they are not counted by any pool.
//
// Thread safety: acquire/release may be called from any thread. The free lists and the cached
// byte count are guarded by one mutex; the outstanding counter and statistics are atomics.
// The miss path allocates OUTSIDE the mutex: the fresh block is not yet shared and the
// counters it touches are atomic. Any future change that touches shared pool state in that
// window must re-take the lock.
//
// Failure: allocation failure throws Error(OutOfMemory) naming the byte count. Destroying a
// pool while buffers are still outstanding is a bug in the caller: debug builds assert
// (MINFER_DASSERT); release builds print a report naming the count to stderr and continue —
// the outstanding buffers must then be freed with BufferPool::free_orphan, never released.
//
// Cost: acquire/release are O(log n + n) in the number of cached buffers (binary search plus a
// vector insert/erase); in an LLM forward the free lists hold tens of buffers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

namespace minfer::eager {

class BufferPool;

enum class StorageArm : uint8_t {
  F32,         // pooled, length in f32 elements
  Slab,        // pooled, length in bytes (64-byte aligned, 4096-byte rounded)
  Standalone,  // never pooled; freed on last release
};

// Every buffer's data is aligned to this (SIMD loads, cache lines).
constexpr size_t kBufferAlign = 64;

// Header of one heap block; the data follows it at kBufferAlign. Refcounted through StorageRef.
class Storage {
 public:
  uint8_t* bytes() const { return data_; }
  size_t capacity_bytes() const { return capacity_bytes_; }
  // Bytes the current holder asked for (<= capacity: rounding and first fit hand out more).
  size_t requested_bytes() const { return requested_bytes_; }
  StorageArm arm() const { return arm_; }
  BufferPool* pool() const { return pool_; }
  int32_t use_count() const { return refs_.load(std::memory_order_acquire); }

  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Last release -> pool reclaim (pooled) or free (standalone).
  void release();

 private:
  friend class BufferPool;
  Storage(StorageArm arm, BufferPool* pool, size_t capacity_bytes, uint8_t* data)
      : refs_(1), arm_(arm), pool_(pool), capacity_bytes_(capacity_bytes), data_(data) {}

  std::atomic<int32_t> refs_;
  StorageArm arm_;
  BufferPool* pool_;
  size_t capacity_bytes_;
  size_t requested_bytes_ = 0;
  uint8_t* data_;
};

// Intrusive owning pointer to a Storage. Copy = retain, destroy = release. Not thread-safe as
// an object (like shared_ptr); distinct StorageRefs to one Storage may live on many threads.
class StorageRef {
 public:
  StorageRef() = default;
  // Adopts an existing reference (no retain).
  static StorageRef adopt(Storage* s) {
    StorageRef r;
    r.s_ = s;
    return r;
  }
  StorageRef(const StorageRef& o) : s_(o.s_) {
    if (s_) s_->retain();
  }
  StorageRef(StorageRef&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  StorageRef& operator=(StorageRef o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  ~StorageRef() { reset(); }

  void reset() {
    if (Storage* s = std::exchange(s_, nullptr)) s->release();
  }
  // Gives up ownership WITHOUT releasing (leak tests, orphan handling).
  Storage* detach() { return std::exchange(s_, nullptr); }

  Storage* get() const { return s_; }
  Storage* operator->() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }
  uint8_t* bytes() const { return s_ ? s_->bytes() : nullptr; }

 private:
  Storage* s_ = nullptr;
};

// RAII lease of raw slab bytes viewed as `count` objects of T (uninitialised). The slab
// returns to the pool when the lease dies. T must be trivially copyable (it is raw scratch).
template <typename T>
class ScratchLease {
  static_assert(std::is_trivially_copyable_v<T>, "scratch is raw bytes");
  static_assert(alignof(T) <= kBufferAlign, "slab alignment is 64 bytes");

 public:
  ScratchLease() = default;
  ScratchLease(StorageRef slab, size_t count) : slab_(std::move(slab)), count_(count) {}
  T* data() const { return reinterpret_cast<T*>(slab_.bytes()); }
  size_t size() const { return count_; }
  T& operator[](size_t i) const { return data()[i]; }
  const StorageRef& storage() const { return slab_; }

 private:
  StorageRef slab_;
  size_t count_ = 0;
};

struct BufferPoolParams {
  // Budget for bytes kept CACHED in the free lists of both arms together (not for bytes in
  // use: a working set larger than this still works, it just is not all retained).
  size_t max_cached_bytes = size_t{1} << 30;
};

struct BufferPoolStats {
  size_t cached_bytes = 0;          // bytes sitting in the free lists (both arms)
  size_t cached_buffers = 0;        // buffers sitting in the free lists (both arms)
  int64_t outstanding = 0;          // buffers handed out and not yet returned
  uint64_t hits = 0;                // acquires served from a free list
  uint64_t misses = 0;              // acquires that allocated
  size_t transient_bytes = 0;       // capacity bytes handed out and not yet returned
  size_t peak_transient_bytes = 0;  // max of transient_bytes since construction / reset_peak
  // The same for the bytes the callers asked for: peak_transient - peak_requested is what
  // rounding and first fit (handing a larger cached buffer to a small request) cost.
  size_t requested_bytes = 0;
  size_t peak_requested_bytes = 0;
  uint64_t heap_allocations = 0;  // heap blocks allocated by this pool
  uint64_t heap_frees = 0;        // heap blocks freed (over budget, trim, teardown)
};

class BufferPool {
 public:
  explicit BufferPool(BufferPoolParams params = {});
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // f32 arm rounding: n <= 1024 -> next power of two (0 and 1 -> 1); else next multiple of 1024.
  static size_t allocation_len(size_t n);
  // Slab arm rounding: next multiple of 4096 bytes (0 -> 4096).
  static size_t slab_bytes(size_t bytes);

  // A buffer of at least allocation_len(n) f32 elements (contents unspecified).
  StorageRef acquire_f32(size_t n);
  // A slab of at least slab_bytes(bytes) bytes (contents unspecified).
  StorageRef acquire_slab(size_t bytes);
  template <typename T>
  ScratchLease<T> scratch(size_t count) {
    return ScratchLease<T>(acquire_slab(count * sizeof(T)), count);
  }

  // Session-lifetime buffer outside any pool (KV caches): freed on its last release.
  static StorageRef make_standalone(size_t bytes);
  // Frees a storage whose pool was destroyed while it was outstanding (see Failure above).
  static void free_orphan(Storage* s);

  BufferPoolStats stats() const;
  const BufferPoolParams& params() const { return params_; }
  // Restarts peak tracking from the current transient (and requested) bytes.
  void reset_peak();
  // Frees every cached buffer (both arms).
  void trim();

 private:
  friend class Storage;
  void reclaim(Storage* s);  // called by Storage::release when the count reaches 0
  StorageRef acquire(StorageArm arm, size_t capacity_bytes, size_t requested_bytes);
  void note_handed_out(Storage* s, size_t requested_bytes);
  static Storage* allocate_block(StorageArm arm, BufferPool* pool, size_t capacity_bytes);
  static void free_block(Storage* s);

  BufferPoolParams params_;
  mutable std::mutex mu_;
  // Both sorted ascending by capacity; equal capacities in LIFO order (newest first).
  std::vector<Storage*> free_f32_;   // guarded by mu_
  std::vector<Storage*> free_slab_;  // guarded by mu_
  size_t cached_bytes_ = 0;          // guarded by mu_
  std::atomic<int64_t> outstanding_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0}, heap_allocs_{0}, heap_frees_{0};
  std::atomic<size_t> transient_{0}, peak_transient_{0};
  std::atomic<size_t> requested_{0}, peak_requested_{0};
};

}  // namespace minfer::eager
