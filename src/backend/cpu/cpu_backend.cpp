#include "backend/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace minfer::cpu {

CpuBackend::CpuBackend(const CpuBackendOptions& opts)
    : pool_(opts.n_threads < 1 ? 1 : opts.n_threads), simd_(opts.simd) {}

CpuBackend::~CpuBackend() {
  for (auto& b : buffers_) std::free(b.ptr);
}

uint32_t CpuBackend::create(size_t bytes) {
  // aligned_alloc needs a multiple of the alignment; never hand out a null pointer for 0 bytes.
  const size_t cap = ((bytes ? bytes : 1) + 63) & ~size_t{63};
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, cap));
  if (!p) fail(ErrorKind::OutOfMemory, "cpu pool: cannot allocate {} bytes", bytes);
  std::memset(p, 0, cap);
  MINFER_ASSERT(buffers_.size() < UINT32_MAX - 1, "cpu pool: too many buffers");
  buffers_.push_back(Buffer{p, bytes, true});
  pool_bytes_ += bytes;
  return static_cast<uint32_t>(buffers_.size() - 1);
}

uint32_t CpuBackend::alloc(size_t bytes) {
  auto it = free_.find(bytes);
  if (it != free_.end() && !it->second.empty()) {
    const uint32_t id = it->second.back();
    it->second.pop_back();
    buffers_[id].in_use = true;
    return id;
  }
  return create(bytes);
}

uint32_t CpuBackend::alloc_fresh(size_t bytes) { return create(bytes); }

void CpuBackend::release(uint32_t id) {
  MINFER_ASSERT(id < buffers_.size(), "cpu pool: release of unknown id");
  MINFER_ASSERT(buffers_[id].in_use, "cpu pool: double release");
  buffers_[id].in_use = false;
  free_[buffers_[id].size].push_back(id);
}

size_t CpuBackend::size_of(uint32_t id) const {
  MINFER_ASSERT(id < buffers_.size(), "cpu pool: unknown id");
  return buffers_[id].size;
}

uint8_t* CpuBackend::host_ptr(uint32_t id) {
  MINFER_ASSERT(id < buffers_.size(), "cpu pool: unknown id");
  return buffers_[id].ptr;
}

}  // namespace minfer::cpu
