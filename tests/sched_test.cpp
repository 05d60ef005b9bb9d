// minfer-test-libs: minfer_sched minfer_backend_sim minfer_heap_counter
#include <gtest/gtest.h>

#include "heap_counter/heap_counter.h"
#include "memsys_test_util.h"
#include "sched/scheduler.h"

namespace minfer {
namespace {

using testing::Backends;
using testing::i32_bits;
using testing::RefKv;

Graph mixed_graph() {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {16, 1, 1, 1});
  NodeId a = g.mul(x, x, "a");                      // cpu
  NodeId av = g.view(a, {8, 1, 1, 1}, 8, 0, "av");  // view: never executes
  NodeId b = g.add(av, av, "b");                    // cpu
  NodeId c = g.silu(b, "c");                        // sim (b crosses)
  g.node(c).backend = BackendKind::Sim;
  NodeId d = g.mul(c, c, "d");  // sim
  g.node(d).backend = BackendKind::Sim;
  NodeId dead = g.add(d, d, "dead");  // no consumer
  g.node(dead).backend = BackendKind::Cpu;
  NodeId e = g.add(d, b, "e");  // cpu again (d crosses back)
  g.mark_output(e);
  return g;
}

TEST(Sched, groups_consecutive_nodes_into_splits_and_skips_non_executing) {
  Graph g = mixed_graph();
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  alloc.alloc_graph(g);
  Scheduler sched(alloc);
  const SchedPlan& sp = sched.prepare(g);
  ASSERT_EQ(sp.splits.size(), 3u) << sp.to_string(g);
  EXPECT_EQ(sp.splits[0].backend, BackendKind::Cpu);
  EXPECT_EQ(sp.splits[1].backend, BackendKind::Sim);
  EXPECT_EQ(sp.splits[2].backend, BackendKind::Cpu);
  std::vector<NodeId> run;
  for (const NodeArgs& a : sp.args) run.push_back(a.node);
  EXPECT_EQ(run,
            (std::vector<NodeId>{g.find("a"), g.find("b"), g.find("c"), g.find("d"), g.find("e")}));
  EXPECT_EQ(sp.n_skipped, 3u);  // input, view, dead
  // Split 1 stages b onto the device; split 2 stages d back to the cpu.
  ASSERT_EQ(sp.copies.size(), 2u);
  EXPECT_EQ(sp.copies[0].src, g.find("b"));
  EXPECT_EQ(sp.splits[1].copy_end - sp.splits[1].copy_begin, 1u);
  EXPECT_EQ(sp.copies[1].src, g.find("d"));
  EXPECT_EQ(sp.splits[2].copy_end - sp.splits[2].copy_begin, 1u);
  // The view's source pointer is the viewed window (a's buffer + 8 floats).
  const BufRef& ab = alloc.plan().node_buf[g.find("a")];
  EXPECT_EQ(sp.args[1].src[0], alloc.host_ptr(ab) + 32);

  const std::vector<float> xv = {1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, 0.5f, 0.25f, 2, 3};
  alloc.fill_input_f32(g, "x", xv);
  sched.execute(g);
  RefKv kv;
  auto ref = testing::reference_eval(g, {{"x", xv}}, kv);
  auto got = alloc.node_f32(g.find("e"));
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), ref.at(g.find("e")));
  EXPECT_EQ(be.sim.n_executed(), 2u);
}

TEST(Sched, unsupported_node_is_an_error) {
  Graph g = mixed_graph();
  SimBackend cpu(
      testing::test_exec, [](const Node& n) { return n.op != Op::Mul; },
      SimOptions{BackendKind::Cpu, false});
  SimBackend sim(testing::test_exec);
  GraphAllocator alloc;
  alloc.set_backend(cpu);
  alloc.set_backend(sim);
  alloc.alloc_graph(g);
  Scheduler sched(alloc);
  try {
    sched.prepare(g);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
}

TEST(Sched, missing_backend_is_an_error) {
  Graph g = mixed_graph();
  SimBackend cpu(testing::test_exec, {}, SimOptions{BackendKind::Cpu, false});
  GraphAllocator alloc;
  alloc.set_backend(cpu);
  EXPECT_THROW(alloc.alloc_graph(g), Error);
}

TEST(Sched, replans_when_the_allocator_replanned) {
  Graph g = mixed_graph();
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  alloc.alloc_graph(g);
  Scheduler sched(alloc);
  const std::vector<float> xv(16, 1.5f);
  alloc.fill_input_f32(g, "x", xv);
  sched.execute(g);
  const uint64_t gen = sched.plan().alloc_generation;
  alloc.alloc_graph(g);  // rebuild: new buffers, new generation
  alloc.fill_input_f32(g, "x", xv);
  sched.execute(g);
  EXPECT_EQ(sched.plan().alloc_generation, gen + 1);
  RefKv kv;
  auto ref = testing::reference_eval(g, {{"x", xv}}, kv);
  auto got = alloc.node_f32(g.find("e"));
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), ref.at(g.find("e")));
}

TEST(Sched, no_heap_allocation_per_execute_after_the_first) {
  Graph g = mixed_graph();
  // plus a KV layer, as in a decode step
  NodeId pos = g.input("pos", GgmlType::I32, {1, 1, 1, 1});
  NodeId k = g.input("k", GgmlType::F32, {4, 1, 1, 1});
  OpParams kp;
  kp.layer = 0;
  kp.n_ctx = 8;
  kp.head_dim = 4;
  kp.n_head = 1;
  kp.n_head_kv = 1;
  NodeId st = g.kv_store(k, k, pos, kp, "st");
  NodeId att = g.attention(k, st, pos, kp, "att");
  g.mark_output(att);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  alloc.alloc_graph(g);
  Scheduler sched(alloc);
  const std::vector<float> xv(16, 0.5f), kv(4, 0.25f);
  alloc.fill_input_f32(g, "x", xv);
  alloc.fill_input_f32(g, "k", kv);
  alloc.fill_input_i32(g, "pos", std::vector<int32_t>{0});
  sched.execute(g);  // first execute may size the device queue
  const uint64_t before = heap_allocations();
  for (int32_t step = 1; step < 8; ++step) {
    const int32_t p[1] = {step};
    alloc.fill_input_i32(g, "pos", p);
    alloc.fill_input_f32(g, "k", kv);
    sched.execute(g);
  }
  EXPECT_EQ(sched.n_executes(), 8u);
  const uint64_t news = heap_allocations() - before;
  if (!kHeapCounting) GTEST_SKIP() << "allocation counting is off under the sanitizers";
  EXPECT_EQ(news, 0u) << "heap allocations during steady-state executes";
}

}  // namespace
}  // namespace minfer
