// minfer-test-libs: minfer_eager minfer_model minfer_gen
// Phi-3 (general.architecture phi3): the `minfer gen` presets (real shapes, fused tensors and
// metadata as llama.cpp's converter writes them), loading (the fused attn_qkv / gate-up weights
// split into row views, sliding_window accepted as llama.cpp ignores it, anything else
// unimplemented refused by name), LongRoPE's long / short factor choice by context size, and
// the logits of graph mode (fused and unfused QKV) and eager mode against the textbook
// reference forward, which reads the fused tensors straight from the file.
// Fidelity against llama.cpp itself: tests/fidelity_test.cpp (tiny-phi3, tiny-phi3-longrope).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "eager/forward.h"
#include "gen/gen.h"
#include "gen_file_util.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/session.h"
#include "model/support.h"
#include "numeric_test_util.h"
#include "reference_forward.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;
using test::max_abs_diff;
using test::reference_forward;

using test::GenFile;

// The file at `path` rewritten with extra metadata and / or extra f32 tensors [8].
std::vector<uint8_t> rewritten(const std::string& path,
                               const std::vector<std::pair<std::string, gguf::Value>>& keys,
                               const std::vector<std::string>& extra_tensors) {
  const gguf::File f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const auto& [k, v] : keys) w.set(k, v);
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    const uint8_t* src = t.data;
    w.add_tensor(t.name, t.type, ne,
                 [src](uint8_t* dst, uint64_t n) { std::copy(src, src + n, dst); });
  }
  for (const std::string& name : extra_tensors)
    w.add_tensor(name, GgmlType::F32, {8},
                 [](uint8_t* dst, uint64_t n) { std::fill_n(dst, n, 0); });
  return w.to_bytes();
}

std::string refusal(const std::vector<uint8_t>& bytes) {
  return unsupported_reason(gguf::File::from_memory(bytes.data(), bytes.size(), "phi3.gguf"));
}

std::vector<int32_t> tokens(int n, int64_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % n_vocab);
  return t;
}

// Graph (unfused and fused QKV / FFN) and eager logits at every position, each within `tol` of
// `ref`, on a context of n_ctx tokens.
void expect_engines_match(Model& model, const std::vector<int32_t>& toks,
                          const std::vector<std::vector<float>>& ref, int64_t n_ctx, float tol) {
  const int64_t V = model.hparams().n_vocab;
  std::vector<int32_t> all(toks.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  model.prepare_fused_qkv();
  for (bool fuse : {false, true}) {
    SessionParams sp;
    sp.n_ctx = n_ctx;
    sp.n_threads = 2;
    sp.fusion = {fuse, fuse};
    sp.type_k = sp.type_v = GgmlType::F32;
    Session sess(model, sp);
    const auto lg = sess.eval(toks, 0, all);
    for (size_t t = 0; t < toks.size(); ++t)
      EXPECT_LT(max_abs_diff(lg.subspan(t * V, V), ref[t]), tol)
          << "graph, token " << t << " fused " << fuse;

    eager::EagerParams ep;
    ep.n_ctx = n_ctx;
    ep.fusion = {fuse, fuse};
    ep.kv_type = GgmlType::F32;
    eager::EagerSession es(model, ep);
    const auto le = es.eval(toks, 0, all);
    for (size_t t = 0; t < toks.size(); ++t)
      EXPECT_LT(max_abs_diff(le.subspan(t * V, V), ref[t]), tol)
          << "eager, token " << t << " fused " << fuse;
  }
}

TEST(Phi3Gen, PresetsHaveRealShapesAndFusedTensors) {
  const gen::Preset& p = gen::find_preset("phi-3-mini-4k");
  EXPECT_EQ(p.arch, "phi3");
  EXPECT_EQ(p.n_embd, 3072);
  EXPECT_EQ(p.n_layer, 32);
  EXPECT_EQ(p.n_head, 32);
  EXPECT_EQ(p.n_head_kv, 32);
  EXPECT_EQ(p.n_ff, 8192);
  EXPECT_EQ(p.n_ctx, 4096);
  std::map<std::string, std::vector<int64_t>> shape;
  for (const auto& t : gen::plan_tensors(p, gen::WeightMix::F16, 32064)) shape[t.name] = t.ne;
  EXPECT_EQ(shape["blk.0.attn_qkv.weight"], (std::vector<int64_t>{3072, 9216}));
  EXPECT_EQ(shape["blk.31.ffn_up.weight"], (std::vector<int64_t>{3072, 16384}));
  EXPECT_EQ(shape["blk.0.ffn_down.weight"], (std::vector<int64_t>{8192, 3072}));
  EXPECT_EQ(shape.count("blk.0.ffn_gate.weight"), 0u);
  EXPECT_EQ(shape.count("blk.0.attn_q.weight"), 0u);
  EXPECT_EQ(shape.count("rope_factors_long.weight"), 0u);  // 4k: no LongRoPE
  std::map<std::string, gguf::Value> meta;
  for (auto& [k, v] : gen::model_metadata(p, gen::WeightMix::F16, gen::Vocab{}, 1)) meta[k] = v;
  ASSERT_EQ(meta.count("phi3.attention.sliding_window"), 1u);
  EXPECT_EQ(std::get<uint64_t>(meta["phi3.attention.sliding_window"].scalar), 2047u);
  EXPECT_EQ(std::get<uint64_t>(meta["phi3.rope.scaling.original_context_length"].scalar), 4096u);

  const gen::Preset& p35 = gen::find_preset("phi-3.5-mini");
  EXPECT_EQ(p35.n_ctx, 131072);
  const auto lf = gen::phi3_rope_factors(p35, true), sf = gen::phi3_rope_factors(p35, false);
  ASSERT_EQ(lf.size(), 48u);  // head_dim 96
  ASSERT_EQ(sf.size(), 48u);
  EXPECT_FLOAT_EQ(lf.front(), 1.0f);
  EXPECT_FLOAT_EQ(lf.back(), 32.0f);
  meta.clear();
  for (auto& [k, v] : gen::model_metadata(p35, gen::WeightMix::F16, gen::Vocab{}, 1)) meta[k] = v;
  // convert_hf_to_gguf.py: sqrt(1 + ln(131072 / 4096) / ln(4096)).
  EXPECT_NEAR(std::get<double>(meta["phi3.rope.scaling.attn_factor"].scalar),
              std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), 1e-6);
}

