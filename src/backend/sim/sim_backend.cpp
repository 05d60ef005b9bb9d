#include "backend/sim/sim_backend.h"

#include <utility>

#include "common/error.h"

namespace minfer {

bool sim_supports(const Node& n, const SimSupport& s) {
  switch (n.op) {
    case Op::RmsNorm:
      return s.rms_norm;
    case Op::GetRows:
      return s.get_rows;
    case Op::SoftCap:
      return s.soft_cap;
    default:
      return true;
  }
}

SimBackend::SimBackend(HostExecFn exec, HostSupportsFn supports, SimOptions opt)
    : exec_(std::move(exec)), supports_(std::move(supports)), opt_(opt) {
  MINFER_ASSERT(exec_ != nullptr, "sim backend: null executor");
}

SimBackend::SimBackend(Backend& host, SimOptions opt)
    : exec_([&host](const NodeArgs& a) {
        host.execute(a);
        host.sync();
      }),
      supports_([&host](const Node& n) { return host.supports(n); }),
      opt_(opt) {}

void SimBackend::execute(const NodeArgs& args) {
  if (!opt_.queued) {
    exec_(args);
    ++n_executed_;
    return;
  }
  queue_.push_back(args);
}

void SimBackend::sync() {
  ++n_syncs_;
  // Swap first so an executor that throws leaves an empty queue, and so a (hypothetical)
  // executor that enqueues does not invalidate the vector being iterated.
  std::swap(queue_, running_);
  queue_.clear();
  for (const NodeArgs& a : running_) {
    exec_(a);
    ++n_executed_;
  }
  running_.clear();
}

void SimBackend::copy_from_host(uint32_t id, uint64_t offset, const void* src, size_t bytes) {
  if (!queue_.empty()) sync();
  HostPoolBackend::copy_from_host(id, offset, src, bytes);
}

void SimBackend::copy_to_host(uint32_t id, uint64_t offset, void* dst, size_t bytes) {
  if (!queue_.empty()) sync();
  HostPoolBackend::copy_to_host(id, offset, dst, bytes);
}

void SimBackend::copy_buffer(uint32_t src, uint64_t src_offset, uint32_t dst, uint64_t dst_offset,
                             size_t bytes) {
  if (!queue_.empty()) sync();
  HostPoolBackend::copy_buffer(src, src_offset, dst, dst_offset, bytes);
}

}  // namespace minfer
