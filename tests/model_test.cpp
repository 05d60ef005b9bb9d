// minfer-test-libs: minfer_model
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "common/error.h"
#include "model/model.h"
#include "tiny_model.h"

namespace minfer {
namespace {

using testing::make_tiny_model;
using testing::TinySpec;

// Keeps the image alive as long as the model (File::from_memory borrows it).
struct Loaded {
  std::vector<uint8_t> bytes;
  std::unique_ptr<Model> model;
};

std::unique_ptr<Loaded> load_tiny(const TinySpec& s) {
  auto l = std::make_unique<Loaded>();
  l->bytes = make_tiny_model(s);
  l->model = Model::from_file(gguf::File::from_memory(l->bytes.data(), l->bytes.size(), "tiny.gguf"));
  return l;
}

std::string error_of(const TinySpec& s) {
  try {
    load_tiny(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelHParams, ReadsTinyLlama) {
  auto l = load_tiny({});
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

TEST(ModelHParams, QwenUsesNeoxRope) {
  TinySpec s;
  s.arch = "qwen2";
  EXPECT_EQ(load_tiny(s)->model->hparams().rope_mode, RopeMode::Neox);
  s.arch = "qwen3";
  EXPECT_EQ(load_tiny(s)->model->hparams().rope_mode, RopeMode::Neox);
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
  auto l = load_tiny(s);
  const ModelWeights& w = l->model->weights();
  EXPECT_TRUE(w.tied_output);
  EXPECT_EQ(w.output.data, w.tok_embd.data);
}

TEST(ModelWeights, Qwen2HasBiasesQwen3HasNorms) {
  TinySpec s;
  s.arch = "qwen2";
  auto q2 = load_tiny(s);
  EXPECT_TRUE(has_data(q2->model->weights().layers[0].bq));
  EXPECT_FALSE(has_data(q2->model->weights().layers[0].q_norm));
  s.arch = "qwen3";
  auto q3 = load_tiny(s);
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
  auto l = load_tiny({});
  GraphParams gs = params(7, 2, 64, {false, false});
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
  auto l = load_tiny(s);
  l->model->prepare_fused_qkv();
  GraphParams gs = params(3, 1, 16, {true, true});
  Graph fused = l->model->build_graph(gs);
  fused.validate();
  EXPECT_EQ(count_op(fused, Op::QkvBiasRopeStore), 2);
  EXPECT_EQ(count_op(fused, Op::KvStore), 0);
  EXPECT_EQ(count_op(fused, Op::Rope), 0);
  EXPECT_EQ(count_op(fused, Op::SwiGlu), 2);
  gs.cparams.fusion = {false, false};
  Graph plain = l->model->build_graph(gs);
  EXPECT_EQ(count_op(plain, Op::QkvBiasRopeStore), 0);
  EXPECT_EQ(count_op(plain, Op::Rope), 4);
  EXPECT_EQ(count_op(plain, Op::Add), 2 * 3 + 2 * 2);  // biases + residuals
}

TEST(ModelGraph, Qwen3StaysUnfusedForQkvButHasQkNorms) {
  TinySpec s;
  s.arch = "qwen3";
  auto l = load_tiny(s);
  l->model->prepare_fused_qkv();
  Graph g = l->model->build_graph(params(2, 2, 8, {}));
  EXPECT_EQ(count_op(g, Op::QkvBiasRopeStore), 0);
  EXPECT_EQ(count_op(g, Op::RmsNorm), 2 * 2 + 2 * 2 + 1);
}

TEST(ModelGraph, BadShapeIsError) {
  auto l = load_tiny({});
  EXPECT_THROW(l->model->build_graph(params(2, 3, 8, {})),
               Error);
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