TEST(Phi3Model, LoadsWithFusedWeightsAsRowViews) {
  GenFile g("tiny-phi3");
  auto model = Model::load(g.path);
  const HParams& h = model->hparams();
  EXPECT_EQ(h.arch, Arch::Phi3);
  EXPECT_EQ(h.rope_mode, RopeMode::Neox);  // llama.cpp's rope type for phi3
  EXPECT_EQ(h.n_head_kv, 2);
  const LayerWeights& lw = model->weights().layers[1];
  ASSERT_TRUE(has_data(lw.wqkv));
  const size_t rs = row_size(lw.wqkv.type, h.n_embd);
  EXPECT_EQ(lw.wq.data, lw.wqkv.data);
  EXPECT_EQ(lw.wk.data, lw.wqkv.data + h.n_q() * rs);
  EXPECT_EQ(lw.wv.data, lw.wqkv.data + (h.n_q() + h.n_kv_embd()) * rs);
  EXPECT_EQ(lw.wv.ne[1], h.n_kv_embd());
  EXPECT_EQ(lw.ffn_up.data, lw.ffn_gate.data + h.n_ff * rs);
  // The fused QKV is the file's tensor itself, not a copy.
  model->prepare_fused_qkv();
  ASSERT_NE(model->fused_qkv(1), nullptr);
  EXPECT_EQ(model->fused_qkv(1)->weight.data, lw.wqkv.data);
  // Distinct bytes: the views are not counted twice.
  uint64_t file_bytes = 0;
  for (const auto& t : model->file().tensors()) file_bytes += t.n_bytes;
  EXPECT_EQ(model->weights().total_bytes(), file_bytes);
}

TEST(Phi3Model, GraphAndEagerMatchReferenceForward) {
  for (const char* type : {"f32", "q8_0"}) {
    SCOPED_TRACE(type);
    GenFile g("tiny-phi3", type);
    auto model = Model::load(g.path);
    const auto toks = tokens(12, model->hparams().n_vocab);
    const auto ref = reference_forward(*model, toks);
    // q8_0: the engines quantize the activations, the reference does not.
    expect_engines_match(*model, toks, ref, 32, std::string(type) == "f32" ? 1e-4f : 5e-2f);
  }
}

