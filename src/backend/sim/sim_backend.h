// SimBackend: a simulated queued device — the GPU execution model without a GPU.
//
// execute() only ENQUEUES the node (like encoding a kernel into a command buffer); sync() runs
// the queue in order on the host executor (like submitting and waiting). So between execute()
// and sync(), host_ptr() of a queued node's output shows whatever the buffer held before: the
// stale read of the design doc's Phase-3 bug, reproducible on any machine. The copies
// (copy_to_host, copy_from_host, copy_buffer) run the queue first when it is not empty, as a
// device's copies are ordered after its queued kernels: they are the safe way in and out. The
// device has its own HostPool (ids independent of every other backend's).
//
// The math is delegated: either a function that runs NodeArgs on host memory, or another
// Backend (e.g. the CPU backend) whose execute()+sync() is called per node at our sync().
// SimOptions::queued = false makes it an immediate backend (handy as a stand-in CPU backend in
// tests); SimOptions::kind sets which BackendKind it registers as.
//
// NodeArgs are copied into the queue; the pointers in them must stay valid until sync() (the
// scheduler guarantees this: buffers live until the next alloc_graph, after a final sync).
// Ownership: owns its pool and queue; a delegate Backend is borrowed and must outlive it.
// Thread safety: none. Cost: the queue vector keeps its capacity, so steady-state execute()
// does not allocate. Failure: alloc throws Error(OutOfMemory); an executor's exceptions
// propagate from sync() (the queue is cleared first, so the device is usable afterwards).
#pragma once

#include <functional>
#include <vector>

#include "backend/host_backend.h"

namespace minfer {

using HostExecFn = std::function<void(const NodeArgs&)>;
using HostSupportsFn = std::function<bool(const Node&)>;

// The simulated device's support table for model graphs (on top of what its delegate runs):
// which op kinds it leaves to the CPU, so that -ngl placements split inside a layer as they do
// on a real device with gaps. Defaults: the sampling-side ops (GetRows: the embedding lookup and
// the output-row selection; SoftCap: logit soft-capping) and one normalisation kind (RmsNorm)
// stay on the CPU; everything else (matmuls, rope, KV store, attention, elementwise) runs here.
struct SimSupport {
  bool rms_norm = false;
  bool get_rows = false;
  bool soft_cap = false;
};
bool sim_supports(const Node& n, const SimSupport& s = {});

struct SimOptions {
  BackendKind kind = BackendKind::Sim;
  bool queued = true;
};

class SimBackend final : public HostPoolBackend {
 public:
  // `supports` defaults to "every op".
  SimBackend(HostExecFn exec, HostSupportsFn supports = {}, SimOptions opt = {});
  // Delegate to `host` (borrowed; must outlive this backend). Passing another SimBackend needs
  // an explicit `static_cast<Backend&>` (the deleted copy constructor is the better match).
  explicit SimBackend(Backend& host, SimOptions opt = {});
  SimBackend(const SimBackend&) = delete;
  SimBackend& operator=(const SimBackend&) = delete;

  BackendKind kind() const override { return opt_.kind; }

  bool supports(const Node& n) const override { return supports_ ? supports_(n) : true; }
  void execute(const NodeArgs& args) override;
  void sync() override;

  // Ordered after queued work: sync() first when anything is pending, then the pool's memcpy.
  void copy_from_host(uint32_t id, uint64_t offset, const void* src, size_t bytes) override;
  void copy_to_host(uint32_t id, uint64_t offset, void* dst, size_t bytes) override;
  void copy_buffer(uint32_t src, uint64_t src_offset, uint32_t dst, uint64_t dst_offset,
                   size_t bytes) override;

  const HostPool& pool() const { return host_pool(); }
  size_t pending() const { return queue_.size(); }  // enqueued, not yet run
  uint64_t n_executed() const { return n_executed_; }
  uint64_t n_syncs() const { return n_syncs_; }

 private:
  HostExecFn exec_;
  HostSupportsFn supports_;
  SimOptions opt_;
  std::vector<NodeArgs> queue_;
  std::vector<NodeArgs> running_;  // swapped with queue_ at sync (kept for its capacity)
  uint64_t n_executed_ = 0;
  uint64_t n_syncs_ = 0;
};

}  // namespace minfer
