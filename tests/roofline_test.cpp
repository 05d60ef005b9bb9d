// minfer-test-libs: minfer_model
// The decode roofline's pieces: bytes a step reads (model/traffic.h), the per-op-kind profile
// of the CPU executor (backend/cpu/profile.h) and the read-bandwidth probe (backend/cpu/membw.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/membw.h"
#include "backend/cpu/profile.h"
#include "backend/cpu/step_ab.h"
#include "model/session.h"
#include "model/traffic.h"
#include "tiny_model.h"

namespace minfer {
namespace {

using testing::load_tiny_model;
using testing::TinySpec;

SessionParams params(bool fuse) {
  SessionParams p;
  p.n_ctx = 64;
  p.n_threads = 2;
  p.fusion = FusionToggles{fuse, fuse, fuse};
  return p;  // f16 K/V, as minfer run
}

// Every weight byte of the file a one-token step must read: all tensors but the embedding
// table, plus one embedding row (and the whole table again when the output is tied to it).
uint64_t expected_weight_bytes(const Model& m, bool tied) {
  uint64_t all = 0, embd = 0, embd_row = 0;
  for (const auto& t : m.file().tensors()) {
    const uint64_t bytes = t.n_bytes;
    all += bytes;
    if (t.name == "token_embd.weight") {
      embd = bytes;
      embd_row = row_size(t.type, t.ne[0]);
    }
  }
  return all - embd + embd_row + (tied ? embd : 0);
}

TEST(StepTraffic, DecodeReadsEveryWeightOnceAndKvAtDepth) {
  for (const bool tied : {false, true}) {
    for (const bool fuse : {false, true}) {
      TinySpec s;
      s.arch = "qwen2";
      s.wtype = GgmlType::Q8_0;
      s.n_ff = 64;
  s.n_ff = 64;  // whole Q8_0 blocks for ffn_down
      s.tied = tied;
      auto l = load_tiny_model(s);
      Session sess(*l->model, params(fuse));
      const int32_t tok = 3;
      (void)sess.eval_last(std::span<const int32_t>(&tok, 1), 0);
      ASSERT_NE(sess.last_graph(), nullptr);
      const StepTraffic t0 = step_traffic(*sess.last_graph(), 1);
      const StepTraffic t9 = step_traffic(*sess.last_graph(), 10);
      EXPECT_EQ(t0.weights, expected_weight_bytes(*l->model, tied)) << tied << fuse;
      const int64_t kv_embd = s.n_embd / s.n_head * s.n_head_kv;
      const uint64_t row = 2 * row_size(GgmlType::F16, kv_embd);
      EXPECT_EQ(t0.kv, uint64_t(s.n_layer) * row);
      EXPECT_EQ(t9.kv, uint64_t(s.n_layer) * row * 10);
      EXPECT_GT(t0.activations, uint64_t(s.n_embd) * 4);
      EXPECT_EQ(t9.total(), t9.weights + t9.kv + t9.activations);
    }
  }
}

// A sliding-window layer reads at most its window's rows: tiny gemma2 (window 5 on layer 0 of
// 2) at depth 10 reads 5 + 10 rows.
TEST(StepTraffic, WindowedLayersReadOnlyTheirWindow) {
  TinySpec s;
  s.arch = "gemma2";
  auto l = load_tiny_model(s);
  Session sess(*l->model, params(true));
  const int32_t tok = 3;
  (void)sess.eval_last(std::span<const int32_t>(&tok, 1), 0);
  ASSERT_NE(sess.last_graph(), nullptr);
  const uint64_t row = 2 * row_size(GgmlType::F16, s.n_embd / s.n_head * s.n_head_kv);
  EXPECT_EQ(step_traffic(*sess.last_graph(), 10).kv, row * (5 + 10));
  EXPECT_EQ(step_traffic(*sess.last_graph(), 3).kv, row * (3 + 3));
}

TEST(OpProfile, CountsEveryKindOfADecodeStepAndStopsWhenDetached) {
  TinySpec s;
  s.arch = "qwen2";
  s.wtype = GgmlType::Q8_0;
  s.n_ff = 64;  // whole Q8_0 blocks for ffn_down
  auto l = load_tiny_model(s);
  Session sess(*l->model, params(true));
  int32_t tok = 3;
  (void)sess.eval_last(std::span<const int32_t>(&tok, 1), 0);  // warm-up
  cpu::OpProfile prof;
  sess.set_profile(&prof);
  constexpr int kSteps = 5;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= kSteps; ++i) (void)sess.eval_last(std::span<const int32_t>(&tok, 1), i);
  const auto wall = std::chrono::steady_clock::now() - t0;
  sess.set_profile(nullptr);
  auto calls = [&](cpu::OpKind k) { return prof.calls[static_cast<size_t>(k)]; };
  // Fused qwen2 layer: qkv, attn_out, gate-up, down.
  EXPECT_EQ(calls(cpu::OpKind::MatMul), uint64_t(kSteps * s.n_layer * 4));
  EXPECT_EQ(prof.matmul_calls[static_cast<size_t>(GgmlType::Q8_0)],
            calls(cpu::OpKind::MatMul));
  EXPECT_EQ(calls(cpu::OpKind::Logits), uint64_t(kSteps));
  EXPECT_EQ(calls(cpu::OpKind::Attention), uint64_t(kSteps * s.n_layer));
  EXPECT_EQ(calls(cpu::OpKind::Norm), uint64_t(kSteps * (2 * s.n_layer + 1)));
  EXPECT_EQ(calls(cpu::OpKind::Rope), uint64_t(kSteps * s.n_layer));  // fused bias+rope+store
  EXPECT_EQ(calls(cpu::OpKind::GetRows), uint64_t(kSteps));
  EXPECT_GT(calls(cpu::OpKind::Elementwise), 0u);
  const uint64_t wall_ns = uint64_t(std::chrono::nanoseconds(wall).count());
  EXPECT_GT(prof.total_ns(), 0u);
  EXPECT_LE(prof.total_ns(), wall_ns);  // the executor's share of the steps
  const cpu::OpProfile frozen = prof;
  (void)sess.eval_last(std::span<const int32_t>(&tok, 1), kSteps + 1);
  EXPECT_EQ(prof.total_ns(), frozen.total_ns());
  EXPECT_EQ(prof.calls, frozen.calls);
}

TEST(OpProfile, KindOfNodes) {
  Node n;
  n.op = Op::MatMul;
  n.name = "logits";
  EXPECT_EQ(cpu::op_kind_of(n), cpu::OpKind::Logits);
  n.name = "ffn_up-3";
  EXPECT_EQ(cpu::op_kind_of(n), cpu::OpKind::MatMul);
  n.op = Op::View;
  EXPECT_EQ(cpu::op_kind_of(n), cpu::OpKind::Count);
  n.op = Op::SwiGlu;
  EXPECT_EQ(cpu::op_kind_of(n), cpu::OpKind::Elementwise);
}

TEST(ReadBandwidth, ProbeReadsItsBufferAndReportsARate) {
  const cpu::ReadBandwidth bw = cpu::measure_read_bandwidth(2, 0.01, size_t{16} << 20);
  EXPECT_EQ(bw.threads, 2);
  EXPECT_GE(bw.passes, 3);
  EXPECT_EQ(bw.buffer_bytes % (2 * 4096), 0u);
  EXPECT_GT(bw.buffer_bytes, size_t{15} << 20);
  EXPECT_LE(bw.buffer_bytes, size_t{16} << 20);
  EXPECT_GT(bw.bytes_per_s, 1e8);  // any machine reads 16 MiB faster than 100 MB/s
  EXPECT_LT(bw.bytes_per_s, 1e13);
  // The median pass is one of the passes, so no faster than the best.
  EXPECT_GT(bw.median_bytes_per_s, 1e8);
  EXPECT_LE(bw.median_bytes_per_s, bw.bytes_per_s);
}

// A probe kept open: each burst appends its passes, in time order, and the summary covers them
// all.
TEST(ReadBandwidth, ProbeBurstsAppendTimedPasses) {
  cpu::ReadProbe probe(2, size_t{16} << 20);
  EXPECT_EQ(probe.summary().passes, 0);
  probe.burst(0.0, 3);
  ASSERT_EQ(probe.passes().size(), 3u);
  probe.burst(0.0, 2);
  ASSERT_EQ(probe.passes().size(), 5u);
  for (size_t i = 1; i < probe.passes().size(); ++i)
    EXPECT_LT(probe.passes()[i - 1].t_s, probe.passes()[i].t_s);
  const cpu::ReadBandwidth bw = probe.summary();
  EXPECT_EQ(bw.passes, 5);
  double best = 0;
  for (const cpu::ProbePass& p : probe.passes()) best = std::max(best, p.bytes_per_s);
  EXPECT_EQ(bw.bytes_per_s, best);
  EXPECT_LE(bw.median_bytes_per_s, bw.bytes_per_s);
  EXPECT_GT(bw.median_bytes_per_s, 1e8);
}

// The pairing as plain data: a host whose bandwidth halves between the first and the last run.
// Each run is held against the best pass of the bursts just before and just after it, never
// against a pass beyond a neighbouring run.
TEST(ReadBandwidth, EachRunPairsWithTheBestAdjacentPass) {
  // Bursts at t = 0-1, 11-12, 21-22, 31-32; runs at [2, 10], [13, 20], [23, 30].
  const std::vector<cpu::ProbePass> passes = {
      {0.5, 100}, {0.9, 90},   // before run 0: the host at its best
      {11.5, 60}, {11.8, 70},  // between runs 0 and 1
      {21.5, 50}, {21.9, 40},  // between runs 1 and 2
      {31.0, 45}, {31.5, 50},  // after run 2
  };
  const std::vector<cpu::TimedRun> runs = {{2, 10, 80}, {13, 20, 56}, {23, 30, 45}};
  const std::vector<cpu::PairedRun> p = cpu::pair_runs_with_probe(runs, passes);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].probe_bytes_per_s, 100);  // max(100, 90 | 60, 70)
  EXPECT_EQ(p[0].adjacent_passes, 4);
  EXPECT_DOUBLE_EQ(p[0].fraction, 0.8);
  EXPECT_EQ(p[1].probe_bytes_per_s, 70);  // max(60, 70 | 50, 40): not run 0's 100
  EXPECT_EQ(p[1].adjacent_passes, 4);
  EXPECT_DOUBLE_EQ(p[1].fraction, 0.8);
  EXPECT_EQ(p[2].probe_bytes_per_s, 50);  // max(50, 40 | 45, 50)
  EXPECT_DOUBLE_EQ(p[2].fraction, 0.9);
  // Against the run's best pass (100) the last run would read 45%: the yardstick of another
  // moment.
}

