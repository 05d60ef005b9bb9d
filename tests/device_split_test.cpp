// minfer-test-libs: minfer_model minfer_gen minfer_heap_counter
// A real model split across the CPU and the simulated queued device (--device sim -ngl N):
// for stories260K and the tiny presets every -ngl from 0 to n_layer + 1 gives logits
// bit-identical to CPU-only (the device runs the CPU's kernels; only placement, staging and the
// queue differ); the paged KV cache works across both (fork, prefix reuse, context shift); and
// the G1 bug — a staging copy without the split-boundary sync — is caught: stale logits.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/sim/sim_backend.h"
#include "gen/gen.h"
#include "gen_file_util.h"
#include "heap_counter/heap_counter.h"
#include "model/model.h"
#include "model/session.h"
#include "sched/assign.h"
#include "sched/scheduler.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

const fs::path kStories = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";

using test::GenFile;

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

SessionParams params(int32_t ngl, BackendKind device, int32_t n_seq = 1) {
  SessionParams p;
  p.n_ctx = 128;
  p.n_seq_max = n_seq;
  p.n_threads = 2;
  p.kv_block_size = 4;  // small blocks: tables of several blocks in a short test
  p.device = device;
  p.n_gpu_layers = ngl;
  return p;
}

// A prefill of 9 tokens (logits of every row), then 6 single-token decode steps: every logit.
std::vector<float> run_single(Model& m, const SessionParams& p) {
  Session s(m, p);
  const auto toks = random_tokens(15, m.hparams().n_vocab, 7);
  std::vector<float> all;
  std::vector<int32_t> rows(9);
  for (int32_t i = 0; i < 9; ++i) rows[static_cast<size_t>(i)] = i;
  auto lg = s.eval(std::span(toks).first(9), 0, rows);
  all.insert(all.end(), lg.begin(), lg.end());
  for (int32_t i = 9; i < 15; ++i) {
    const int32_t last = 0;
    lg = s.eval(std::span(toks).subspan(static_cast<size_t>(i), 1), i, std::span(&last, 1));
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_every_ngl_bit_identical(Model& m, const std::string& what) {
  const auto ref = run_single(m, params(0, BackendKind::Cpu));
  const auto n_layer = static_cast<int32_t>(m.hparams().n_layer);
  for (int32_t ngl = 0; ngl <= n_layer + 1; ++ngl) {
    const auto got = run_single(m, params(ngl, BackendKind::Sim));
    EXPECT_TRUE(same_bits(ref, got)) << what << " -ngl " << ngl;
  }
}

TEST(DeviceSplit, StoriesEveryNglIsBitIdentical) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  auto m = Model::load(kStories.string());
  expect_every_ngl_bit_identical(*m, "stories260K");
}

TEST(DeviceSplit, TinyPresetsEveryNglIsBitIdentical) {
  for (const char* preset : {"tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2",
                             "tiny-gemma3", "tiny-phi3"}) {
    GenFile f(preset, "f32");
    auto m = Model::load(f.path);
    expect_every_ngl_bit_identical(*m, preset);
  }
  GenFile q(std::string("tiny-qwen2"), "q8_0");  // a quantised file, repacked weights included
  auto m = Model::load(q.path);
  expect_every_ngl_bit_identical(*m, "tiny-qwen2 q8_0");
}

// The device session really splits: the device ran nodes, the layers' K/V are placed by -ngl.
TEST(DeviceSplit, DeviceRunsTheOffloadedLayers) {
  GenFile f("tiny-llama", "f32");
  auto m = Model::load(f.path);
  Session s(*m, params(1, BackendKind::Sim));
  EXPECT_EQ(s.kv_backend(0), BackendKind::Sim);
  EXPECT_EQ(s.kv_backend(1), BackendKind::Cpu);
  const auto toks = random_tokens(4, m->hparams().n_vocab, 3);
  const int32_t last = 3;
  s.eval(toks, 0, std::span(&last, 1));
  const Graph* g = s.last_graph();
  ASSERT_NE(g, nullptr);
  size_t on_sim = 0;
  for (const Node& n : g->nodes()) on_sim += n.backend == BackendKind::Sim ? 1 : 0;
  EXPECT_GT(on_sim, 0u);
  EXPECT_EQ(g->node(g->find("attn_norm-0")).backend, BackendKind::Cpu);  // no RmsNorm on the sim
  EXPECT_EQ(g->node(g->find("attn_out-0")).backend, BackendKind::Sim);
  EXPECT_EQ(g->node(g->find("attn_out-1")).backend, BackendKind::Cpu);
  EXPECT_NE(s.mem_report().detail.find("device sim"), std::string::npos);
  EXPECT_THROW(Session(*m, params(-1, BackendKind::Sim)), Error);
}

// The RAM guard's footprint counts both K/V caches and every backend's arena.
TEST(DeviceSplit, FootprintCountsBothParts) {
  GenFile f("tiny-llama", "f32");
  auto m = Model::load(f.path);
  const SessionFootprint cpu = session_footprint(*m, params(0, BackendKind::Cpu));
  const SessionFootprint all = session_footprint(*m, params(2, BackendKind::Sim));
  const SessionFootprint half = session_footprint(*m, params(1, BackendKind::Sim));
  EXPECT_EQ(all.kv, cpu.kv);   // one cache, on the device
  EXPECT_GT(half.kv, cpu.kv);  // two caches, each with its null block and page rounding
  EXPECT_GT(half.compute, 0u);
  EXPECT_GE(half.compute + all.compute, cpu.compute);
}

// Several sequences over the paged cache split in two (the device's layers, the CPU's): forks,
// prefix reuse and a context shift give the CPU-only logits to the bit.
std::vector<float> run_paged(Model& m, const SessionParams& p) {
  SessionParams q = p;
  q.n_seq_max = 3;
  Session s(m, q);
  const int64_t V = m.hparams().n_vocab;
  const auto a = random_tokens(11, V, 21);
  std::vector<float> out;
  auto take = [&](std::span<const float> lg) { out.insert(out.end(), lg.begin(), lg.end()); };
  const int32_t last = 10;
  take(s.eval(a, 0, std::span(&last, 1)));  // seq 0 (blocks of 4: the last one partial)
  s.seq_cp(0, 1);                           // fork: copy-on-write of the partial block
  Batch b;
  b.add(5, 11, 0, true);
  b.add(9, 11, 1, true);
  take(s.decode(b));
  // Seq 2 reuses seq 0's full blocks (prefix cache), then decodes its own tail.
  const int64_t reused = s.reuse_prefix(2, a, 10);
  EXPECT_EQ(reused, 8);
  Batch c;
  for (int64_t i = reused; i < 11; ++i)
    c.add(a[static_cast<size_t>(i)], static_cast<int32_t>(i), 2, i == 10);
  take(s.decode(c));
  // Context shift on seq 1: drop 4 positions after the first 2, then decode on.
  s.seq_shift(1, 2, 4);
  Batch d;
  d.add(3, static_cast<int32_t>(s.seq_len(1)), 1, true);
  d.add(4, 12, 0, true);
  take(s.decode(d));
  s.kv_cache().check_invariants();
  return out;
}

TEST(DeviceSplit, PagedCacheAcrossBothBackends) {
  for (const char* preset : {"tiny-llama", "tiny-qwen2"}) {
    GenFile f(preset, "f32");
    auto m = Model::load(f.path);
    const auto ref = run_paged(*m, params(0, BackendKind::Cpu));
    for (int32_t ngl : {1, 2, 3}) {
      EXPECT_TRUE(same_bits(ref, run_paged(*m, params(ngl, BackendKind::Sim))))
          << preset << " -ngl " << ngl;
    }
  }
}

// After warm-up a device session's decode step allocates nothing (the sim's queue keeps its
// capacity; the staging buffers are planned once per graph).
TEST(DeviceSplit, DecodeStepsDoNotAllocate) {
  if (!kHeapCounting) GTEST_SKIP() << "allocation counting needs our operator new";
  GenFile f("tiny-llama", "f32");
  auto m = Model::load(f.path);
  Session s(*m, params(1, BackendKind::Sim));
  const auto toks = random_tokens(12, m->hparams().n_vocab, 5);
  const int32_t last = 0;
  s.eval(std::span(toks).first(4), 0, std::span(&last, 1));
  s.eval(std::span(toks).subspan(4, 1), 4, std::span(&last, 1));  // warm-up: the decode graph
  const uint64_t before = heap_allocations();
  for (int32_t i = 5; i < 12; ++i)
    s.eval(std::span(toks).subspan(static_cast<size_t>(i), 1), i, std::span(&last, 1));
  EXPECT_EQ(heap_allocations() - before, 0u);
}

// With the arena planner the staging windows are planned inside the arenas, so plans hold no
// buffer of their own and the graph cache keeps one graph per batch shape: sequences joining
// and leaving a device session's decode build no graph after warm-up.
TEST(DeviceSplit, BatchShapesReuseTheirGraphs) {
  GenFile f("tiny-llama", "f32");
  auto m = Model::load(f.path);
  Session s(*m, params(1, BackendKind::Sim, 2));
  const int32_t last = 0;
  const auto toks = random_tokens(3, m->hparams().n_vocab, 9);
  s.eval(toks, 0, std::span(&last, 1));  // seq 0
  s.seq_cp(0, 1);
  int32_t p0 = 3, p1 = 3;
  auto step = [&](bool both) {
    Batch b;
    b.add(1, p0++, 0, true);
    if (both) b.add(2, p1++, 1, true);
    s.decode(b);
  };
  step(true);
  step(false);  // warm-up: both shapes built once
  const uint64_t builds = s.n_graph_builds();
  for (int i = 0; i < 6; ++i) step(i % 2 == 0);
  EXPECT_EQ(s.n_graph_builds(), builds);
  EXPECT_TRUE(s.cache().allocator().can_swap_plans());
}

// Bug G1 (design §3.4): the scheduler's split-boundary sync is what makes a staging copy read
// the producer's result. stories260K's graph (contiguous KV) with every layer on the queued
// device: with the sync the logits are the CPU-only ones to the bit; with the test hook that
// removes the sync (and copies through host views) the CPU's head reads the device's outputs
// before they were computed — stale — and the logits differ.
std::vector<float> logits_of(Model& m, int32_t ngl, bool unsynced) {
  GraphParams gp;
  gp.n_tokens = 6;
  gp.n_outputs = 1;
  gp.cparams.n_ctx = 32;
  gp.cparams.type_k = gp.cparams.type_v = GgmlType::F32;
  Graph g = m.build_graph(gp);
  cpu::CpuBackend cpu;
  SimBackend sim([&cpu](const NodeArgs& a) { cpu.execute(a); },
                 [&cpu](const Node& n) { return cpu.supports(n) && sim_supports(n); });
  const AssignParams ap{BackendKind::Sim, ngl, static_cast<int32_t>(m.hparams().n_layer)};
  const Assignment a = assign_backends(g, ap, support_table(g, {&cpu, &sim}));
  apply_assignment(g, a);
  GraphAllocator alloc;
  alloc.set_backend(cpu);
  alloc.set_backend(sim);
  alloc.alloc_graph(g);
  Scheduler sched(alloc);
  sched.set_unsynced_staging_for_test(unsynced);
  const auto toks = random_tokens(6, m.hparams().n_vocab, 11);
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5}, out = {5};
  alloc.fill_input_i32(g, kInTokens, toks);
  alloc.fill_input_i32(g, kInPositions, pos);
  alloc.fill_input_i32(g, kInOutIds, out);
  sched.execute(g);
  std::vector<float> lg(static_cast<size_t>(m.hparams().n_vocab));
  alloc.copy_node_to_host(g.outputs()[0], lg.data(), lg.size() * sizeof(float));
  alloc.reset();
  return lg;
}

TEST(DeviceSplit, G1StagingWithoutTheSyncReadsStaleData) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  auto m = Model::load(kStories.string());
  const auto n_layer = static_cast<int32_t>(m->hparams().n_layer);
  const auto ref = logits_of(*m, 0, false);
  EXPECT_TRUE(same_bits(ref, logits_of(*m, n_layer, false)));
  EXPECT_FALSE(same_bits(ref, logits_of(*m, n_layer, true))) << "G1 not reproduced";
  // With nothing on the device there is nothing queued: the hook changes nothing.
  EXPECT_TRUE(same_bits(ref, logits_of(*m, 0, true)));
}

}  // namespace
}  // namespace minfer
