// minfer-test-libs: minfer_sched minfer_backend_sim
// The backend assignment pass (sched/assign.h) on small hand-built graphs with hand-made
// support tables: exact splits, KV placement, fallbacks and staging copies.
#include <gtest/gtest.h>

#include "backend/sim/sim_backend.h"
#include "sched/assign.h"

namespace minfer {
namespace {

constexpr SupportMask kCpu = support_bit(BackendKind::Cpu);
constexpr SupportMask kSim = support_bit(BackendKind::Sim);
constexpr SupportMask kBoth = kCpu | kSim;

// Weights need names (placement is by name) and data is never read here.
WeightRef w(const std::string& name, std::array<int64_t, 4> ne) {
  return WeightRef{name, GgmlType::F32, ne, nullptr, 0};
}

// A two-layer decoder in miniature: per layer norm -> matmul q -> rope -> kv store ->
// attention -> matmul out -> residual add; then the head (norm, output matmul).
Graph mini_model(int n_layer = 2) {
  Graph g;
  const int64_t E = 8, T = 2;
  const NodeId tok = g.input("inp_tokens", GgmlType::I32, {T, 1, 1, 1});
  const NodeId pos = g.input("inp_pos", GgmlType::I32, {T, 1, 1, 1});
  NodeId x = g.get_rows(g.weight(w("token_embd.weight", {E, 16, 1, 1})), tok, "inp_embd");
  for (int l = 0; l < n_layer; ++l) {
    const std::string s = std::to_string(l);
    const NodeId h = g.rms_norm(x, g.weight(w("blk." + s + ".attn_norm.weight", {E, 1, 1, 1})),
                                1e-5f, "attn_norm-" + s);
    NodeId q = g.matmul(g.weight(w("blk." + s + ".attn_q.weight", {E, E, 1, 1})), h, "Qcur-" + s);
    OpParams p;
    p.layer = l;
    p.n_ctx = 4;
    p.n_rot = 4;
    p.n_head = 2;
    p.n_head_kv = 2;
    p.head_dim = 4;
    q = g.view(q, {4, 2, T, 1}, 0, 0, "Qheads-" + s);
    q = g.rope(q, pos, p, "Qrope-" + s);
    const NodeId qf = g.view(q, {E, T, 1, 1}, 0, 0, "Qflat-" + s);
    const NodeId kv = g.kv_store(qf, qf, pos, p, "kv_store-" + s);
    const NodeId att = g.attention(q, kv, pos, p, "kqv-" + s);
    const NodeId attf = g.view(att, {E, T, 1, 1}, 0, 0, "kqv_flat-" + s);
    const NodeId o =
        g.matmul(g.weight(w("blk." + s + ".attn_output.weight", {E, E, 1, 1})), attf, "out-" + s);
    x = g.add(x, o, "l_out-" + s);
  }
  x = g.rms_norm(x, g.weight(w("output_norm.weight", {E, 1, 1, 1})), 1e-5f, "result_norm");
  const NodeId logits = g.matmul(g.weight(w("output.weight", {E, 16, 1, 1})), x, "result_output");
  g.mark_output(logits);
  return g;
}

std::vector<SupportMask> all(const Graph& g, SupportMask m) {
  return std::vector<SupportMask>(g.size(), m);
}

// The sim's default table shape: no RmsNorm, no GetRows.
std::vector<SupportMask> no_norm_on_sim(const Graph& g) {
  std::vector<SupportMask> t = all(g, kBoth);
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i)
    if (g.node(i).op == Op::RmsNorm || g.node(i).op == Op::GetRows) t[i] = kCpu;
  return t;
}

std::vector<std::pair<BackendKind, std::string>> splits_of(const Graph& g, const Assignment& a) {
  std::vector<std::pair<BackendKind, std::string>> out;
  for (const AssignSplit& s : a.splits)
    out.emplace_back(s.backend, g.node(s.first).name + ".." + g.node(s.last).name);
  return out;
}

using S = std::vector<std::pair<BackendKind, std::string>>;
constexpr BackendKind C = BackendKind::Cpu;
constexpr BackendKind D = BackendKind::Sim;

TEST(Assign, weight_layer_parses_names) {
  EXPECT_EQ(weight_layer("blk.0.attn_q.weight", 4), 0);
  EXPECT_EQ(weight_layer("blk.17.ffn_up.weight", 4), 17);
  EXPECT_EQ(weight_layer("output.weight", 4), 4);
  EXPECT_EQ(weight_layer("output_norm.weight", 4), 4);
  EXPECT_EQ(weight_layer("token_embd.weight", 4), -1);
  EXPECT_EQ(weight_layer("rope_freqs.weight", 4), -2);
  EXPECT_EQ(weight_layer("blk.x.attn_q.weight", 4), -2);
  EXPECT_EQ(weight_layer("blk.3", 4), -2);
}

TEST(Assign, ngl_zero_is_one_cpu_split) {
  const Graph g = mini_model();
  const Assignment a = assign_backends(g, AssignParams{D, 0, 2}, all(g, kBoth));
  EXPECT_EQ(splits_of(g, a), (S{{C, "inp_embd..result_output"}})) << a.to_string(g);
  EXPECT_EQ(a.n_cuts(), 0u);
  EXPECT_TRUE(a.staging.empty());
  EXPECT_EQ(a.kv_backend, (std::vector<BackendKind>{C, C}));
}

TEST(Assign, full_support_offloads_layers_with_one_cut_each_way) {
  const Graph g = mini_model();
  // -ngl 1: layer 0 on the device. The embedding (token_embd on the cpu) stays; the residual
  // add of layer 0 has no weight and is offloaded (no extra cut: ties go to the device).
  Assignment a = assign_backends(g, AssignParams{D, 1, 2}, all(g, kBoth));
  EXPECT_EQ(splits_of(g, a), (S{{C, "inp_embd..inp_embd"},
                                {D, "attn_norm-0..l_out-0"},
                                {C, "attn_norm-1..result_output"}}))
      << a.to_string(g);
  EXPECT_EQ(a.kv_backend, (std::vector<BackendKind>{D, C}));
  EXPECT_EQ(a.n_fallback, 0u);
  // Staged: the embedding and positions onto the device; l_out-0 back to the cpu.
  std::vector<std::string> st;
  for (const StagingEdge& e : a.staging) st.push_back(g.node(e.src).name);
  EXPECT_EQ(st, (std::vector<std::string>{"inp_embd", "inp_pos", "l_out-0"}));
  EXPECT_EQ(a.staging_bytes(), 8u * 2 * 4 + 2 * 4 + 8u * 2 * 4);
  // -ngl 3 > n_layer: the head too; everything after the embedding on the device.
  a = assign_backends(g, AssignParams{D, 3, 2}, all(g, kBoth));
  EXPECT_EQ(splits_of(g, a), (S{{C, "inp_embd..inp_embd"}, {D, "attn_norm-0..result_output"}}));
  // -ngl 2 = n_layer: the head stays on the cpu (llama.cpp's n_layer + 1 rule).
  a = assign_backends(g, AssignParams{D, 2, 2}, all(g, kBoth));
  EXPECT_EQ(splits_of(g, a), (S{{C, "inp_embd..inp_embd"},
                                {D, "attn_norm-0..l_out-1"},
                                {C, "result_norm..result_output"}}));
  EXPECT_EQ(a.kv_backend, (std::vector<BackendKind>{D, D}));
}

TEST(Assign, unsupported_norm_splits_inside_the_layer) {
  const Graph g = mini_model();
  const Assignment a = assign_backends(g, AssignParams{D, 2, 2}, no_norm_on_sim(g));
  // Each norm reads a device weight the device cannot run: a fallback to the cpu, a cut each
  // side. The head's norm and matmul are on the cpu (-ngl 2 = n_layer).
  EXPECT_EQ(splits_of(g, a), (S{{C, "inp_embd..attn_norm-0"},
                                {D, "Qcur-0..l_out-0"},
                                {C, "attn_norm-1..attn_norm-1"},
                                {D, "Qcur-1..l_out-1"},
                                {C, "result_norm..result_output"}}))
      << a.to_string(g);
  EXPECT_EQ(a.n_fallback, 2u);
  EXPECT_EQ(a.n_cuts(), 4u);
  // Views take the backend of the storage they window.
  EXPECT_EQ(a.backend[g.find("Qheads-0")], D);
  EXPECT_EQ(a.backend[g.find("kqv_flat-1")], D);
  // The weights keep their placement even where a cpu node reads them.
  EXPECT_EQ(a.backend[g.node(g.find("attn_norm-0")).src[1]], D);
  EXPECT_EQ(a.backend[g.node(g.find("result_norm")).src[1]], C);
}

TEST(Assign, flexible_nodes_take_the_fewest_cuts) {
  // cpu-only a, flexible b c, device-only d, flexible e, cpu-only f: b, c and e can each go
  // either way; the fewest cuts is 2 (c|d and d|e or e|f), ties to the device.
  Graph g;
  const NodeId x = g.input("x", GgmlType::F32, {4, 1, 1, 1});
  const NodeId a = g.add(x, x, "a");
  const NodeId b = g.add(a, a, "b");
  const NodeId c = g.add(b, b, "c");
  const NodeId d = g.add(c, c, "d");
  const NodeId e = g.add(d, d, "e");
  const NodeId f = g.add(e, e, "f");
  g.mark_output(f);
  std::vector<SupportMask> t = all(g, kBoth);
  t[a] = kCpu;
  t[d] = kSim;
  t[f] = kCpu;
  const Assignment as = assign_backends(g, AssignParams{D, 0, 0}, t);
  EXPECT_EQ(splits_of(g, as), (S{{C, "a..a"}, {D, "b..e"}, {C, "f..f"}})) << as.to_string(g);
  // Without a device-only node in the middle nothing is worth a cut.
  t[d] = kBoth;
  const Assignment none = assign_backends(g, AssignParams{D, 0, 0}, t);
  EXPECT_EQ(splits_of(g, none), (S{{C, "a..f"}}));
}

TEST(Assign, kv_stays_on_the_cpu_when_the_device_cannot_run_attention) {
  const Graph g = mini_model();
  std::vector<SupportMask> t = all(g, kBoth);
  t[g.find("kqv-0")] = kCpu;
  const Assignment a = assign_backends(g, AssignParams{D, 2, 2}, t);
  EXPECT_EQ(a.kv_backend, (std::vector<BackendKind>{C, D}));
  EXPECT_EQ(a.backend[g.find("kv_store-0")], C);
  EXPECT_EQ(a.backend[g.find("kv_store-1")], D);
}

TEST(Assign, apply_writes_the_backends_and_support_table_asks_the_backends) {
  Graph g = mini_model();
  SimBackend cpu([](const NodeArgs&) {}, {}, SimOptions{BackendKind::Cpu, false});
  SimBackend sim([](const NodeArgs&) {}, [](const Node& n) { return n.op != Op::RmsNorm; });
  const std::vector<SupportMask> t = support_table(g, {&cpu, &sim});
  EXPECT_EQ(t[g.find("attn_norm-0")], kCpu);
  EXPECT_EQ(t[g.find("Qcur-0")], kBoth);
  EXPECT_EQ(support_table(g, {&cpu, nullptr})[g.find("Qcur-0")], kCpu);
  const Assignment a = assign_backends(g, AssignParams{D, 1, 2}, t);
  apply_assignment(g, a);
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i)
    EXPECT_EQ(g.node(i).backend, a.backend[i]);
}

TEST(Assign, bad_inputs_are_errors) {
  const Graph g = mini_model();
  EXPECT_THROW(assign_backends(g, AssignParams{D, 0, 2}, std::vector<SupportMask>(3, kCpu)), Error);
  EXPECT_THROW(assign_backends(g, AssignParams{D, -1, 2}, all(g, kBoth)), Error);
  EXPECT_THROW(assign_backends(g, AssignParams{D, 1, 2}, all(g, 0)), Error);
}

}  // namespace
}  // namespace minfer
