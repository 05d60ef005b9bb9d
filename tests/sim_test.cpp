// minfer-test-libs: minfer_sched minfer_backend_sim minfer_alloc minfer_graph minfer_common
#include <gtest/gtest.h>

#include "memsys_test_util.h"
#include "sched/scheduler.h"

namespace minfer {
namespace {

using testing::Backends;
using testing::i32_bits;
using testing::RefKv;

TEST(Sim, execute_enqueues_and_sync_runs) {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {4, 1, 1, 1});
  NodeId y = g.add(x, x, "y");
  g.node(y).backend = BackendKind::Sim;
  SimBackend sim(testing::test_exec);
  EXPECT_EQ(sim.kind(), BackendKind::Sim);
  const uint32_t bx = sim.alloc(16), by = sim.alloc(16);
  float* px = reinterpret_cast<float*>(sim.host_ptr(bx));
  float* py = reinterpret_cast<float*>(sim.host_ptr(by));
  for (int i = 0; i < 4; ++i) px[i] = static_cast<float>(i + 1);
  NodeArgs a;
  a.graph = &g;
  a.node = y;
  a.out = py;
  a.src[0] = a.src[1] = px;
  sim.execute(a);
  EXPECT_EQ(sim.pending(), 1u);
  EXPECT_EQ(py[3], 0.0f);  // queued: nothing ran yet
  sim.sync();
  EXPECT_EQ(sim.pending(), 0u);
  EXPECT_EQ(py[3], 8.0f);
  EXPECT_EQ(sim.n_executed(), 1u);
  // Pool: own ids, exact-size recycling, fresh never recycles.
  sim.release(bx);
  EXPECT_EQ(sim.alloc(32), 2u);
  EXPECT_EQ(sim.alloc_fresh(16), 3u);
  EXPECT_EQ(sim.alloc(16), bx);
  EXPECT_EQ(px[0], 0.0f);  // recycled buffers are zeroed
}

TEST(Sim, delegates_to_a_host_backend) {
  SimBackend host(
      testing::test_exec, [](const Node& n) { return n.op != Op::Silu; },
      SimOptions{BackendKind::Cpu, false});
  SimBackend dev(static_cast<Backend&>(host));
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {4, 1, 1, 1});
  NodeId s = g.silu(x, "s");
  NodeId m = g.mul(x, x, "m");
  EXPECT_FALSE(dev.supports(g.node(s)));
  EXPECT_TRUE(dev.supports(g.node(m)));
  std::vector<float> in{1, 2, 3, 4}, out(4);
  NodeArgs a;
  a.graph = &g;
  a.node = m;
  a.out = out.data();
  a.src[0] = a.src[1] = in.data();
  dev.execute(a);
  EXPECT_EQ(out[1], 0.0f);
  dev.sync();
  EXPECT_EQ(out[1], 4.0f);
  EXPECT_EQ(host.n_executed(), 1u);
}

// The Phase-3 graph: k = matmul(wk, x) -> view -> rope -> KV store, all on the queued device.
struct Phase3 {
  std::vector<float> wk = std::vector<float>(8 * 8), wv = std::vector<float>(8 * 8);
  Graph g;
  NodeId k, kr, store, att;
  Phase3() {
    for (size_t i = 0; i < wk.size(); ++i) {
      wk[i] = 0.05f * static_cast<float>(i % 13) - 0.2f;
      wv[i] = 0.03f * static_cast<float>(i % 7) + 0.1f;
    }
    auto weight = [](std::vector<float>& d, const char* name) {
      WeightRef w;
      w.name = name;
      w.ne = {8, 8, 1, 1};
      w.data = reinterpret_cast<const uint8_t*>(d.data());
      w.n_bytes = d.size() * 4;
      return w;
    };
    NodeId pos = g.input("pos", GgmlType::I32, {1, 1, 1, 1});
    NodeId x = g.input("x", GgmlType::F32, {8, 1, 1, 1});
    NodeId q = g.input("q", GgmlType::F32, {4, 2, 1, 1});
    NodeId w1 = g.weight(weight(wk, "wk"));
    NodeId w2 = g.weight(weight(wv, "wv"));
    k = g.matmul(w1, x, "k");
    NodeId k3 = g.view(k, {4, 2, 1, 1}, 0, 0, "k3");
    OpParams rp;
    rp.n_rot = 4;
    kr = g.rope(k3, pos, rp, "k_rope");
    NodeId v = g.matmul(w2, x, "v");
    OpParams kp;
    kp.layer = 0;
    kp.n_ctx = 4;
    kp.head_dim = 4;
    kp.n_head = 2;
    kp.n_head_kv = 2;
    kp.scale = 0.5f;
    store = g.kv_store(kr, v, pos, kp, "kv_store");
    att = g.attention(q, store, pos, kp, "att");
    g.mark_output(att);
    for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i) g.node(i).backend = BackendKind::Sim;
  }
  std::map<std::string, std::vector<float>> inputs() const {
    return {{"pos", i32_bits({2})},
            {"x", {0.5f, -1.0f, 0.25f, 2.0f, 1.5f, -0.75f, 0.1f, 0.9f}},
            {"q", {0.3f, 0.1f, -0.2f, 0.4f, 0.5f, -0.6f, 0.7f, 0.2f}}};
  }
  void fill(GraphAllocator& a) const {
    a.fill_input_i32(g, "pos", std::vector<int32_t>{2});
    for (const char* n : {"x", "q"}) a.fill_input_f32(g, n, inputs().at(n));
  }
};

