// minfer-test-libs: minfer_eager minfer_backend_cpu minfer_common
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/fp16.h"
#include "eager/kv_cache.h"
#include "eager/tensor.h"

namespace minfer::eager {
namespace {

TEST(EagerTensor, EmptyUsesTheRightArm) {
  BufferPool pool;
  Tensor a = Tensor::empty_f32(pool, {64, 3, 1, 1});
  EXPECT_EQ(a.storage()->arm(), StorageArm::F32);
  EXPECT_EQ(a.storage()->capacity_bytes(), 256u * 4);  // 192 elements -> 256
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(a.nb(1), 64u * 4);
  Tensor h = Tensor::empty(pool, GgmlType::F16, {64, 3, 1, 1});
  EXPECT_EQ(h.storage()->arm(), StorageArm::Slab);
  EXPECT_EQ(h.nb(1), 128u);
  Tensor q = Tensor::empty(pool, GgmlType::Q8_0, {64, 2, 1, 1});
  EXPECT_EQ(q.n_bytes(), 2u * 68);
  EXPECT_EQ(q.storage()->arm(), StorageArm::Slab);
  Tensor i = Tensor::empty(pool, GgmlType::I32, {5, 1, 1, 1});
  EXPECT_EQ(i.storage()->arm(), StorageArm::Slab);
  EXPECT_EQ(pool.stats().outstanding, 4);
}

TEST(EagerTensor, LastReleaseReturnsBufferToPool) {
  BufferPool pool;
  Storage* first = nullptr;
  {
    Tensor a = Tensor::empty_f32(pool, {896, 1, 1, 1});
    first = a.storage().get();
    Tensor b = a;  // second handle, same buffer
    a.reset();
    EXPECT_EQ(pool.stats().outstanding, 1);
  }
  EXPECT_EQ(pool.stats().outstanding, 0);
  Tensor c = Tensor::empty_f32(pool, {896, 1, 1, 1});
  EXPECT_EQ(c.storage().get(), first);  // recycle invariant through tensors
}

TEST(EagerTensor, ViewsKeepTheirSourceAlive) {
  BufferPool pool;
  Tensor view;
  Tensor bcast;
  Tensor reshaped;
  {
    Tensor src = Tensor::empty_f32(pool, {4, 3, 1, 1});
    for (int i = 0; i < 12; ++i) src.f32()[i] = static_cast<float>(i);
    view = src.narrow(1, 1, 2);
    bcast = src.narrow(1, 2, 1).broadcast_to({4, 5, 1, 1});
    reshaped = src.reshape({12, 1, 1, 1});
  }
  // The source handle is gone; its buffer is not.
  EXPECT_EQ(pool.stats().outstanding, 1);
  EXPECT_EQ(view.storage()->use_count(), 3);
  EXPECT_EQ(view.ne(1), 2);
  EXPECT_EQ(view.f32()[0], 4.0f);
  EXPECT_EQ(view.data<float>()[view.nb(1) / 4], 8.0f);
  EXPECT_EQ(bcast.nb(1), 0u);
  EXPECT_EQ(bcast.f32()[3], 11.0f);
  EXPECT_EQ(reshaped.f32()[11], 11.0f);
  view.reset();
  bcast.reset();
  EXPECT_EQ(pool.stats().outstanding, 1);
  reshaped.reset();  // last view: now the buffer goes back
  EXPECT_EQ(pool.stats().outstanding, 0);
  EXPECT_EQ(pool.stats().cached_buffers, 1u);
}

TEST(EagerTensor, StridedViewWithOffset) {
  BufferPool pool;
  Tensor src = Tensor::empty_f32(pool, {6, 4, 1, 1});
  for (int i = 0; i < 24; ++i) src.f32()[i] = static_cast<float>(i);
  // Column 1 of every other row: [1 element, 2 rows], row stride 2 * 6 floats, offset 1 float.
  Tensor v = src.view({1, 2, 1, 1}, {4, 48, 48, 48}, 4);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.f32()[0], 1.0f);
  EXPECT_EQ(v.data<float>()[v.nb(1) / 4], 13.0f);
}

TEST(EagerTensor, ReplaceReleasesTheOldBufferAtOnce) {
  BufferPool pool;
  Tensor x = Tensor::empty_f32(pool, {64, 1, 1, 1});
  Storage* old = x.storage().get();
  Tensor next = Tensor::empty_f32(pool, {64, 1, 1, 1});
  EXPECT_EQ(pool.stats().outstanding, 2);
  x.replace(std::move(next));
  EXPECT_FALSE(next.defined());
  EXPECT_EQ(pool.stats().outstanding, 1);
  // The released buffer is the next one handed out (residual stream ping-pongs two buffers).
  Tensor y = Tensor::empty_f32(pool, {64, 1, 1, 1});
  EXPECT_EQ(y.storage().get(), old);
}

TEST(EagerTensor, ReplaceKeepsAViewedOldBufferAlive) {
  BufferPool pool;
  Tensor x = Tensor::empty_f32(pool, {8, 1, 1, 1});
  x.f32()[0] = 42.0f;
  Tensor alias = x.narrow(0, 0, 4);
  x.replace(Tensor::empty_f32(pool, {8, 1, 1, 1}));
  EXPECT_EQ(pool.stats().outstanding, 2);
  EXPECT_EQ(alias.f32()[0], 42.0f);
}

TEST(EagerKvCache, ViewsAreZeroCopyAndResetKeepsBuffers) {
  BufferPool pool;
  KvCache kv({.n_layer = 2, .n_ctx = 16, .n_kv_embd = 4, .type = GgmlType::F32});
  EXPECT_EQ(kv.bytes(), 2u * 2 * 16 * 4 * 4);
  cpu::Arena arena;
  cpu::Exec ex{.pool = nullptr, .arena = &arena};
  float k[8], v[8];
  for (int i = 0; i < 8; ++i) {
    k[i] = static_cast<float>(i);
    v[i] = static_cast<float>(-i);
  }
  const int32_t pos[2] = {0, 1};
  kv.store(ex, 1, k, 4, v, 4, 2, pos);
  kv.set_len(2);
  Tensor kview = kv.k_view(1, kv.len());
  EXPECT_EQ(kview.raw(), kv.k_region(1).raw());  // zero copy
  EXPECT_EQ(kview.ne(1), 2);
  EXPECT_EQ(kview.f32()[7], 7.0f);
  EXPECT_EQ(kv.v_view(1, 2).f32()[5], -5.0f);
  const uint8_t* before = kv.k_region(1).raw();
  kv.reset();
  EXPECT_EQ(kv.len(), 0);
  EXPECT_EQ(kv.k_region(1).raw(), before);   // same buffer
  EXPECT_EQ(kv.k_region(1).f32()[7], 7.0f);  // not zeroed
  // Outside the pool's recycling path entirely.
  EXPECT_EQ(pool.stats().outstanding, 0);
  const int32_t bad[1] = {16};
  EXPECT_THROW(kv.store(ex, 0, k, 4, v, 4, 1, bad), minfer::Error);
}

TEST(EagerKvCache, F16StoresConvertedRows) {
  KvCache kv({.n_layer = 1, .n_ctx = 4, .n_kv_embd = 2, .type = GgmlType::F16});
  EXPECT_EQ(kv.bytes(), 2u * 4 * 2 * 2);
  cpu::Arena arena;
  cpu::Exec ex{.pool = nullptr, .arena = &arena};
  const float k[2] = {1.0f, -2.0f}, v[2] = {0.5f, 3.0f};
  const int32_t pos[1] = {3};
  kv.store(ex, 0, k, 2, v, 2, 1, pos);
  Tensor kview = kv.k_view(0, 4);
  EXPECT_EQ(kview.type(), GgmlType::F16);
  EXPECT_EQ(fp16_to_f32(kview.data<uint16_t>()[7]), -2.0f);
  EXPECT_EQ(fp16_to_f32(kv.v_view(0, 4).data<uint16_t>()[6]), 0.5f);
  EXPECT_THROW(KvCache({.n_layer = 1, .n_ctx = 4, .n_kv_embd = 2, .type = GgmlType::Q8_0}), Error);
}

}  // namespace
}  // namespace minfer::eager
