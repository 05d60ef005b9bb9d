// minfer-test-libs: minfer_graph minfer_common
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "graph/graph.h"

namespace minfer {
namespace {

WeightRef f32_weight(std::string name, int64_t n_in, int64_t n_out) {
  WeightRef w;
  w.name = std::move(name);
  w.type = GgmlType::F32;
  w.ne = {n_in, n_out, 1, 1};
  w.n_bytes = static_cast<size_t>(n_in * n_out * 4);
  return w;
}

TEST(Graph, matmul_infers_shape) {
  Graph g;
  NodeId w = g.weight(f32_weight("w", 8, 16));
  NodeId x = g.input("x", GgmlType::F32, {8, 3, 2, 1});
  NodeId y = g.matmul(w, x, "y");
  EXPECT_EQ(g.node(y).ne, (std::array<int64_t, 4>{16, 3, 2, 1}));
  EXPECT_EQ(g.node(y).n_bytes(), 16u * 3 * 2 * 4);
  NodeId bad = g.input("bad", GgmlType::F32, {7, 1, 1, 1});
  EXPECT_THROW(g.matmul(w, bad, "z"), Error);
}

TEST(Graph, builders_infer_shapes) {
  Graph g;
  NodeId emb = g.weight(f32_weight("tok_emb", 32, 100));
  NodeId ids = g.input("token_ids", GgmlType::I32, {5, 1, 1, 1});
  NodeId pos = g.input("positions", GgmlType::I32, {5, 1, 1, 1});
  NodeId h = g.get_rows(emb, ids, "h");
  EXPECT_EQ(g.node(h).ne, (std::array<int64_t, 4>{32, 5, 1, 1}));
  NodeId nw = g.weight(f32_weight("norm", 32, 1));
  NodeId n = g.rms_norm(h, nw, 1e-5f, "n");
  EXPECT_EQ(g.node(n).ne, g.node(h).ne);
  NodeId wq = g.weight(f32_weight("wq", 32, 32));
  NodeId q = g.matmul(wq, n, "q");
  NodeId q3 = g.view(q, {8, 4, 5, 1}, 0, 0, "q3");
  EXPECT_EQ(g.node(q3).n_bytes(), 8u * 4 * 5 * 4);
  OpParams rp;
  rp.n_rot = 8;
  NodeId qr = g.rope(q3, pos, rp, "qr");
  EXPECT_EQ(g.node(qr).ne, g.node(q3).ne);
  OpParams kp;
  kp.layer = 0;
  kp.n_ctx = 64;
  kp.head_dim = 8;
  kp.n_head = 4;
  kp.n_head_kv = 2;
  NodeId wk = g.weight(f32_weight("wk", 32, 16));
  NodeId k = g.matmul(wk, n, "k");
  NodeId v = g.matmul(wk, n, "v");
  NodeId kv = g.kv_store(k, v, pos, kp, "kv");
  EXPECT_EQ(g.node(kv).ne, (std::array<int64_t, 4>{16, 64, 1, 1}));
  NodeId att = g.attention(qr, kv, pos, kp, "att");
  EXPECT_EQ(g.node(att).ne, (std::array<int64_t, 4>{32, 5, 1, 1}));
  NodeId b = g.weight(f32_weight("bias", 32, 1));
  NodeId hb = g.add(att, b, "hb");
  EXPECT_EQ(g.node(hb).ne, g.node(att).ne);
  NodeId bad_b = g.weight(f32_weight("bad", 5, 1));
  EXPECT_THROW(g.add(att, bad_b, "x"), Error);
  EXPECT_THROW(g.view(q, {8, 4, 6, 1}, 0, 0, "too_big"), Error);
  EXPECT_THROW(g.kv_store(k, q, pos, kp, "kv_bad"), Error);
  EXPECT_THROW(g.rope(q3, ids, OpParams{.n_rot = 7}, "odd_rot"), Error);
  g.mark_output(hb);
  g.mark_output(hb);
  EXPECT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.inputs(), (std::vector<NodeId>{ids, pos}));
  EXPECT_EQ(g.find("q3"), q3);
  EXPECT_EQ(g.find("nope"), kNoNode);
  EXPECT_NO_THROW(g.validate());
}

TEST(Graph, op_tables) {
  EXPECT_EQ(op_name(Op::QkvBiasRopeStore), "qkv_bias_rope_store");
  EXPECT_EQ(backend_name(BackendKind::Sim), "sim");
  EXPECT_TRUE(op_is_inplace(Op::Silu));
  EXPECT_TRUE(op_is_inplace(Op::Rope));
  EXPECT_TRUE(op_is_inplace(Op::QkvBiasRopeStore));
  EXPECT_FALSE(op_is_inplace(Op::Add));
  EXPECT_FALSE(op_is_inplace(Op::View));
}

TEST(Graph, topo_order_names_a_node_on_the_cycle) {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {4, 1, 1, 1});
  NodeId a = g.silu(x, "a");
  NodeId b = g.silu(a, "b");
  NodeId c = g.silu(b, "c");
  NodeId d = g.silu(c, "downstream");
  g.mark_output(d);
  EXPECT_EQ(g.topo_order().size(), 5u);
  g.set_src(a, 0, c);  // a -> b -> c -> a
  try {
    g.topo_order();
    FAIL() << "cycle not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    const std::string msg = e.what();
    // The named node must be on the cycle, not the downstream one.
    EXPECT_TRUE(msg.find("'a'") != std::string::npos || msg.find("'b'") != std::string::npos ||
                msg.find("'c'") != std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("downstream"), std::string::npos) << msg;
  }
  EXPECT_THROW(g.validate(), Error);
}

TEST(Graph, validate_rejects_forward_reference) {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {4, 1, 1, 1});
  NodeId a = g.silu(x, "a");
  NodeId b = g.silu(x, "b");
  g.set_src(a, 0, b);  // acyclic, but a now reads a node built after it
  EXPECT_NO_THROW(g.topo_order());
  EXPECT_THROW(g.validate(), Error);
}

TEST(Graph, validate_rejects_duplicate_input_names) {
  Graph g;
  g.input("positions", GgmlType::I32, {1, 1, 1, 1});
  g.input("positions", GgmlType::I32, {1, 1, 1, 1});
  EXPECT_THROW(g.validate(), Error);
}

TEST(Graph, validate_rejects_out_of_bounds_raw_view) {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {8, 1, 1, 1});
  Node v;
  v.op = Op::View;
  v.name = "raw_view";
  v.ne = {4, 1, 1, 1};
  v.src = {x};
  v.p.view_offset = 6;  // 6 + 4 > 8
  g.add(v);
  EXPECT_THROW(g.validate(), Error);
}

TEST(Graph, json_and_dot_dumps) {
  Graph g;
  NodeId x = g.input("x\"quoted", GgmlType::F32, {4, 2, 1, 1});
  NodeId s = g.silu(x, "s");
  g.node(s).backend = BackendKind::Sim;
  g.mark_output(s);
  auto j = nlohmann::json::parse(g.to_json());
  EXPECT_EQ(j["n_nodes"], 2);
  EXPECT_EQ(j["nodes"][1]["op"], "silu");
  EXPECT_EQ(j["nodes"][1]["backend"], "sim");
  EXPECT_EQ(j["nodes"][1]["src"][0], 0);
  EXPECT_EQ(j["outputs"][0], 1);
  const std::string dot = g.to_dot();
  EXPECT_NE(dot.find("n0 -> n1"), std::string::npos);
  EXPECT_NE(dot.find("x\\\"quoted"), std::string::npos);
}

}  // namespace
}  // namespace minfer
