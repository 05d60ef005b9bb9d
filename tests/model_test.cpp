// minfer-test-libs: minfer_model minfer_gen minfer_heap_counter
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>

#include <filesystem>
#include <memory>

#include "common/error.h"
#include "common/quant.h"
#include "gen_file_util.h"
#include "gguf/gguf.h"
#include "heap_counter/heap_counter.h"
#include "model/model.h"
#include "model/session.h"
#include "numeric_test_util.h"
#include "reference_forward.h"
#include "sample/sampler.h"
#include "tiny_model.h"

namespace minfer {
namespace {

using test::max_abs_diff;
using testing::load_tiny_model;
using testing::TinySpec;

std::string error_of(const TinySpec& s) {
  try {
    load_tiny_model(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelHParams, ReadsTinyLlama) {
  auto l = load_tiny_model({});
  const HParams& h = l->model->hparams();
  EXPECT_EQ(h.arch, Arch::Llama);
  EXPECT_EQ(h.n_embd, 32);
  EXPECT_EQ(h.n_layer, 2);
  EXPECT_EQ(h.n_head, 4);
  EXPECT_EQ(h.n_head_kv, 2);
  EXPECT_EQ(h.head_dim, 8);
  EXPECT_EQ(h.n_rot, 8);
  EXPECT_EQ(h.n_vocab, 64);
  EXPECT_EQ(h.n_ctx_train, 256);
  EXPECT_EQ(h.rope_mode, RopeMode::Normal);
  EXPECT_EQ(h.kv_bytes(100), 2u * 2 * 16 * 100 * 4);
  EXPECT_FALSE(l->model->weights().tied_output);
}

// The load-time repack reports its progress (the CLI draws it on a terminal): rising source
// bytes up to every projection's bytes, once per matrix.
// A tied embedding (tiny-qwen2) loses its mapped pages with the output projection's repack, so
// GetRows reads its rows from the file instead (Model::embedding_row_source): the bytes are the
// tensor's, and a decode gathers the right rows (its logits match a model that never repacked).
TEST(ModelPacked, TiedEmbeddingRowsComeFromTheFile) {
  test::GenFile f("tiny-qwen2", "q8_0");
  auto m = Model::load(f.path);
  ASSERT_TRUE(m->weights().tied_output);
  EXPECT_FALSE(m->embedding_row_source().read);  // nothing released before the repack
  SessionParams p;
  p.n_ctx = 64;
  Session s(*m, p);
  if (m->packed()->find(m->weights().output.data) == nullptr)
    GTEST_SKIP() << "no load-time layout for q8_0 at this SIMD level";
  const cpu::RowSource src = m->embedding_row_source();
  ASSERT_TRUE(src.read);
  gguf::File fresh = gguf::File::open(f.path);
  const gguf::TensorInfo* t = fresh.find_tensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(src.begin, static_cast<const void*>(m->weights().tok_embd.data));
  ASSERT_EQ(src.bytes, t->n_bytes);
  std::vector<uint8_t> got(t->n_bytes);
  src.read(src.begin, got.data(), got.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), t->data));

  auto plain = Model::load(f.path);
  SessionParams q = p;
  q.repack_weights = false;
  Session ref(*plain, q);
  EXPECT_FALSE(plain->embedding_row_source().read);
  std::vector<int32_t> toks = {5, 17, 3, 60, 17};
  for (int32_t& t : toks) t %= static_cast<int32_t>(m->hparams().n_vocab);
  const std::vector<int32_t> rows = {0, 1, 2, 3, 4};
  const auto a = s.eval(toks, 0, rows);
  const std::vector<float> la(a.begin(), a.end());
  const auto b = ref.eval(toks, 0, rows);
  ASSERT_EQ(la.size(), b.size());
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], b[i], 1e-3f) << "logit " << i;
}

TEST(ModelPacked, RepackReportsProgressOverEveryProjection) {
  auto l = load_tiny_model({});  // f32: nothing to pack, every matrix still counted
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  l->model->prepare_packed(cpu::SimdLevel::kBest,
                           [&](uint64_t done, uint64_t total) { seen.emplace_back(done, total); });
  const auto& w = l->model->weights();
  uint64_t want = w.output.n_bytes;
  for (const LayerWeights& lw : w.layers)
    for (const WeightRef* r : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.ffn_gate, &lw.ffn_up,
                               &lw.ffn_down})
      want += r->n_bytes;
  ASSERT_EQ(seen.size(), 7 * w.layers.size() + 1);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].second, want);
    if (i > 0) {
      EXPECT_GT(seen[i].first, seen[i - 1].first);
    }
  }
  EXPECT_EQ(seen.back().first, want);
}

