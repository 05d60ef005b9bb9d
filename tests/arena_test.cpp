// minfer-test-libs: minfer_model
// Arena mode: the GraphAllocator placing every interval at an offset of ONE buffer per backend.
// Checks the plan's invariants on real model graphs (no two live intervals share bytes, all
// inside the arena, KV regions outside it, aliases inside their owner's window) and that the
// graph session computes bit-identical logits with either planner (llama, qwen2, qwen3; prefill
// and decode).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "alloc/allocator.h"
#include "alloc/arena.h"
#include "common/error.h"
#include "model/model.h"
#include "model/session.h"
#include "planner/offset_planner.h"
#include "tiny_model.h"

namespace minfer {
namespace {

using testing::TinySpec;

std::unique_ptr<testing::LoadedTiny> load_tiny(const std::string& arch) {
  TinySpec s;
  s.arch = arch;
  return testing::load_tiny_model(s);
}

// A pool that only records sizes (the plan never touches bytes here).
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(BackendKind k) : kind_(k) {}
  BackendKind kind() const override { return kind_; }
  uint32_t alloc(size_t bytes) override { return alloc_fresh(bytes); }
  uint32_t alloc_fresh(size_t bytes) override {
    sizes.push_back(bytes);
    return static_cast<uint32_t>(sizes.size() - 1);
  }
  void release(uint32_t) override {}
  size_t size_of(uint32_t id) const override { return sizes.at(id); }
  // Plans only: no memory behind the ids, like a device's (host_ptr null).
  uint8_t* kernel_ptr(uint32_t) override { return nullptr; }
  uint8_t* host_ptr(uint32_t) override { return nullptr; }
  void copy_from_host(uint32_t, uint64_t, const void*, size_t) override {
    MINFER_ASSERT(false, "CountingBackend holds no bytes");
  }
  void copy_to_host(uint32_t, uint64_t, void*, size_t) override {
    MINFER_ASSERT(false, "CountingBackend holds no bytes");
  }
  void copy_buffer(uint32_t, uint64_t, uint32_t, uint64_t, size_t) override {
    MINFER_ASSERT(false, "CountingBackend holds no bytes");
  }
  size_t pool_bytes() const override { return 0; }
  bool supports(const Node&) const override { return true; }
  void execute(const NodeArgs&) override {}
  void sync() override {}
  std::vector<size_t> sizes;

 private:
  BackendKind kind_;
};

void check_arena_plan(const Graph& g, const AllocPlan& p, const CountingBackend& be,
                      const std::string& what) {
  const Liveness& lv = p.live;
  ASSERT_FALSE(lv.intervals.empty()) << what;
  // One arena: every interval names the same buffer id, inside its length.
  const uint32_t arena = p.interval_buf[0];
  std::vector<PlanBuffer> bufs;
  std::vector<uint64_t> offs;
  for (size_t i = 0; i < lv.intervals.size(); ++i) {
    const LiveInterval& iv = lv.intervals[i];
    const BufRef& r = p.node_buf[static_cast<size_t>(iv.root)];
    EXPECT_EQ(r.id, arena) << what;
    EXPECT_EQ(r.offset % kArenaAlignment, 0u) << what;
    EXPECT_LE(r.offset + r.len, be.size_of(arena)) << what;
    bufs.push_back({iv.root, iv.first, static_cast<int64_t>(iv.last) + 1, iv.bytes, 1});
    offs.push_back(r.offset);
  }
  EXPECT_EQ(check_offsets(bufs, offs, be.size_of(arena)), "") << what;
  EXPECT_EQ(p.stats.plan_bytes[0], be.size_of(arena)) << what;
  EXPECT_GE(p.stats.plan_bytes[0], p.stats.lower_bound_bytes[0]) << what;
  EXPECT_LE(static_cast<double>(p.stats.plan_bytes[0]),
            1.005 * static_cast<double>(p.stats.lower_bound_bytes[0]))
      << what;
  // Views and in-place aliases sit inside their owner's window; KV regions are other buffers.
  for (NodeId n = 0; n < static_cast<NodeId>(g.size()); ++n) {
    const BufRef& r = p.node_buf[static_cast<size_t>(n)];
    const StorageKind k = lv.kind[static_cast<size_t>(n)];
    if (k == StorageKind::KvRegion) {
      EXPECT_NE(r.id, arena) << what << " node " << g.node(n).name;
    }
    if ((k == StorageKind::View || k == StorageKind::InPlace) && r.valid()) {
      const BufRef& o = p.node_buf[static_cast<size_t>(lv.root[static_cast<size_t>(n)])];
      EXPECT_EQ(r.id, o.id) << what;
      EXPECT_GE(r.offset, o.offset) << what;
      EXPECT_LE(r.offset + r.len, o.offset + o.len) << what << " node " << g.node(n).name;
    }
  }
}

class ArenaArch : public ::testing::TestWithParam<std::string> {};

TEST_P(ArenaArch, PlanInvariantsOnModelGraphs) {
  auto l = load_tiny(GetParam());
  l->model->prepare_fused_qkv();
  for (int64_t n_tok : {1, 7, 32}) {
    for (bool fuse : {false, true}) {
      GraphParams gp;
      gp.n_tokens = n_tok;
      gp.n_outputs = 1;
      gp.cparams.n_ctx = 64;
      gp.cparams.fusion = {fuse, fuse};
      const Graph g = l->model->build_graph(gp);
      GraphAllocator a;
      auto be = std::make_unique<CountingBackend>(BackendKind::Cpu);
      CountingBackend* raw = be.get();
      a.own_backend(std::move(be));
      a.set_planner(PlannerKind::Arena);
      const AllocPlan& p = a.alloc_graph(g);
      check_arena_plan(g, p, *raw, fmt::format("{} tokens {} fused {}", GetParam(), n_tok, fuse));
    }
  }
}

TEST_P(ArenaArch, ArenaIsReusedAcrossRebuildsAndGrowsWhenNeeded) {
  auto l = load_tiny(GetParam());
  GraphAllocator a;
  auto be = std::make_unique<CountingBackend>(BackendKind::Cpu);
  CountingBackend* raw = be.get();
  a.own_backend(std::move(be));
  a.set_planner(PlannerKind::Arena);
  auto plan_for = [&](int64_t n_tok) {
    GraphParams gp;
    gp.n_tokens = n_tok;
    gp.n_outputs = 1;
    gp.cparams.n_ctx = 64;
    return l->model->build_graph(gp);
  };
  const Graph big = plan_for(16);
  const uint32_t arena_big = a.alloc_graph(big).interval_buf[0];
  const Graph small = plan_for(1);
  EXPECT_EQ(a.alloc_graph(small).interval_buf[0], arena_big);  // fits: same buffer
  const Graph bigger = plan_for(40);
  EXPECT_NE(a.alloc_graph(bigger).interval_buf[0], arena_big);  // grew: a fresh one
  EXPECT_GE(raw->size_of(a.plan().interval_buf[0]), raw->size_of(arena_big));
}

std::vector<int32_t> tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7 + 3) % 64);
  return t;
}

