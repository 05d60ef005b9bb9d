// minfer-test-libs: minfer_sched minfer_backend_sim minfer_alloc minfer_graph minfer_common
#include <gtest/gtest.h>

#include "alloc/graph_cache.h"
#include "memsys_test_util.h"
#include "model/graph_params.h"
#include "sched/scheduler.h"

namespace minfer {
namespace {

using testing::Backends;
using testing::i32_bits;
using testing::RefKv;

constexpr int64_t kEmbd = 16, kVocab = 12, kHd = 4, kHeads = 2, kHeadsKv = 1, kCtx = 32;

// A one-layer decoder with the real shapes' structure: embeddings, norm, q/k/v, rope, KV store,
// attention, output projection, residual, logits. fused = one qkv matmul + the fused
// bias/rope/store epilogue (the qkv fusion toggle changes the topology).
struct TinyModel {
  std::vector<std::vector<float>> data;
  WeightRef w(const std::string& name, int64_t n0, int64_t n1, float scale) {
    data.emplace_back(static_cast<size_t>(n0 * n1));
    auto& d = data.back();
    for (size_t i = 0; i < d.size(); ++i)
      d[i] = scale * static_cast<float>((i * 7919) % 23) / 23.0f - scale / 2;
    WeightRef r;
    r.name = name;
    r.ne = {n0, n1, 1, 1};
    r.data = reinterpret_cast<const uint8_t*>(d.data());
    r.n_bytes = d.size() * 4;
    return r;
  }
  WeightRef emb, norm, wq, wk, wv, wqkv, bias, wo, out;
  TinyModel() {
    data.reserve(16);
    emb = w("tok_embd", kEmbd, kVocab, 2.0f);
    norm = w("norm", kEmbd, 1, 1.0f);
    wq = w("wq", kEmbd, kHd * kHeads, 1.0f);
    wk = w("wk", kEmbd, kHd * kHeadsKv, 1.0f);
    wv = w("wv", kEmbd, kHd * kHeadsKv, 1.0f);
    // wqkv = [wq | wk | wv] along n_out: the same rows, so fused == unfused exactly.
    data.emplace_back();
    for (const WeightRef* p : {&wq, &wk, &wv}) {
      const auto* f = reinterpret_cast<const float*>(p->data);
      data.back().insert(data.back().end(), f, f + p->n_bytes / 4);
    }
    wqkv.name = "wqkv";
    wqkv.ne = {kEmbd, kHd * (kHeads + 2 * kHeadsKv), 1, 1};
    wqkv.data = reinterpret_cast<const uint8_t*>(data.back().data());
    wqkv.n_bytes = data.back().size() * 4;
    bias = w("bias", kHd * (kHeads + 2 * kHeadsKv), 1, 0.0f);  // zero: keeps fused == unfused
    wo = w("wo", kHd * kHeads, kEmbd, 1.0f);
    out = w("output", kEmbd, kVocab, 1.0f);
  }

