#include "eager/tensor.h"

#include <fmt/format.h>

#include "common/error.h"

namespace minfer::eager {
namespace {

bool is_quantized(GgmlType t) {
  return type_traits(t).quantized;
}

}  // namespace

Strides Tensor::contiguous_strides(GgmlType type, const Shape& ne) {
  const TypeTraits& tt = type_traits(type);
  Strides nb{};
  nb[0] = tt.type_size;
  nb[1] = row_size(type, ne[0]);
  nb[2] = nb[1] * static_cast<size_t>(ne[1]);
  nb[3] = nb[2] * static_cast<size_t>(ne[2]);
  return nb;
}

Tensor Tensor::empty(BufferPool& pool, GgmlType type, Shape ne) {
  for (int64_t d : ne) MINFER_ASSERT(d >= 0, "negative dimension");
  Tensor t;
  t.type_ = type;
  t.ne_ = ne;
  t.nb_ = contiguous_strides(type, ne);
  if (type == GgmlType::F32) {
    t.storage_ = pool.acquire_f32(static_cast<size_t>(t.n_elements()));
  } else {
    t.storage_ = pool.acquire_slab(t.n_bytes());
  }
  return t;
}

Tensor Tensor::over(StorageRef storage, GgmlType type, Shape ne, size_t offset) {
  Tensor t;
  t.storage_ = std::move(storage);
  t.type_ = type;
  t.ne_ = ne;
  t.nb_ = contiguous_strides(type, ne);
  t.offset_ = offset;
  t.check_in_bounds();
  return t;
}

size_t Tensor::n_bytes() const {
  return row_size(type_, ne_[0]) * static_cast<size_t>(ne_[1] * ne_[2] * ne_[3]);
}

bool Tensor::is_contiguous() const {
  // Strides of size-1 dimensions address nothing, so they do not matter (a one-row narrow of
  // a matrix keeps the matrix's row stride but is contiguous).
  const Strides want = contiguous_strides(type_, ne_);
  for (int d = 0; d < 4; ++d) {
    if (ne_[d] != 1 && nb_[d] != want[d]) return false;
  }
  return true;
}

float* Tensor::f32() const {
  MINFER_ASSERT(type_ == GgmlType::F32, "f32() on a non-f32 tensor");
  return data<float>();
}

void Tensor::check_in_bounds() const {
  MINFER_ASSERT(storage_, "view of an undefined tensor");
  for (int64_t d : ne_) {
    MINFER_ASSERT(d >= 0, "negative dimension");
    if (d == 0) return;  // empty: addresses nothing
  }
  size_t extent = is_quantized(type_)
                      ? row_size(type_, ne_[0])
                      : static_cast<size_t>(ne_[0] - 1) * nb_[0] + type_traits(type_).type_size;
  for (int d = 1; d < 4; ++d) extent += static_cast<size_t>(ne_[d] - 1) * nb_[d];
  MINFER_ASSERT(offset_ + extent <= storage_->capacity_bytes(), "view past the end of its storage");
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t len) const {
  MINFER_ASSERT(dim >= 0 && dim < 4, "narrow: bad dimension");
  MINFER_ASSERT(start >= 0 && len >= 0 && start + len <= ne_[dim], "narrow: range out of bounds");
  MINFER_ASSERT(!(dim == 0 && is_quantized(type_)), "narrow: dim 0 of a quantized tensor");
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(start) * nb_[dim];
  t.ne_[dim] = len;
  return t;
}

Tensor Tensor::reshape(Shape ne) const {
  MINFER_ASSERT(is_contiguous(), "reshape: tensor is not contiguous");
  MINFER_ASSERT(ne[0] * ne[1] * ne[2] * ne[3] == n_elements(), "reshape: element count differs");
  Tensor t = *this;
  t.ne_ = ne;
  t.nb_ = contiguous_strides(type_, ne);
  return t;
}

Tensor Tensor::broadcast_to(Shape ne) const {
  Tensor t = *this;
  for (int d = 0; d < 4; ++d) {
    if (ne_[d] == ne[d]) continue;
    MINFER_ASSERT(ne_[d] == 1, "broadcast_to: dimension is neither equal nor 1");
    MINFER_ASSERT(!(d == 0 && is_quantized(type_)), "broadcast_to: dim 0 of a quantized tensor");
    t.ne_[d] = ne[d];
    t.nb_[d] = 0;
  }
  return t;
}

Tensor Tensor::view(Shape ne, Strides nb, size_t offset) const {
  Tensor t = *this;
  t.ne_ = ne;
  t.nb_ = nb;
  t.offset_ = offset_ + offset;
  t.check_in_bounds();
  return t;
}

Tensor& Tensor::replace(Tensor&& next) {
  MINFER_ASSERT(next.defined(), "replace with an undefined tensor");
  Tensor old = std::move(*this);
  *this = std::move(next);
  return *this;  // `old` dies here: its reference is released now, not at scope exit
}

std::string Tensor::describe() const {
  return fmt::format("{}[{},{},{},{}]", type_name(type_), ne_[0], ne_[1], ne_[2], ne_[3]);
}

}  // namespace minfer::eager