TEST_P(ArenaArch, SessionLogitsIdenticalToSizeClass) {
  auto l = load_tiny(GetParam());
  for (bool fuse : {false, true}) {
    SessionParams ps;
    ps.n_ctx = 64;
    ps.n_ubatch = 8;  // several micro-batches: the arena is re-planned per graph shape
    ps.fusion = {fuse, fuse};
    SessionParams pa = ps;
    ps.planner = PlannerKind::SizeClass;
    pa.planner = PlannerKind::Arena;
    Session s(*l->model, ps), a(*l->model, pa);
    const auto prompt = tokens(13);
    std::vector<int32_t> rows = {0, 5, 12};
    std::vector<float> ls(s.eval(prompt, 0, rows).begin(), s.eval(prompt, 0, rows).end());
    std::span<const float> la = a.eval(prompt, 0, rows);
    ASSERT_EQ(ls.size(), la.size());
    EXPECT_EQ(std::memcmp(ls.data(), la.data(), ls.size() * sizeof(float)), 0) << "prefill";
    for (int step = 0; step < 4; ++step) {
      const int32_t t = (step * 11 + 1) % 64;
      std::span<const int32_t> one(&t, 1);
      std::vector<float> ds(s.eval_last(one, 13 + step).begin(), s.eval_last(one, 13 + step).end());
      std::span<const float> da = a.eval_last(one, 13 + step);
      ASSERT_EQ(ds.size(), da.size());
      EXPECT_EQ(std::memcmp(ds.data(), da.data(), ds.size() * sizeof(float)), 0) << "decode";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ArenaArch, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(ArenaStories, WithinHalfAPercentOfTheBound) {
  const std::filesystem::path f =
      std::filesystem::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(f)) GTEST_SKIP() << "no " << f << " (shared data absent)";
  auto m = Model::load(f.string());
  m->prepare_fused_qkv();
  for (int64_t n_tok : {1, 512}) {
    GraphParams gp;
    gp.n_tokens = n_tok;
    gp.n_outputs = 1;
    gp.cparams.n_ctx = 2048;
    const Graph g = m->build_graph(gp);
    GraphAllocator a;
    auto be = std::make_unique<CountingBackend>(BackendKind::Cpu);
    CountingBackend* raw = be.get();
    a.own_backend(std::move(be));
    a.set_planner(PlannerKind::Arena);
    check_arena_plan(g, a.alloc_graph(g), *raw, fmt::format("stories {} tokens", n_tok));
  }
}

}  // namespace
}  // namespace minfer