TEST(ModelHParams, QwenUsesNeoxRope) {
  TinySpec s;
  s.arch = "qwen2";
  EXPECT_EQ(load_tiny_model(s)->model->hparams().rope_mode, RopeMode::Neox);
  s.arch = "qwen3";
  EXPECT_EQ(load_tiny_model(s)->model->hparams().rope_mode, RopeMode::Neox);
}

TEST(ModelHParams, MissingKeyNamesFileAndKey) {
  TinySpec s;
  s.skip_key = "llama.block_count";
  const std::string msg = error_of(s);
  EXPECT_NE(msg.find("tiny.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama.block_count"), std::string::npos) << msg;
}

TEST(ModelHParams, UnknownArchIsUnsupported) {
  TinySpec s;
  s.arch = "gpt2";
  const std::string msg = error_of(s);
  EXPECT_NE(msg.find("gpt2"), std::string::npos) << msg;
}

// Issue #15: hostile hyperparameters are refused with the key and value before any product
// (n_q(), n_kv_embd(), KV bytes) or allocation uses them.
TEST(ModelHParams, HostileValuesAreRefusedNamingKeyAndValue) {
  struct Case {
    std::string key;
    gguf::Value value;
    std::string needle;
  };
  const std::vector<Case> cases = {
      // 2^62: n_head x key_length overflowed int64 in n_q() (UBSan).
      {"llama.attention.key_length", gguf::Value::u64(1ull << 62), "4611686018427387904"},
      {"llama.attention.key_length", gguf::Value::u64(1ull << 21), "key_length"},
      {"llama.embedding_length", gguf::Value::u64(1ull << 40), "embedding_length"},
      {"llama.feed_forward_length", gguf::Value::u64(1ull << 40), "feed_forward_length"},
      {"llama.attention.head_count", gguf::Value::u64(1ull << 40), "head_count"},
      {"llama.context_length", gguf::Value::u64(1ull << 40), "context_length"},
      {"llama.rope.dimension_count", gguf::Value::u64(1ull << 40), "rope.dimension_count"},
      {"llama.rope.freq_base", gguf::Value::f32(INFINITY), "rope.freq_base"},
      {"llama.rope.freq_base", gguf::Value::f32(NAN), "rope.freq_base"},
      {"llama.rope.freq_base", gguf::Value::f32(-1.0f), "rope.freq_base"},
      {"llama.rope.freq_base", gguf::Value::f32(0.0f), "rope.freq_base"},
      {"llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(INFINITY), "epsilon"},
      {"llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(NAN), "epsilon"},
  };
  for (const Case& c : cases) {
    TinySpec s;
    s.overrides.emplace_back(c.key, c.value);
    const std::string msg = error_of(s);
    EXPECT_NE(msg.find("tiny.gguf"), std::string::npos) << c.key << ": " << msg;
    EXPECT_NE(msg.find(c.key), std::string::npos) << c.key << ": " << msg;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.key << ": " << msg;
  }
  // Each factor within bounds but the product too wide: 2^16 heads x 2^20 head dim.
  TinySpec s;
  s.overrides.emplace_back("llama.attention.head_count", gguf::Value::u32(1u << 16));
  s.overrides.emplace_back("llama.attention.head_count_kv", gguf::Value::u32(1u << 16));
  s.overrides.emplace_back("llama.attention.key_length", gguf::Value::u32(1u << 20));
  const std::string msg = error_of(s);
  EXPECT_NE(msg.find("n_q"), std::string::npos) << msg;
}

// Issue #15: block_count sized the per-layer vector before any tensor was looked up (10^7 took
// over 6 GB, 10^8 aborted). Now checked against the tensor table first.
TEST(ModelHParams, BlockCountBeyondTheTensorTableIsRefused) {
  for (uint32_t n : {3u, 10000000u, 100000000u, 4000000000u}) {
    TinySpec s;
    s.overrides.emplace_back("llama.block_count", gguf::Value::u32(n));
    const std::string msg = error_of(s);
    EXPECT_NE(msg.find("llama.block_count"), std::string::npos) << n << ": " << msg;
    EXPECT_NE(msg.find(std::to_string(n)), std::string::npos) << n << ": " << msg;
  }
}

TEST(ModelHParams, KvBytesOverflowIsAnError) {
  auto l = load_tiny_model({});
  EXPECT_THROW(l->model->hparams().kv_bytes(int64_t{1} << 62), Error);
}

TEST(ModelWeights, WrongShapeNamesTensorAndShapes) {
  TinySpec s;
  s.bad_tensor = "blk.1.attn_k.weight";
  const std::string msg = error_of(s);
  EXPECT_NE(msg.find("blk.1.attn_k.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[32, 16]"), std::string::npos) << msg;  // expected
  EXPECT_NE(msg.find("[32, 17]"), std::string::npos) << msg;  // actual
}

TEST(ModelWeights, TiedOutputUsesEmbedding) {
  TinySpec s;
  s.tied = true;
  auto l = load_tiny_model(s);
  const ModelWeights& w = l->model->weights();
  EXPECT_TRUE(w.tied_output);
  EXPECT_EQ(w.output.data, w.tok_embd.data);
}

TEST(ModelWeights, Qwen2HasBiasesQwen3HasNorms) {
  TinySpec s;
  s.arch = "qwen2";
  auto q2 = load_tiny_model(s);
  EXPECT_TRUE(has_data(q2->model->weights().layers[0].bq));
  EXPECT_FALSE(has_data(q2->model->weights().layers[0].q_norm));
  s.arch = "qwen3";
  auto q3 = load_tiny_model(s);
  EXPECT_FALSE(has_data(q3->model->weights().layers[0].bq));
  EXPECT_TRUE(has_data(q3->model->weights().layers[0].k_norm));
}

GraphParams params(int64_t n_tokens, int64_t n_out, int64_t n_ctx, FusionToggles f) {
  GraphParams p;
  p.n_tokens = n_tokens;
  p.n_outputs = n_out;
  p.cparams.n_ctx = n_ctx;
  p.cparams.fusion = f;
  return p;
}

int count_op(const Graph& g, Op op) {
  int n = 0;
  for (const auto& nd : g.nodes()) n += nd.op == op;
  return n;
}

TEST(ModelGraph, ShapesAndInputs) {
  auto l = load_tiny_model({});
  GraphParams gs = params(7, 2, 64, {false, false, false});
  Graph g = l->model->build_graph(gs);
  g.validate();
  const Node& tok = g.node(g.find(kInTokens));
  EXPECT_EQ(tok.type, GgmlType::I32);
  EXPECT_EQ(tok.ne[0], 7);
  EXPECT_EQ(g.node(g.find(kInPositions)).ne[0], 7);
  EXPECT_EQ(g.node(g.find(kInOutIds)).ne[0], 2);
  ASSERT_EQ(g.outputs().size(), 1u);
  const Node& logits = g.node(g.outputs()[0]);
  EXPECT_EQ(logits.name, kOutLogits);
  EXPECT_EQ(logits.ne[0], 64);
  EXPECT_EQ(logits.ne[1], 2);
  EXPECT_EQ(count_op(g, Op::KvStore), 2);
  EXPECT_EQ(count_op(g, Op::Attention), 2);
  EXPECT_EQ(count_op(g, Op::Silu), 2);
  EXPECT_EQ(count_op(g, Op::SwiGlu), 0);
  for (const auto& nd : g.nodes()) {
    if (nd.op == Op::KvStore) {
      EXPECT_EQ(nd.ne[0], 16);  // n_kv_embd
      EXPECT_EQ(nd.ne[1], 64);  // n_ctx
    }
  }
  // The last FFN runs on the selected rows only.
  EXPECT_EQ(g.node(g.find("ffn_out-1")).ne[1], 2);
  EXPECT_EQ(g.node(g.find("ffn_out-0")).ne[1], 7);
}

TEST(ModelGraph, FusionTogglesChangeStructure) {
  TinySpec s;
  s.arch = "qwen2";
  auto l = load_tiny_model(s);
  l->model->prepare_fused_qkv();
  GraphParams gs = params(3, 1, 16, {true, true});
  Graph fused = l->model->build_graph(gs);
  fused.validate();
  EXPECT_EQ(count_op(fused, Op::QkvBiasRopeStore), 2);
  EXPECT_EQ(count_op(fused, Op::KvStore), 0);
  EXPECT_EQ(count_op(fused, Op::Rope), 0);
  EXPECT_EQ(count_op(fused, Op::SwiGlu), 2);
  gs.cparams.fusion = {false, false, false};
  Graph plain = l->model->build_graph(gs);
  EXPECT_EQ(count_op(plain, Op::QkvBiasRopeStore), 0);
  EXPECT_EQ(count_op(plain, Op::Rope), 4);
  EXPECT_EQ(count_op(plain, Op::Add), 2 * 3 + 2 * 2);  // biases + residuals
}

TEST(ModelGraph, Qwen3StaysUnfusedForQkvButHasQkNorms) {
  TinySpec s;
  s.arch = "qwen3";
  auto l = load_tiny_model(s);
  l->model->prepare_fused_qkv();
  Graph g = l->model->build_graph(params(2, 2, 8, {}));
  EXPECT_EQ(count_op(g, Op::QkvBiasRopeStore), 0);
  EXPECT_EQ(count_op(g, Op::RmsNorm), 2 * 2 + 2 * 2 + 1);
}

TEST(ModelGraph, BadShapeIsError) {
  auto l = load_tiny_model({});
  EXPECT_THROW(l->model->build_graph(params(2, 3, 8, {})), Error);
}

TEST(ModelStories, HParams) {
  const std::string path = std::string(MINFER_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (../shared absent)";
  auto m = Model::load(path);
  const HParams& h = m->hparams();
  EXPECT_EQ(h.n_embd, 64);
  EXPECT_EQ(h.n_layer, 5);
  EXPECT_EQ(h.n_head, 8);
  EXPECT_EQ(h.n_head_kv, 4);
  EXPECT_EQ(h.n_ff, 172);
  EXPECT_EQ(h.n_vocab, 512);
  EXPECT_EQ(h.n_ctx_train, 2048);
  EXPECT_FLOAT_EQ(h.rope_freq_base, 10000.0f);
  EXPECT_EQ(m->type_description(), "llama 293K F32");
}

}  // namespace
}  // namespace minfer

namespace minfer {
namespace {

using test::reference_forward;

std::vector<int32_t> some_tokens(int n, int n_vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 11) % n_vocab;
  return t;
}

SessionParams sparams(int64_t n_ctx, FusionToggles f, int32_t n_ubatch = 512) {
  SessionParams p;
  p.n_ctx = n_ctx;
  p.n_ubatch = n_ubatch;
  p.n_threads = 2;
  p.fusion = f;
  // f32 KV: these tests compare against the f32 reference forward within 1e-4; the f16 cache
  // (the default) is compared with f32 in tests/kv_cache_test.cpp.
  p.type_k = p.type_v = GgmlType::F32;
  return p;
}

class SessionArch : public ::testing::TestWithParam<std::string> {};

// Prefill (all rows), ubatched prefill and token-by-token decode all match the scalar reference.
TEST_P(SessionArch, MatchesReferenceForward) {
  TinySpec s;
  s.arch = GetParam();
  auto l = load_tiny_model(s);
  const auto toks = some_tokens(9, 64);
  const auto ref = reference_forward(*l->model, toks);
  std::vector<int32_t> all(toks.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int32_t(i);
  for (FusionToggles f : {FusionToggles{false, false, false}, FusionToggles{true, true, true}}) {
    for (int32_t ub : {512, 4}) {
      Session sess(*l->model, sparams(32, f, ub));
      auto lg = sess.eval(toks, 0, all);
      ASSERT_EQ(lg.size(), toks.size() * 64);
      for (size_t t = 0; t < toks.size(); ++t)
        EXPECT_LT(max_abs_diff(lg.subspan(t * 64, 64), ref[t]), 1e-4f)
            << "token " << t << " fuse " << f.qkv << " ub " << ub;
    }
    Session dec(*l->model, sparams(32, f));
    for (size_t t = 0; t < toks.size(); ++t) {
      auto lg = dec.eval_last(std::span<const int32_t>(&toks[t], 1), int64_t(t));
      EXPECT_LT(max_abs_diff(lg, ref[t]), 1e-4f) << "decode step " << t;
    }
  }
}

// Fused and unfused graphs agree within 1e-5.
TEST_P(SessionArch, FusedEqualsUnfused) {
  TinySpec s;
  s.arch = GetParam();
  auto l = load_tiny_model(s);
  const auto toks = some_tokens(6, 64);
  Session a(*l->model, sparams(16, {false, false, false}));
  Session b(*l->model, sparams(16, {true, true}));
  const auto sa = a.eval_last(toks, 0);
  std::vector<float> la(sa.begin(), sa.end());
  auto lb = b.eval_last(toks, 0);
  EXPECT_LT(max_abs_diff(la, lb), 1e-5f);
  const int32_t next = 5;
  const auto sd = a.eval_last(std::span<const int32_t>(&next, 1), 6);
  std::vector<float> da(sd.begin(), sd.end());
  EXPECT_LT(max_abs_diff(da, b.eval_last(std::span<const int32_t>(&next, 1), 6)), 1e-5f);
}

// The arena planner and the size-class pool give bit-identical logits.
TEST_P(SessionArch, ArenaEqualsSizeClass) {
  TinySpec s;
  s.arch = GetParam();
  auto l = load_tiny_model(s);
  const auto toks = some_tokens(7, 64);
  SessionParams pa = sparams(16, {}), ps = sparams(16, {});
  pa.planner = PlannerKind::Arena;
  ps.planner = PlannerKind::SizeClass;
  Session a(*l->model, pa), b(*l->model, ps);
  const auto sa = a.eval_last(toks, 0);
  std::vector<float> la(sa.begin(), sa.end());
  EXPECT_EQ(max_abs_diff(la, b.eval_last(toks, 0)), 0.0f);
  const int32_t next = 9;
  const auto sd = a.eval_last(std::span<const int32_t>(&next, 1), 7);
  std::vector<float> da(sd.begin(), sd.end());
  EXPECT_EQ(max_abs_diff(da, b.eval_last(std::span<const int32_t>(&next, 1), 7)), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Archs, SessionArch,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma2", "gemma3"));

TEST(Session, PromptLongerThanContextIsError) {
  auto l = load_tiny_model({});
  Session sess(*l->model, sparams(8, {}));
  const auto toks = some_tokens(9, 64);
  try {
    sess.eval_last(toks, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
  const auto ok = some_tokens(8, 64);
  EXPECT_EQ(sess.eval_last(ok, 0).size(), 64u);
  EXPECT_THROW(sess.eval_last(std::span<const int32_t>(ok.data(), 1), 8), Error);
}

// The default f16 cache (rows converted per step) and q8_0 (rows quantized per step, blocks
// read by attention): q8_0 needs head_dim a multiple of 32, so that case uses 2 heads of 32.
class SessionDecode : public ::testing::TestWithParam<GgmlType> {};

TEST_P(SessionDecode, DecodeReusesOneGraphAndAllocatesNothing) {
  TinySpec spec;
  if (GetParam() == GgmlType::Q8_0) {
    spec.n_embd = 64;
    spec.n_head = 2;
    spec.n_head_kv = 1;
  }
  auto l = load_tiny_model(spec);
  SessionParams sp = sparams(64, {});
  sp.type_k = sp.type_v = GetParam();
  Session sess(*l->model, sp);
  const auto toks = some_tokens(5, 64);
  sess.eval_last(toks, 0);
  int32_t tok = 3;
  sess.eval_last(std::span<const int32_t>(&tok, 1), 5);  // warm-up: builds the decode graph
  sess.eval_last(std::span<const int32_t>(&tok, 1), 6);
  const uint64_t builds = sess.n_graph_builds();
  const int steps = 20;
  const uint64_t before = heap_allocations();
  for (int i = 0; i < steps; ++i) {
    auto lg = sess.eval_last(std::span<const int32_t>(&tok, 1), 7 + i);
    tok = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
  }
  const uint64_t news = heap_allocations() - before;
  EXPECT_EQ(sess.n_graph_builds(), builds);
  if (!kHeapCounting)
    GTEST_SKIP() << "allocation counting needs our operator new (not under the sanitizers)";
  EXPECT_EQ(news, 0u) << "heap allocations in " << steps << " decode steps";
  std::printf("[ report ] %s KV: heap allocations per decode step after warm-up: %.2f\n",
              std::string(type_name(GetParam())).c_str(), double(news) / steps);
}

INSTANTIATE_TEST_SUITE_P(KvTypes, SessionDecode, ::testing::Values(GgmlType::F16, GgmlType::Q8_0),
                         [](const auto& info) { return std::string(type_name(info.param)); });

TEST(Session, SamplerAllocatesNothingAfterWarmUp) {
  SamplerParams p;
  p.seed = 3;
  p.repeat_penalty = 1.1f;
  Sampler s(p, 1000);
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(float(i) * 0.37f);
  s.accept(s.sample(logits));
  const uint64_t before = heap_allocations();
  for (int i = 0; i < 50; ++i) s.accept(s.sample(logits));
  EXPECT_EQ(heap_allocations() - before, 0u);
}

TEST(Session, KvAndComputeBytesReported) {
  auto l = load_tiny_model({});
  Session sess(*l->model, sparams(64, {}));
  sess.eval_last(some_tokens(4, 64), 0);
  EXPECT_EQ(sess.kv_bytes(), l->model->hparams().kv_bytes(64));
  EXPECT_GT(sess.compute_bytes(), 0u);
}

}  // namespace
}  // namespace minfer
