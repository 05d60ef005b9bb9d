// Backend interface: a memory pool plus an executor for graph nodes.
//
// The allocator owns the backends' pools (one id space per backend; design doc §3.3) and the
// scheduler drives execution. Buffers are addressed by BufRef {backend, id, offset, len}; ids are
// stable for the pool's lifetime and never move memory (so a device may record raw pointers).
//
// Memory need not be host memory. Two addresses exist per buffer:
//  * kernel_ptr(id): where this backend's own executor finds the buffer (what the scheduler puts
//    in NodeArgs) — host memory for the CPU and the simulated device, a device address for a GPU;
//  * host_ptr(id): a host view (map), or nullptr where the memory is not host-addressable.
// Callers that need host bytes and may meet device memory go through the explicit copies
// (copy_from_host / copy_to_host / copy_buffer), which order themselves after the work already
// queued on the backend. host_ptr is for host-memory fast paths and tests only.
//
// Execution model: execute() on the CPU runs the node now; on a queued device (the simulated
// backend, later CUDA) it only enqueues, and results become visible at sync(). Reading a buffer
// through host_ptr whose producer is still queued returns STALE data — the design doc's Phase-3
// bug. copy_to_host waits for the queue first (sync + copy), so it is the safe read.
//
// Ownership: a Backend owns its pool's memory (freed when the backend dies); NodeArgs only
// borrow pointers into it and into the graph. Whoever constructs a backend owns it (the
// GraphAllocator borrows or owns it, see allocator.h).
// Thread safety: a Backend is driven by one thread at a time (the scheduler); kernels may fan
// out internally. Failure: alloc throws Error(OutOfMemory) when the request cannot be met;
// unknown or double-released ids and copies outside a buffer are internal errors (MINFER_ASSERT).
// Cost: the pool calls run at plan time (once per graph rebuild; O(free list) in HostPool);
// execute(), sync() and the copies run per step and do not allocate after warm-up in the CPU
// and simulated backends (a copy is a memcpy, after a sync when work is queued).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "graph/graph.h"

namespace minfer {

// Where a node's output lives. `len` is the node's real byte length; the pool buffer behind `id`
// may be longer (size classes), consumers use [offset, offset + len).
struct BufRef {
  BackendKind backend = BackendKind::Cpu;
  uint32_t id = UINT32_MAX;
  uint64_t offset = 0;
  uint64_t len = 0;
  bool valid() const { return id != UINT32_MAX; }
  friend bool operator==(const BufRef&, const BufRef&) = default;
};

// Everything a kernel needs for one node, resolved by the scheduler to addresses the node's
// backend can use (Backend::kernel_ptr; weights: the model file's host bytes).
struct NodeArgs {
  const Graph* graph = nullptr;
  NodeId node = kNoNode;
  void* out = nullptr;                     // the node's output window
  std::array<const void*, kMaxSrc> src{};  // each source's memory (weights: their bytes)
  void* kv_k = nullptr;                    // layer K region (KvStore / Attention / fused)
  void* kv_v = nullptr;                    // layer V region
  // Paged cache (kv_block_size > 0): slot s of the layer is at kv_k + (s / kv_block_size) *
  // kv_block_stride + (s % kv_block_size) * row bytes (kv/cache.h); 0: contiguous regions.
  int64_t kv_block_size = 0;
  int64_t kv_block_stride = 0;
};

// A paged KV cache's rows of one layer, as the scheduler hands them to the KV nodes.
struct KvLayerRef {
  void* k = nullptr;
  void* v = nullptr;
  int64_t block_size = 0;
  int64_t block_stride = 0;  // bytes
};
// Who owns paged K/V memory (kv::Cache through the engine). The allocator plans no buffer for
// paged KV nodes; the scheduler asks this for their rows. Borrowed; must outlive the plans.
class KvSource {
 public:
  virtual ~KvSource() = default;
  virtual KvLayerRef kv_layer(int32_t layer) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;

  // ---- pool ----
  // A buffer of exactly `bytes`, reading as zeros: recycled from the free list on an exact size
  // match, else new. At least 64-byte aligned in the backend's address space.
  virtual uint32_t alloc(size_t bytes) = 0;
  // Never taken from the free list (split-boundary staging, persistent regions).
  virtual uint32_t alloc_fresh(size_t bytes) = 0;
  // Return to the free list (not to the OS); the id stays valid and keeps its size.
  virtual void release(uint32_t id) = 0;
  virtual size_t size_of(uint32_t id) const = 0;
  // Where this backend's executor addresses the buffer (NodeArgs). Stable for the buffer's life.
  // Not necessarily host memory: the host dereferences it only when host_ptr is not null.
  virtual uint8_t* kernel_ptr(uint32_t id) = 0;
  // Host view of a buffer, or nullptr when its memory is not host-addressable (device memory).
  // Stable for the buffer's life. No sync: see the stale-read warning above.
  virtual uint8_t* host_ptr(uint32_t id) = 0;
  // Total bytes of all buffers ever created by this pool (for reports).
  virtual size_t pool_bytes() const = 0;

  // ---- copies (ordered after the work already queued on this backend) ----
  // Host -> buffer bytes [offset, offset + bytes). Waits for queued work first, so it never
  // overwrites bytes a pending node still reads.
  virtual void copy_from_host(uint32_t id, uint64_t offset, const void* src, size_t bytes) = 0;
  // Buffer -> host: waits for queued work (sync), then copies — the safe read of a queued
  // backend's results (design doc: a host copy of a GPU-pending buffer was a real bug).
  virtual void copy_to_host(uint32_t id, uint64_t offset, void* dst, size_t bytes) = 0;
  // Buffer -> buffer on this backend; the ranges must not overlap.
  virtual void copy_buffer(uint32_t src, uint64_t src_offset, uint32_t dst, uint64_t dst_offset,
                           size_t bytes) = 0;

  // ---- execution ----
  virtual bool supports(const Node& n) const = 0;
  virtual void execute(const NodeArgs& args) = 0;
  virtual void sync() = 0;
};

}  // namespace minfer