// The test can fail: the same file read as if its halves were [up | gate] (a wrong split)
// gives other logits than the engines.
TEST(Phi3Model, ReferenceSeesAWrongGateUpSplit) {
  GenFile g("tiny-phi3");
  auto model = Model::load(g.path);
  const auto toks = tokens(6, model->hparams().n_vocab);
  const auto ref = reference_forward(*model, toks);
  LayerWeights& lw = const_cast<LayerWeights&>(model->weights().layers[0]);
  std::swap(lw.ffn_gate, lw.ffn_up);
  SessionParams sp;
  sp.n_ctx = 16;
  sp.type_k = sp.type_v = GgmlType::F32;
  sp.fusion = {false, false, false};
  Session s(*model, sp);
  const auto lg = s.eval_last(toks, 0);
  EXPECT_GT(max_abs_diff(lg, ref.back()), 1e-3f);
}

// LongRoPE: the long factors when the context (padded to 256 as llama.cpp pads n_ctx_seq)
// exceeds original_context_length (1024 here), the short ones otherwise; attn_factor from the
// metadata scales both. Engines against the reference with the factors each context picks.
TEST(Phi3LongRope, FactorsChosenByContextSize) {
  GenFile g("tiny-phi3-longrope");
  auto model = Model::load(g.path);
  const HParams& h = model->hparams();
  const ModelWeights& w = model->weights();
  ASSERT_TRUE(has_data(w.rope_long));
  ASSERT_TRUE(has_data(w.rope_short));
  EXPECT_EQ(h.n_ctx_orig, 1024);
  EXPECT_NEAR(h.rope_attn_factor, std::sqrt(1.0 + std::log(8.0) / std::log(1024.0)), 1e-6);
  EXPECT_EQ(rope_factors(w, h, 32).data, w.rope_short.data);
  EXPECT_EQ(rope_factors(w, h, 1024).data, w.rope_short.data);
  EXPECT_EQ(rope_factors(w, h, 1000).data, w.rope_short.data);  // padded: 1024
  EXPECT_EQ(rope_factors(w, h, 1025).data, w.rope_long.data);   // padded: 1280
  EXPECT_EQ(rope_factors(w, h, 4001).data, w.rope_long.data);

  const auto toks = tokens(12, h.n_vocab);
  const auto ref_short = reference_forward(*model, toks, "rope_factors_short.weight");
  const auto ref_long = reference_forward(*model, toks, "rope_factors_long.weight");
  {
    SCOPED_TRACE("short (n_ctx 64)");
    expect_engines_match(*model, toks, ref_short, 64, 1e-4f);
  }
  {
    SCOPED_TRACE("long (n_ctx 2048)");
    expect_engines_match(*model, toks, ref_long, 2048, 1e-4f);
  }
  // The choice reaches the logits.
  EXPECT_GT(max_abs_diff(ref_short.back(), ref_long.back()), 1e-3f);
}

TEST(Phi3Support, SlidingWindowAcceptedUnimplementedRefusedByName) {
  GenFile g("tiny-phi3");
  EXPECT_EQ(refusal(rewritten(g.path, {}, {})), "");
  // llama.cpp disables the window for every phi3 file: any value runs as full attention.
  EXPECT_EQ(
      refusal(rewritten(g.path, {{"phi3.attention.sliding_window", gguf::Value::u32(64)}}, {})),
      "");
  // ... but not for llama files (model/support.cpp).
  std::string why =
      refusal(rewritten(g.path, {{"phi3.attn_logit_softcapping", gguf::Value::f32(30.0f)}}, {}));
  EXPECT_NE(why.find("phi3.attn_logit_softcapping"), std::string::npos) << why;
  why = refusal(rewritten(g.path, {{"phi3.rope.scaling.type", gguf::Value::string("su")}}, {}));
  EXPECT_NE(why.find("'su'"), std::string::npos) << why;
  // A fused QKV bias (llama.cpp's phi3 would read it; minfer does not): refused by name.
  why = refusal(rewritten(g.path, {}, {"blk.0.attn_qkv.bias"}));
  EXPECT_NE(why.find("blk.0.attn_qkv.bias"), std::string::npos) << why;
  // "longrope" is accepted: llama.cpp computes it as linear scaling.
  EXPECT_EQ(
      refusal(rewritten(g.path, {{"phi3.rope.scaling.type", gguf::Value::string("longrope")}}, {})),
      "");
}

}  // namespace
}  // namespace minfer
