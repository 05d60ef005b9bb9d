// Eager tensors: refcounted handles onto pool (or standalone) storage.
//
// A Tensor is {storage ref, dtype, shape ne[4], byte strides nb[4], byte offset}; shapes follow
// ggml (ne[0] is the contiguous row dimension). Copying a Tensor retains its storage; the LAST
// handle to die returns the buffer to its BufferPool (RAII: model code never frees anything).
// Views (narrow, reshape, broadcast_to, view) are new handles onto the SAME storage, so a view
// keeps its source's buffer alive however long it outlives the tensor it was made from.
//
// dtypes: F32 uses the pool's f32 arm; every other GgmlType (F16, BF16, I32, quantized row
// blocks) uses the byte-slab arm. For quantized types strides are per row (nb[0] is the block
// size in bytes and ne[0] must be a multiple of the block length); narrow/view on dim 0 is not
// supported for them.
//
// Ownership: shared by every handle to the storage (refcounted, see buffer_pool.h); the pool a
// tensor came from must outlive it (destroying a pool with tensors still alive is a caller bug).
// Thread safety: a Tensor object is not synchronised (like shared_ptr); different handles to
// the same storage may be used and dropped on different threads (the refcount is atomic).
// Writing through two handles to the same bytes concurrently is a data race, as with raw memory.
// Failure: shape/stride mistakes are internal errors (MINFER_ASSERT): eager model code builds
// shapes from validated hyperparameters, never from user input.
// Cost: views and copies are O(1); empty() is one pool acquire.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "eager/buffer_pool.h"

namespace minfer::eager {

using Shape = std::array<int64_t, 4>;
using Strides = std::array<size_t, 4>;  // bytes

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised contiguous tensor from the pool (f32 arm for F32, slab arm otherwise).
  static Tensor empty(BufferPool& pool, GgmlType type, Shape ne);
  static Tensor empty_f32(BufferPool& pool, Shape ne) { return empty(pool, GgmlType::F32, ne); }
  // Contiguous tensor over an existing storage (e.g. a standalone KV region), at byte offset.
  static Tensor over(StorageRef storage, GgmlType type, Shape ne, size_t offset = 0);
  // Contiguous byte strides for `type` and `ne`.
  static Strides contiguous_strides(GgmlType type, const Shape& ne);

  bool defined() const { return static_cast<bool>(storage_); }
  GgmlType type() const { return type_; }
  const Shape& ne() const { return ne_; }
  int64_t ne(int d) const { return ne_[d]; }
  const Strides& nb() const { return nb_; }
  size_t nb(int d) const { return nb_[d]; }
  size_t offset() const { return offset_; }
  const StorageRef& storage() const { return storage_; }
  int64_t n_elements() const { return ne_[0] * ne_[1] * ne_[2] * ne_[3]; }
  // Bytes a contiguous tensor of this type and shape occupies.
  size_t n_bytes() const;
  bool is_contiguous() const;

  uint8_t* raw() const { return storage_.bytes() + offset_; }
  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(raw());
  }
  float* f32() const;  // asserts type F32

  // ---- views: share storage, keep it alive ----
  // Elements [start, start + len) along dim `dim`.
  Tensor narrow(int dim, int64_t start, int64_t len) const;
  // Same bytes, new shape; requires a contiguous tensor and an equal element count.
  Tensor reshape(Shape ne) const;
  // Dimensions of size 1 stretch to `ne` with stride 0; the others must match.
  Tensor broadcast_to(Shape ne) const;
  // Arbitrary strided view; `offset` is in bytes relative to this tensor's first byte. Every
  // addressed byte must lie inside the storage.
  Tensor view(Shape ne, Strides nb, size_t offset) const;

  // Residual-stream advance: this handle now refers to `next`, and the old storage reference
  // is released at once (back to the pool if it was the last one).
  Tensor& replace(Tensor&& next);
  // Drops this handle's reference (back to the pool if it was the last one).
  void reset() { *this = Tensor(); }

  std::string describe() const;  // "f32[64,3,1,1]" for diagnostics

 private:
  void check_in_bounds() const;

  StorageRef storage_;
  GgmlType type_ = GgmlType::F32;
  Shape ne_{0, 1, 1, 1};
  Strides nb_{0, 0, 0, 0};
  size_t offset_ = 0;
};

}  // namespace minfer::eager
