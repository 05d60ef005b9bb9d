// minfer-test-libs: minfer_backend_cpu minfer_alloc minfer_graph minfer_common
// CpuBackend: pool semantics and execute() of graph nodes against the reference kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ref_kernels.h"
#include "common/quant.h"
#include "numeric_test_util.h"

namespace minfer::cpu {
namespace {

using test::randn;

TEST(CpuPool, ExactSizeReuseZeroFillAndFresh) {
  CpuBackend be(CpuBackendOptions{2});
  const uint32_t a = be.alloc(100);
  uint8_t* pa = be.host_ptr(a);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(pa[i], 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pa) % 64, 0u);
  be.release(a);
  const uint32_t b = be.alloc(64);  // different size: new buffer
  EXPECT_NE(b, a);
  const uint32_t c = be.alloc(100);  // exact match: recycled
  EXPECT_EQ(c, a);
  be.release(c);
  const uint32_t d = be.alloc_fresh(100);  // never from the free list
  EXPECT_NE(d, a);
  EXPECT_EQ(be.size_of(d), 100u);
  EXPECT_EQ(be.pool_bytes(), 264u);
  EXPECT_EQ(be.alloc(100), a);
}

// x -> rms_norm(w) -> matmul(Q8_0) -> silu, plus rope on a reshaped view, through execute().
TEST(CpuExecute, SmallGraphMatchesReference) {
  const int64_t E = 64, F = 96, T = 5;
  Graph g;
  const NodeId x = g.input("x", GgmlType::F32, {E, T, 1, 1});
  const NodeId pos = g.input("pos", GgmlType::I32, {T, 1, 1, 1});
  auto normw = randn(E, 1);
  auto wf = randn(E * F, 2);
  std::vector<uint8_t> wq(row_size(GgmlType::Q8_0, E) * F);
  for (int64_t r = 0; r < F; ++r)
    quantize_row(GgmlType::Q8_0, wf.data() + r * E, wq.data() + r * row_size(GgmlType::Q8_0, E), E);
  const NodeId nw = g.weight(
      {"norm", GgmlType::F32, {E, 1, 1, 1}, reinterpret_cast<const uint8_t*>(normw.data()), E * 4});
  const NodeId w = g.weight({"w", GgmlType::Q8_0, {E, F, 1, 1}, wq.data(), wq.size()});
  const NodeId h = g.rms_norm(x, nw, 1e-6f, "h");
  const NodeId y = g.matmul(w, h, "y");
  const NodeId s = g.silu(y, "s");
  const NodeId v = g.view(s, {16, 6, T, 1}, 0, 0, "heads");
  OpParams rp;
  rp.rope_mode = RopeMode::Neox;
  rp.n_rot = 16;
  rp.freq_base = 10000.0f;
  const NodeId r = g.rope(v, pos, rp, "rope");
  g.mark_output(r);

  CpuBackend be(CpuBackendOptions{2});
  auto xs = randn(E * T, 3);
  std::vector<int32_t> ps = {0, 1, 2, 7, 8};
  std::vector<float> hb(E * T), yb(F * T), sb(F * T), rb(F * T);
  auto run = [&](NodeId id, void* out, std::array<const void*, 6> srcs) {
    NodeArgs a;
    a.graph = &g;
    a.node = id;
    a.out = out;
    a.src = srcs;
    be.execute(a);
  };
  run(h, hb.data(), {xs.data(), normw.data()});
  run(y, yb.data(), {wq.data(), hb.data()});
  run(s, sb.data(), {yb.data()});
  run(r, rb.data(), {sb.data(), ps.data()});

  std::vector<float> hr(E * T), yr(F * T), sr(F * T), rr(F * T);
  ref::rms_norm(xs.data(), E, normw.data(), hr.data(), E, T, 1e-6f);
  MatmulArgs ma{GgmlType::Q8_0, wq.data(), E, F, hr.data(), E, T, yr.data(), F};
  ref::matmul(ma);
  ref::silu(yr.data(), sr.data(), F * T);
  const HeadLayout l{16, 6, T, 0, 0};
  RopeParams rpp{RopeMode::Neox, 16, 10000.0f, 1.0f};
  ref::rope(sr.data(), l, rr.data(), l, ps.data(), rpp);
  double num = 0, den = 0;
  for (size_t i = 0; i < rr.size(); ++i) {
    num += (rb[i] - rr[i]) * (rb[i] - rr[i]);
    den += rr[i] * rr[i];
  }
  EXPECT_LE(num / den, 5e-4);
}

}  // namespace
}  // namespace minfer::cpu