TEST(Sim, phase3_bug_host_copy_of_pending_buffer_reads_stale_data) {
  Phase3 t;
  RefKv ref_kv;
  const auto ref = testing::reference_eval(t.g, t.inputs(), ref_kv);
  const std::vector<float>& ref_k = ref_kv.layers[0].first;
  const size_t row = 2 * 8;  // position 2, n_kv_embd 8
  ASSERT_NE(ref_k[row], 0.0f);

  // Deliberately wrong path: the old allocator materialised rope's input with a HOST copy,
  // issued mid-split while the matmul producing it was still queued on the device.
  {
    Backends be;
    GraphAllocator alloc;
    be.attach(alloc);
    const AllocPlan& plan = alloc.alloc_graph(t.g);
    ASSERT_EQ(plan.alias_of(t.kr), t.k) << "the real path aliases rope in place";
    t.fill(alloc);
    Scheduler sched(alloc);
    std::vector<NodeArgs> args = sched.prepare(t.g).args;  // resolved args, then tamper
    const uint32_t copy_id = be.sim.alloc_fresh(8 * 4);
    auto* copy = be.sim.host_ptr(copy_id);
    for (NodeArgs& a : args) {
      if (a.node == t.kr) {
        std::memcpy(copy, a.src[0], 8 * 4);  // host copy of a buffer whose producer is queued
        a.src[0] = copy;
        a.out = copy;
      }
      if (a.node == t.store) a.src[0] = copy;
      be.sim.execute(a);
    }
    be.sim.sync();
    const auto* K = reinterpret_cast<const float*>(alloc.host_ptr(alloc.kv_pair(0)->k));
    for (size_t e = 0; e < 8; ++e) EXPECT_EQ(K[row + e], 0.0f) << "stale (zero) K expected";
    EXPECT_NE(alloc.node_f32(t.att)[0], ref.at(t.att)[0]);
  }
  // Real path: same-backend in-place alias, everything in queue order, host reads after sync.
  {
    Backends be;
    GraphAllocator alloc;
    be.attach(alloc);
    alloc.alloc_graph(t.g);
    t.fill(alloc);
    Scheduler sched(alloc);
    sched.execute(t.g);
    const auto* K = reinterpret_cast<const float*>(alloc.host_ptr(alloc.kv_pair(0)->k));
    const auto* V = reinterpret_cast<const float*>(alloc.host_ptr(alloc.kv_pair(0)->v));
    for (size_t e = 0; e < 8; ++e) {
      EXPECT_EQ(K[row + e], ref_k[row + e]);
      EXPECT_EQ(V[row + e], ref_kv.layers[0].second[row + e]);
    }
    const auto got = alloc.node_f32(t.att);
    EXPECT_EQ(std::vector<float>(got.begin(), got.end()), ref.at(t.att));
  }
}

