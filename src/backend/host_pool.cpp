#include "backend/host_pool.h"

#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace minfer {

void HostPool::FreeDeleter::operator()(uint8_t* p) const {
  std::free(p);
}

uint32_t HostPool::alloc(size_t bytes) {
  // LIFO: the most recently released buffer of this size is the likeliest to be cache-warm.
  for (size_t i = free_.size(); i-- > 0;) {
    const uint32_t id = free_[i];
    if (bufs_[id].bytes != bytes) continue;
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
    bufs_[id].free = false;
    std::memset(bufs_[id].mem.get(), 0, bytes);
    return id;
  }
  return alloc_fresh(bytes);
}

uint32_t HostPool::alloc_fresh(size_t bytes) {
  MINFER_ASSERT(bufs_.size() < UINT32_MAX - 1, "host pool: id space exhausted");
  // aligned_alloc needs a size that is a multiple of the alignment, and never 0.
  const size_t padded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  if (padded < bytes) fail(ErrorKind::OutOfMemory, "host pool: {} bytes overflows", bytes);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, padded));
  if (p == nullptr) {
    fail(ErrorKind::OutOfMemory, "host pool: cannot allocate {} bytes ({} already held)", bytes,
         total_bytes_);
  }
  std::memset(p, 0, padded);
  Buf b;
  b.mem.reset(p);
  b.bytes = bytes;
  bufs_.push_back(std::move(b));
  total_bytes_ += bytes;
  return static_cast<uint32_t>(bufs_.size() - 1);
}

void HostPool::release(uint32_t id) {
  MINFER_ASSERT(id < bufs_.size(), "host pool: release of an unknown id");
  MINFER_ASSERT(!bufs_[id].free, "host pool: double release");
  bufs_[id].free = true;
  free_.push_back(id);
}

size_t HostPool::size_of(uint32_t id) const {
  MINFER_ASSERT(id < bufs_.size(), "host pool: unknown id");
  return bufs_[id].bytes;
}

uint8_t* HostPool::ptr(uint32_t id) {
  MINFER_ASSERT(id < bufs_.size(), "host pool: unknown id");
  return bufs_[id].mem.get();
}

const uint8_t* HostPool::ptr(uint32_t id) const {
  MINFER_ASSERT(id < bufs_.size(), "host pool: unknown id");
  return bufs_[id].mem.get();
}

bool HostPool::is_free(uint32_t id) const {
  MINFER_ASSERT(id < bufs_.size(), "host pool: unknown id");
  return bufs_[id].free;
}

}  // namespace minfer
