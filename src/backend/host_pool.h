// HostPool: the buffer pool behind a Backend whose memory is host-addressable (CPU, the
// simulated device). Implements the pool half of the Backend interface so backends can forward.
//
// Semantics (design doc §2.1, §2.3, §2.7):
//  * ids are stable and never move memory; a released id keeps its size and its bytes;
//  * alloc(bytes) recycles a free buffer of EXACTLY `bytes` (the allocator already rounds to
//    size classes), most recently released first, and zero-fills it so stale data cannot leak;
//    otherwise it creates a new zeroed buffer;
//  * alloc_fresh(bytes) never looks at the free list (staging, persistent regions);
//  * release(id) puts the id on the free list; releasing a free id is an allocator bug (assert).
// Memory is 64-byte aligned. Ownership: the pool owns every buffer (ids and ptr() only borrow);
// nothing is returned to the OS before the pool dies.
// Thread safety: none (one scheduler thread drives a backend). Failure: Error(OutOfMemory) when
// aligned_alloc fails or the padded size overflows; an unknown id or a double release is an
// internal error (MINFER_ASSERT).
// Cost: alloc is O(free list) — plan time only, never per token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace minfer {

class HostPool {
 public:
  uint32_t alloc(size_t bytes);
  uint32_t alloc_fresh(size_t bytes);
  void release(uint32_t id);
  size_t size_of(uint32_t id) const;
  uint8_t* ptr(uint32_t id);
  const uint8_t* ptr(uint32_t id) const;
  bool is_free(uint32_t id) const;

  size_t total_bytes() const { return total_bytes_; }  // all buffers ever created
  size_t n_buffers() const { return bufs_.size(); }
  size_t n_free() const { return free_.size(); }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  struct Buf {
    std::unique_ptr<uint8_t, FreeDeleter> mem;
    size_t bytes = 0;
    bool free = false;
  };
  std::vector<Buf> bufs_;
  std::vector<uint32_t> free_;
  size_t total_bytes_ = 0;
};

}  // namespace minfer