// Passes inside a run (none are taken there, but the function must not count them) and a run
// with nothing next to it: fraction 0, not a division by zero.
TEST(ReadBandwidth, PassesInsideARunOrNoneAdjacentDoNotPair) {
  const std::vector<cpu::ProbePass> passes = {{5, 1000}, {12, 40}};
  const std::vector<cpu::PairedRun> p =
      cpu::pair_runs_with_probe({{2, 10, 30}, {10, 11, 30}, {11, 12.5, 30}}, passes);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].adjacent_passes, 0);  // 5 is inside it, 12 beyond its neighbour
  EXPECT_EQ(p[0].fraction, 0);
  EXPECT_EQ(p[1].adjacent_passes, 0);
  EXPECT_EQ(p[2].adjacent_passes, 0);  // 12 is inside it
  EXPECT_EQ(p[2].probe_bytes_per_s, 0);
  const std::vector<cpu::PairedRun> q = cpu::pair_runs_with_probe({{1, 2, 30}}, passes);
  EXPECT_EQ(q[0].probe_bytes_per_s, 1000);  // one run: every pass on either side
  EXPECT_EQ(q[0].adjacent_passes, 2);
}

// The step-interleaved probe as plain data: P s P s ... s P on a host whose bandwidth falls from
// 100 to 50 GB/s during the pass, the decode at 80% of the passes either side of each step, and
// one step preempted (ten times its time). Each chunk is held against the mean of the two passes
// touching it; the median ignores the preempted step, which a mean would not.
TEST(ReadBandwidth, InterleavedStepsPairWithThePassesEitherSide) {
  const std::vector<double> pass = {100e9, 100e9, 90e9, 80e9, 70e9, 60e9, 50e9, 50e9, 50e9, 50e9};
  const double bytes = 1e8;
  std::vector<double> step_ns;
  for (size_t j = 0; j + 1 < pass.size(); ++j)
    step_ns.push_back(bytes * 1e9 / (0.8 * 0.5 * (pass[j] + pass[j + 1])));
  step_ns[4] *= 10;
  const cpu::InterleavedRoofline r = cpu::summarize_interleaved(step_ns, 1, pass, bytes);
  EXPECT_EQ(r.steps_per_pass, 1);
  ASSERT_EQ(r.pairs, 9);
  ASSERT_EQ(r.ratios.size(), 9u);
  EXPECT_NEAR(r.ratios[0], 0.8, 1e-12);
  EXPECT_NEAR(r.ratios[4], 0.08, 1e-12);
  EXPECT_NEAR(r.ratios[8], 0.8, 1e-12);
  EXPECT_NEAR(r.ratio_median, 0.8, 1e-12);
  EXPECT_NEAR(r.ratio_q1, 0.8, 1e-12);
  EXPECT_NEAR(r.ratio_q3, 0.8, 1e-12);
  EXPECT_EQ(r.probe_median_bytes_per_s, 65e9);  // sorted: 50 50 50 50 (60 70) 80 90 100 100
  double total = 0;
  for (double ns : step_ns) total += ns;
  EXPECT_NEAR(r.steps_per_s, 9e9 / total, 1e-9);
  EXPECT_EQ(r.first_step_ratio_median, 0);  // one step per chunk: no second step to compare
  // Against one yardstick for the whole pass (its best pass), the same steps read 40-80%.
  EXPECT_NEAR(bytes * 1e9 / step_ns[8] / 100e9, 0.4, 1e-12);
}

