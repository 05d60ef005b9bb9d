// HostPoolBackend: the pool half of the Backend interface (backend/backend.h) implemented once,
// by forwarding to a HostPool (backend/host_pool.h), for every backend whose memory is
// host-addressable (the CPU backend, the simulated device): kernel_ptr and host_ptr are the same
// host address, and the copies are memcpys. A subclass implements kind() and execution
// (supports, execute, sync); one that queues work overrides the copies to wait for its queue
// first (SimBackend).
//
// Ownership: owns the HostPool and so every buffer. Thread safety, failure and cost: HostPool's
// (one driving thread; Error(OutOfMemory); plan-time O(free list) alloc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/backend.h"
#include "backend/host_pool.h"
#include "common/error.h"

namespace minfer {

class HostPoolBackend : public Backend {
 public:
  uint32_t alloc(size_t bytes) override { return pool_.alloc(bytes); }
  uint32_t alloc_fresh(size_t bytes) override { return pool_.alloc_fresh(bytes); }
  void release(uint32_t id) override { pool_.release(id); }
  size_t size_of(uint32_t id) const override { return pool_.size_of(id); }
  uint8_t* kernel_ptr(uint32_t id) override { return pool_.ptr(id); }
  uint8_t* host_ptr(uint32_t id) override { return pool_.ptr(id); }
  size_t pool_bytes() const override { return pool_.total_bytes(); }

  void copy_from_host(uint32_t id, uint64_t offset, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(window(id, offset, bytes), src, bytes);
  }
  void copy_to_host(uint32_t id, uint64_t offset, void* dst, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, window(id, offset, bytes), bytes);
  }
  void copy_buffer(uint32_t src, uint64_t src_offset, uint32_t dst, uint64_t dst_offset,
                   size_t bytes) override {
    if (bytes > 0)
      std::memcpy(window(dst, dst_offset, bytes), window(src, src_offset, bytes), bytes);
  }

  const HostPool& host_pool() const { return pool_; }

 private:
  // [offset, offset + bytes) of buffer id, checked against its size.
  uint8_t* window(uint32_t id, uint64_t offset, size_t bytes) {
    const size_t size = pool_.size_of(id);
    MINFER_ASSERT(offset <= size && bytes <= size - offset, "host pool: copy outside buffer");
    return pool_.ptr(id) + offset;
  }

  HostPool pool_;
};

}  // namespace minfer