  Graph build(const GraphParams& gp) const {
    const int64_t nt = gp.n_tokens;
    Graph g;
    NodeId ids = g.input("token_ids", GgmlType::I32, {nt, 1, 1, 1});
    NodeId pos = g.input("positions", GgmlType::I32, {nt, 1, 1, 1});
    NodeId h = g.get_rows(g.weight(emb), ids, "h");
    NodeId n = g.rms_norm(h, g.weight(norm), 1e-5f, "norm");
    OpParams p;
    p.layer = 0;
    p.n_ctx = gp.cparams.n_ctx;
    p.head_dim = kHd;
    p.n_head = kHeads;
    p.n_head_kv = kHeadsKv;
    p.n_rot = kHd;
    p.scale = 0.5f;
    NodeId att;
    if (gp.cparams.fusion.qkv) {
      NodeId qkv = g.matmul(g.weight(wqkv), n, "qkv");
      NodeId e = g.qkv_bias_rope_store(qkv, g.weight(bias), pos, p, "qkv_epilogue");
      att = g.attention(e, e, pos, p, "att");  // wired to the epilogue: qkv has one consumer
    } else {
      NodeId q = g.view(g.matmul(g.weight(wq), n, "q"), {kHd, kHeads, nt, 1}, 0, 0, "q3");
      NodeId k = g.view(g.matmul(g.weight(wk), n, "k"), {kHd, kHeadsKv, nt, 1}, 0, 0, "k3");
      NodeId v = g.matmul(g.weight(wv), n, "v");
      NodeId qr = g.rope(q, pos, p, "q_rope");
      NodeId kr = g.rope(k, pos, p, "k_rope");
      NodeId st = g.kv_store(kr, v, pos, p, "kv_store");
      att = g.attention(qr, st, pos, p, "att");
    }
    NodeId o = g.matmul(g.weight(wo), att, "attn_out");
    NodeId h2 = g.add(o, h, "residual");
    NodeId last =
        gp.n_outputs < nt ? g.view(h2, {kEmbd, 1, 1, 1}, (nt - 1) * kEmbd, 0, "last") : h2;
    g.mark_output(g.matmul(g.weight(out), last, "logits"));
    return g;
  }
};

GraphParams params(int64_t n_tokens, bool fused) {
  GraphParams p;
  p.n_tokens = n_tokens;
  p.n_outputs = 1;
  p.cparams.n_ctx = kCtx;
  p.cparams.fusion.qkv = fused;
  return p;
}

// One forward call the way the engine does it: reuse or rebuild, fill, execute.
std::vector<float> forward(GraphCache<GraphParams>& cache, Scheduler& sched, const TinyModel& m,
                           const GraphParams& gp, const std::vector<int32_t>& ids, int32_t n_past) {
  if (!cache.try_reuse(gp)) cache.replace_graph(m.build(gp), gp);
  Graph& g = *cache.graph();
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = n_past + static_cast<int32_t>(i);
  cache.allocator().fill_input_i32(g, "token_ids", ids);
  cache.allocator().fill_input_i32(g, "positions", pos);
  sched.execute(g);
  auto s = cache.allocator().node_f32(g.outputs()[0]);
  return {s.begin(), s.end()};
}

std::vector<float> reference(const TinyModel& m, const GraphParams& gp, RefKv& kv,
                             const std::vector<int32_t>& ids, int32_t n_past) {
  Graph g = m.build(gp);
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = n_past + static_cast<int32_t>(i);
  return testing::reference_eval(g, {{"token_ids", i32_bits(ids)}, {"positions", i32_bits(pos)}},
                                 kv)
      .begin()
      ->second;
}

TEST(Cache, reuse_only_while_params_equal) {
  TinyModel m;
  Backends be;  // declared first: backends outlive the cache's allocator
  GraphCache<GraphParams> cache;
  be.attach(cache.allocator());
  GraphParams p = params(1, true);
  EXPECT_FALSE(cache.try_reuse(p));
  cache.replace_graph(m.build(p), p);
  EXPECT_TRUE(cache.try_reuse(p));
  EXPECT_TRUE(cache.try_reuse(params(1, true)));
  auto changed = [&](auto mutate) {
    GraphParams q = p;
    mutate(q);
    return !cache.try_reuse(q);
  };
  EXPECT_TRUE(changed([](GraphParams& q) { q.n_tokens = 2; }));
  EXPECT_TRUE(changed([](GraphParams& q) { q.n_outputs = 2; }));
  EXPECT_TRUE(changed([](GraphParams& q) { q.type = GraphType::Embeddings; }));
  EXPECT_TRUE(changed([](GraphParams& q) { q.cparams.n_ctx = 64; }));
  EXPECT_TRUE(changed([](GraphParams& q) { q.cparams.fusion.ffn = false; }));
  EXPECT_TRUE(changed([](GraphParams& q) { q.cparams.backend = BackendKind::Sim; }));
  EXPECT_TRUE(changed([](GraphParams& q) { q.weights_version = 7; }));
  EXPECT_EQ(cache.n_builds(), 1u);
}

TEST(Cache, allocator_survives_rebuild) {
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused qkv" : "unfused");
    TinyModel m;
    Backends be;
    GraphCache<GraphParams> cache;
    be.attach(cache.allocator());
    Scheduler sched(cache.allocator());
    RefKv ref_kv;
    // Prefill 5 tokens, then decode 4 single tokens: one rebuild (5 -> 1), then reuse.
    const std::vector<int32_t> prompt{3, 1, 4, 1, 5};
    auto got = forward(cache, sched, m, params(5, fused), prompt, 0);
    EXPECT_EQ(got, reference(m, params(5, fused), ref_kv, prompt, 0));
    const KvPair kv0 = *cache.allocator().kv_pair(0);
    const std::vector<float> k_after_prefill(
        reinterpret_cast<const float*>(cache.allocator().host_ptr(kv0.k)),
        reinterpret_cast<const float*>(cache.allocator().host_ptr(kv0.k)) + 5 * kHd * kHeadsKv);
    int32_t n_past = 5;
    for (int32_t tok : {9, 2, 6, 5}) {
      got = forward(cache, sched, m, params(1, fused), {tok}, n_past);
      // Decode attention reads the prefix the prefill wrote: only correct if KV survived.
      EXPECT_EQ(got, reference(m, params(1, fused), ref_kv, {tok}, n_past)) << "n_past " << n_past;
      ++n_past;
    }
    EXPECT_EQ(cache.n_builds(), 2u);  // n_past is not a param: decode steps reuse
    EXPECT_EQ(cache.n_reuses(), 3u);
    const KvPair kv1 = *cache.allocator().kv_pair(0);
    EXPECT_EQ(kv1.k, kv0.k);  // the same regions, never moved, never freed
    EXPECT_EQ(kv1.v, kv0.v);
    EXPECT_FALSE(be.cpu.pool().is_free(kv0.k.id));
    EXPECT_FALSE(be.cpu.pool().is_free(kv0.v.id));
    const auto* k = reinterpret_cast<const float*>(cache.allocator().host_ptr(kv1.k));
    EXPECT_EQ(std::vector<float>(k, k + k_after_prefill.size()), k_after_prefill);
    EXPECT_EQ(cache.allocator().kv_bytes(), 2u * kHd * kHeadsKv * kCtx * 4);
  }
}

TEST(Cache, fusion_toggle_rebuilds_with_the_same_kv_and_equal_logits) {
  TinyModel m;
  Backends be;  // declared first: backends outlive the cache's allocator
  GraphCache<GraphParams> cache;
  be.attach(cache.allocator());
  Scheduler sched(cache.allocator());
  const std::vector<int32_t> prompt{7, 3, 11};
  auto unfused = forward(cache, sched, m, params(3, false), prompt, 0);
  const KvPair kv = *cache.allocator().kv_pair(0);
  // Same positions again through the fused graph: rewrites identical K/V, same logits.
  auto fused = forward(cache, sched, m, params(3, true), prompt, 0);
  EXPECT_EQ(cache.n_builds(), 2u);
  EXPECT_EQ(cache.allocator().kv_pair(0)->k, kv.k);
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], unfused[i], 1e-5f);
  // The fused epilogue aliased the qkv matmul in place (its only consumer).
  const Graph& g = *cache.graph();
  EXPECT_EQ(cache.allocator().plan().alias_of(g.find("qkv_epilogue")), g.find("qkv"));
}

TEST(Cache, larger_kv_for_the_same_allocator_is_an_error) {
  TinyModel m;
  Backends be;  // declared first: backends outlive the cache's allocator
  GraphCache<GraphParams> cache;
  be.attach(cache.allocator());
  GraphParams p = params(1, false);
  cache.replace_graph(m.build(p), p);
  p.cparams.n_ctx = kCtx * 2;
  EXPECT_THROW(cache.replace_graph(m.build(p), p), Error);
  EXPECT_EQ(cache.graph(), nullptr);
  EXPECT_FALSE(cache.try_reuse(p));
}

}  // namespace
}  // namespace minfer