// K = 3 steps per pass over 8 steps: chunks of 3, 3 and 2 between four passes; a chunk's rate is
// its steps' bytes over their summed time, and the first step after each pass (the cold one) is
// compared with the median of the rest of its chunk.
TEST(ReadBandwidth, InterleavedChunksAndTheFirstStepAfterAPass) {
  const std::vector<double> step_ns = {11, 10, 10, 12, 10, 10, 22, 20};
  const std::vector<double> pass = {1e9, 3e9, 2e9, 2e9};  // 10 bytes per step: 1 GB/s = 10 ns
  const cpu::InterleavedRoofline r = cpu::summarize_interleaved(step_ns, 3, pass, 10.0);
  ASSERT_EQ(r.pairs, 3);
  // 30 bytes in 31 ns (GB/s) against (1 + 3) / 2; 30 in 32 against 2.5; 20 in 42 against 2.
  EXPECT_NEAR(r.ratios[0], 30.0 / 31.0 / 2.0, 1e-12);
  EXPECT_NEAR(r.ratios[1], 30.0 / 32.0 / 2.5, 1e-12);
  EXPECT_NEAR(r.ratios[2], 20.0 / 42.0 / 2.0, 1e-12);
  EXPECT_NEAR(r.ratio_median, 30.0 / 32.0 / 2.5, 1e-12);  // 0.238, 0.375, 0.484
  EXPECT_NEAR(r.steps_per_s, 8e9 / 105.0, 1e-6);
  EXPECT_NEAR(r.first_step_ratio_median, 1.1, 1e-12);  // 1.1, 1.2, 1.1
  EXPECT_EQ(cpu::summarize_interleaved({}, 3, {}, 10.0).pairs, 0);
}

