#include "eager/buffer_pool.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <new>

#include "common/error.h"

namespace minfer::eager {
namespace {

// The header occupies the first kBufferAlign bytes of each block so the data stays aligned.
constexpr size_t kHeaderBytes = kBufferAlign;
static_assert(sizeof(Storage) <= kHeaderBytes);
constexpr size_t kSlabQuantum = 4096;
constexpr size_t kF32Quantum = 1024;

// First position whose capacity is >= bytes (also the LIFO insertion point: before equals).
std::vector<Storage*>::iterator lower_bound_bytes(std::vector<Storage*>& list, size_t bytes) {
  return std::lower_bound(list.begin(), list.end(), bytes,
                          [](const Storage* s, size_t b) { return s->capacity_bytes() < b; });
}

}  // namespace

void Storage::release() {
  // acq_rel: the releasing thread's writes to the data happen-before whoever reuses the buffer.
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (arm_ == StorageArm::Standalone) {
    BufferPool::free_block(this);
  } else {
    pool_->reclaim(this);
  }
}

BufferPool::BufferPool(BufferPoolParams params) : params_(params) {
  // Typical forward working sets are a few dozen buffers; reserving keeps list growth (a hidden
  // heap allocation) out of steady state.
  free_f32_.reserve(64);
  free_slab_.reserve(64);
}

BufferPool::~BufferPool() {
  const int64_t out = outstanding_.load();
  if (out != 0) {
    std::fprintf(stderr,
                 "minfer: BufferPool destroyed with %lld outstanding buffer(s) (%zu bytes); "
                 "they were not returned before teardown\n",
                 static_cast<long long>(out), transient_.load());
    MINFER_DASSERT(out == 0, "BufferPool destroyed with outstanding buffers");
  }
  trim();
}

size_t BufferPool::allocation_len(size_t n) {
  if (n <= kF32Quantum) return std::bit_ceil(std::max<size_t>(n, 1));
  return (n + kF32Quantum - 1) / kF32Quantum * kF32Quantum;
}

size_t BufferPool::slab_bytes(size_t bytes) {
  if (bytes == 0) return kSlabQuantum;
  return (bytes + kSlabQuantum - 1) / kSlabQuantum * kSlabQuantum;
}

Storage* BufferPool::allocate_block(StorageArm arm, BufferPool* pool, size_t capacity_bytes) {
  void* block =
      ::operator new (kHeaderBytes + capacity_bytes, std::align_val_t{kBufferAlign}, std::nothrow);
  if (!block) {
    fail(ErrorKind::OutOfMemory, "eager buffer pool: cannot allocate {} bytes", capacity_bytes);
  }
  auto* base = static_cast<uint8_t*>(block);
  return new (base) Storage(arm, pool, capacity_bytes, base + kHeaderBytes);
}

void BufferPool::free_block(Storage* s) {
  s->~Storage();
  ::operator delete (static_cast<void*>(s), std::align_val_t{kBufferAlign});
}

void BufferPool::free_orphan(Storage* s) {
  if (s) free_block(s);
}

StorageRef BufferPool::make_standalone(size_t bytes) {
  return StorageRef::adopt(
      allocate_block(StorageArm::Standalone, nullptr, std::max<size_t>(bytes, 1)));
}

namespace {
void add_and_track_peak(std::atomic<size_t>& value, std::atomic<size_t>& peak, size_t bytes) {
  const size_t now = value.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

void BufferPool::note_handed_out(Storage* s, size_t requested_bytes) {
  // The holder owns the header until reclaim, so this plain write is not racy.
  s->requested_bytes_ = requested_bytes;
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  add_and_track_peak(transient_, peak_transient_, s->capacity_bytes());
  add_and_track_peak(requested_, peak_requested_, requested_bytes);
}

StorageRef BufferPool::acquire(StorageArm arm, size_t capacity_bytes, size_t requested_bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = arm == StorageArm::F32 ? free_f32_ : free_slab_;
    // First fit: the smallest cached buffer that holds the rounded request.
    auto it = lower_bound_bytes(list, capacity_bytes);
    if (it != list.end()) {
      Storage* s = *it;
      list.erase(it);
      cached_bytes_ -= s->capacity_bytes();
      hits_.fetch_add(1, std::memory_order_relaxed);
      s->refs_.store(1, std::memory_order_relaxed);
      note_handed_out(s, requested_bytes);
      return StorageRef::adopt(s);
    }
  }
  // Miss: allocate outside the lock (see the header's thread-safety note). Nothing shared is
  // touched here except atomics.
  Storage* s = allocate_block(arm, this, capacity_bytes);
  misses_.fetch_add(1, std::memory_order_relaxed);
  heap_allocs_.fetch_add(1, std::memory_order_relaxed);
  note_handed_out(s, requested_bytes);
  return StorageRef::adopt(s);
}

StorageRef BufferPool::acquire_f32(size_t n) {
  return acquire(StorageArm::F32, allocation_len(n) * sizeof(float), n * sizeof(float));
}

StorageRef BufferPool::acquire_slab(size_t bytes) {
  return acquire(StorageArm::Slab, slab_bytes(bytes), bytes);
}

void BufferPool::reclaim(Storage* s) {
  const size_t bytes = s->capacity_bytes();
  MINFER_DASSERT(outstanding_.load() > 0, "reclaim without a matching acquire");
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
  transient_.fetch_sub(bytes, std::memory_order_relaxed);
  requested_.fetch_sub(s->requested_bytes(), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Budget: a buffer larger than the whole budget, or one that would overflow it, is freed.
    if (bytes <= params_.max_cached_bytes && cached_bytes_ + bytes <= params_.max_cached_bytes) {
      auto& list = s->arm() == StorageArm::F32 ? free_f32_ : free_slab_;
      // lower_bound inserts before existing same-length entries: LIFO within a length.
      list.insert(lower_bound_bytes(list, bytes), s);
      cached_bytes_ += bytes;
      return;
    }
  }
  heap_frees_.fetch_add(1, std::memory_order_relaxed);
  free_block(s);
}

BufferPoolStats BufferPool::stats() const {
  BufferPoolStats st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st.cached_bytes = cached_bytes_;
    st.cached_buffers = free_f32_.size() + free_slab_.size();
  }
  st.outstanding = outstanding_.load();
  st.hits = hits_.load();
  st.misses = misses_.load();
  st.transient_bytes = transient_.load();
  st.peak_transient_bytes = peak_transient_.load();
  st.requested_bytes = requested_.load();
  st.peak_requested_bytes = peak_requested_.load();
  st.heap_allocations = heap_allocs_.load();
  st.heap_frees = heap_frees_.load();
  return st;
}

void BufferPool::reset_peak() {
  peak_transient_.store(transient_.load());
  peak_requested_.store(requested_.load());
}

void BufferPool::trim() {
  std::vector<Storage*> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    doomed.swap(free_f32_);
    doomed.insert(doomed.end(), free_slab_.begin(), free_slab_.end());
    free_slab_.clear();
    cached_bytes_ = 0;
    free_f32_.reserve(64);
  }
  for (Storage* s : doomed) free_block(s);
  heap_frees_.fetch_add(doomed.size(), std::memory_order_relaxed);
}

}  // namespace minfer::eager