TEST(Sim, cross_backend_input_is_staged_after_the_producer_synced) {
  // The producer runs queued on the device; the cpu consumer reads it through fresh staging
  // filled at the split boundary, after sim.sync(): correct values, one staging copy.
  Phase3 t;
  const NodeId att = t.att;
  t.g.node(att).backend = BackendKind::Cpu;  // attention reads the store on another backend
  EXPECT_THROW(
      {
        Backends be;
        GraphAllocator alloc;
        be.attach(alloc);
        alloc.alloc_graph(t.g);  // KV regions cannot be read across backends
      },
      Error);
  t.g.node(att).backend = BackendKind::Sim;
  Graph& g = t.g;
  NodeId tail = g.add(att, att, "tail");
  g.node(tail).backend = BackendKind::Cpu;
  g.mark_output(tail);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  ASSERT_EQ(p.staging.size(), 1u);
  t.fill(alloc);
  Scheduler sched(alloc);
  sched.execute(g);
  EXPECT_EQ(sched.plan().splits.size(), 2u);
  RefKv kv;
  const auto ref = testing::reference_eval(g, t.inputs(), kv);
  const auto got = alloc.node_f32(tail);
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), ref.at(tail));
  EXPECT_GE(be.sim.n_syncs(), 1u);
}

TEST(Sim, copies_wait_for_the_queue) {
  // The explicit copies are ordered after queued work (sync first), unlike a host_ptr read.
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {4, 1, 1, 1});
  NodeId y = g.add(x, x, "y");
  SimBackend sim(testing::test_exec);
  const uint32_t bx = sim.alloc(16), by = sim.alloc(16), bz = sim.alloc(16);
  const std::vector<float> in{1, 2, 3, 4};
  sim.copy_from_host(bx, 0, in.data(), 16);
  NodeArgs a;
  a.graph = &g;
  a.node = y;
  a.out = sim.kernel_ptr(by);
  a.src[0] = a.src[1] = sim.kernel_ptr(bx);
  sim.execute(a);
  ASSERT_EQ(sim.pending(), 1u);
  EXPECT_EQ(reinterpret_cast<const float*>(sim.host_ptr(by))[3], 0.0f);  // the stale view
  // Overwriting the queued node's input waits for it: y sees the old x.
  const std::vector<float> other{10, 20, 30, 40};
  sim.copy_from_host(bx, 0, other.data(), 16);
  EXPECT_EQ(sim.pending(), 0u);
  std::vector<float> out(4);
  sim.copy_to_host(by, 0, out.data(), 16);
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6, 8}));
  // Buffer to buffer after a queued write; then a partial window.
  sim.execute(a);
  sim.copy_buffer(by, 0, bz, 0, 16);
  sim.copy_to_host(bz, 8, out.data(), 8);
  EXPECT_EQ(out[0], 60.0f);
  EXPECT_EQ(out[1], 80.0f);
  EXPECT_EQ(sim.n_executed(), 2u);
}

// A device whose memory has no host view: everything in and out goes through the copies.
class NoHostViewBackend final : public HostPoolBackend {
 public:
  BackendKind kind() const override { return BackendKind::Sim; }
  uint8_t* host_ptr(uint32_t) override { return nullptr; }
  bool supports(const Node&) const override { return true; }
  void execute(const NodeArgs& a) override { testing::test_exec(a); }
  void sync() override {}
};

TEST(Sim, a_backend_without_host_view_runs_through_the_copies) {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {4, 1, 1, 1});
  g.node(x).backend = BackendKind::Sim;
  NodeId y = g.add(x, x, "y");
  g.node(y).backend = BackendKind::Sim;
  NodeId z = g.mul(y, y, "z");  // on the cpu: y is staged across
  g.mark_output(y);
  g.mark_output(z);
  SimBackend cpu{testing::test_exec, {}, SimOptions{BackendKind::Cpu, false}};
  NoHostViewBackend dev;
  GraphAllocator alloc;
  alloc.set_backend(cpu);
  alloc.set_backend(dev);
  const AllocPlan& p = alloc.alloc_graph(g);
  ASSERT_EQ(p.staging.size(), 1u);
  EXPECT_EQ(alloc.host_ptr(p.node_buf[static_cast<size_t>(y)]), nullptr);
  alloc.fill_input_f32(g, "x", std::vector<float>{1, 2, 3, 4});
  Scheduler sched(alloc);
  sched.execute(g);
  std::vector<float> got(4);
  alloc.copy_node_to_host(y, got.data(), 16);
  EXPECT_EQ(got, (std::vector<float>{2, 4, 6, 8}));
  alloc.copy_node_to_host(z, got.data(), 16);
  EXPECT_EQ(got, (std::vector<float>{4, 16, 36, 64}));
  EXPECT_THROW(alloc.copy_node_to_host(z, got.data(), 32), Error);
}

}  // namespace
}  // namespace minfer