// bench/roofline's tables from canned raw figures (tests/data/roofline_raw.json, the format its
// --json writes): the interleaved column pools every run's chunk ratios (median 81.0 of nine,
// not the median 81.5 or mean 84.0 of the runs' medians) and decides the ">= 80%" column; the
// burst-paired mean stays beside it; a binary without the interleaved pass falls back to it.
TEST(RooflineScript, PoolsTheChunksOfEveryRunForTheEightyPercentColumn) {
  if (std::system("python3 -c pass > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const std::string cmd = std::string("python3 ") + MINFER_SOURCE_DIR +
                          "/bench/roofline --from-json " + MINFER_TEST_DATA_DIR +
                          "/roofline_raw.json 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(f), 0) << out;
  EXPECT_NE(out.find("| tg128 t/s |"), std::string::npos) << out;
  EXPECT_NE(out.find("| avx2 | 2 | 80.00 ± 10.00 | 506.1 | 50.0 (45.0) | 81.7% (70.0 - 90.0) | "
                     "81.0% (78.0 - 95.0, 9 chunks; 75.0 - 95.5) | yes |"),
            std::string::npos)
      << out;
  // A mean of 87.5% but half the chunks under 70%: below the line.
  EXPECT_NE(out.find("| 87.5% (85.0 - 90.0) | 70.0% (65.0 - 75.0, 5 chunks; 65.0 - 77.0) | no |"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("| 83.0% (82.0 - 84.0) | - | yes (mean) |"), std::string::npos) << out;
}

// Step A/B (cpu/step_ab.h): ABBA order, one step of each variant per pair.
TEST(StepAb, AbbaOrderPutsOneOfEachInEveryPair) {
  const int want[] = {0, 1, 1, 0, 0, 1, 1, 0, 0, 1};
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(cpu::ab_variant_of_step(i), want[i]) << i;
  for (int64_t k = 0; k < 50; ++k)
    EXPECT_EQ(cpu::ab_variant_of_step(2 * k) + cpu::ab_variant_of_step(2 * k + 1), 1) << k;
  EXPECT_EQ(cpu::ab_variant(), 0);
  cpu::set_ab_variant(1);
  EXPECT_EQ(cpu::ab_variant(), 1);
  cpu::set_ab_variant(0);
}

// B / A per pair; a steady drift of the host (every step 1% slower than the one before)
// cancels, where comparing the first half of a run with the second would not.
TEST(StepAb, SummaryIsBOverAPerPairAndADriftCancels) {
  std::vector<double> flat, drift;
  for (int64_t i = 0; i < 41; ++i) {  // odd: the last step is dropped
    const double v = cpu::ab_variant_of_step(i) == 1 ? 0.9 : 1.0;
    flat.push_back(10e6 * v);
    drift.push_back(10e6 * v * (1.0 + 0.01 * double(i)));
  }
  const cpu::AbSummary f = cpu::summarize_ab(flat);
  EXPECT_EQ(f.pairs, 20);
  EXPECT_DOUBLE_EQ(f.ratio_median, 0.9);
  EXPECT_DOUBLE_EQ(f.ratio_q1, 0.9);
  EXPECT_DOUBLE_EQ(f.ratio_q3, 0.9);
  EXPECT_DOUBLE_EQ(f.a_median_ns, 10e6);
  EXPECT_DOUBLE_EQ(f.b_median_ns, 9e6);
  const cpu::AbSummary d = cpu::summarize_ab(drift);
  EXPECT_NEAR(d.ratio_median, 0.9, 0.9 * 1e-3);
  EXPECT_LT(d.ratio_q1, 0.9);  // pairs with B first read low, B second high
  EXPECT_GT(d.ratio_q3, 0.9);
  EXPECT_EQ(cpu::summarize_ab({1.0}).pairs, 0);
  EXPECT_EQ(cpu::summarize_ab({}).ratio_median, 0.0);
}

}  // namespace
}  // namespace minfer
