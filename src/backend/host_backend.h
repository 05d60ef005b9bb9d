// HostPoolBackend: the pool half of the Backend interface (backend/backend.h) implemented once,
// by forwarding to a HostPool (backend/host_pool.h), for every backend whose memory is
// host-addressable (the CPU backend, the simulated device). A subclass implements only kind()
// and execution (supports, execute, sync).
//
// Ownership: owns the HostPool and so every buffer. Thread safety, failure and cost: HostPool's
// (one driving thread; Error(OutOfMemory); plan-time O(free list) alloc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/host_pool.h"

namespace minfer {

class HostPoolBackend : public Backend {
 public:
  uint32_t alloc(size_t bytes) override { return pool_.alloc(bytes); }
  uint32_t alloc_fresh(size_t bytes) override { return pool_.alloc_fresh(bytes); }
  void release(uint32_t id) override { pool_.release(id); }
  size_t size_of(uint32_t id) const override { return pool_.size_of(id); }
  uint8_t* host_ptr(uint32_t id) override { return pool_.ptr(id); }
  size_t pool_bytes() const override { return pool_.total_bytes(); }

  const HostPool& host_pool() const { return pool_; }

 private:
  HostPool pool_;
};

}  // namespace minfer
