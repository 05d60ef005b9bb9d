// minfer-test-libs: minfer_eager minfer_model minfer_gen minfer_tokenizer minfer_sample
// The fused FFN gate/up projection (Model::prepare_fused_ffn, FusionToggles::gate_up): one
// matmul against [W_gate | W_up] and the GLU over its output's halves. It must give the same
// logits as separate gate and up matmuls to the bit (prefill, micro-batched prefill, decode,
// batched decode of several sequences, eager mode), for every weight type with a load-time
// packed layout (packed from the two parts, no raw copy) and without packing (raw copy), on
// `minfer gen` models of every architecture and on stories260K's greedy text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "eager/forward.h"
#include "gen_file_util.h"
#include "model/model.h"
#include "model/session.h"
#include "sample/sampler.h"
#include "tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

using testing::load_tiny_model;
using testing::TinySpec;

FusionToggles fusion(bool gate_up) {
  FusionToggles f;
  f.gate_up = gate_up;
  return f;
}

SessionParams sparams(bool gate_up, bool repack, int32_t n_seq = 1, int32_t n_ubatch = 512) {
  SessionParams p;
  p.n_ctx = 64;
  p.n_seq_max = n_seq;
  p.n_ubatch = n_ubatch;
  p.n_threads = 2;
  p.fusion = fusion(gate_up);
  p.repack_weights = repack;
  return p;
}

std::vector<int32_t> some_tokens(int n, int64_t n_vocab, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11 + salt * 101) % n_vocab);
  return t;
}

// Every logit row the engines produce in one fixed script: a 9-token prefill (all rows), the
// same prefill in micro-batches of 4, 4 decode steps, then a batch of 3 sequences (two
// prefilling, one decoding) and a decode step of all 3.
std::vector<float> script(Model& m, bool gate_up, bool repack) {
  std::vector<float> out;
  const auto add = [&](std::span<const float> s) { out.insert(out.end(), s.begin(), s.end()); };
  const int64_t V = m.hparams().n_vocab;
  const auto toks = some_tokens(9, V);
  std::vector<int32_t> all(toks.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  for (int32_t ub : {512, 4}) {
    Session s(m, sparams(gate_up, repack, 1, ub));
    add(s.eval(toks, 0, all));
    if (ub != 512) continue;
    int32_t next = 3;
    for (int i = 0; i < 4; ++i) {
      const auto lg = s.eval_last(std::span<const int32_t>(&next, 1), 9 + i);
      add(lg);
      next = static_cast<int32_t>((next * 7 + 1) % V);
    }
  }
  Session b(m, sparams(gate_up, repack, 3));
  Batch batch;
  const auto a0 = some_tokens(5, V, 1), a1 = some_tokens(3, V, 2);
  for (int i = 0; i < 5; ++i) batch.add(a0[i], i, 0, i == 4);
  for (int i = 0; i < 3; ++i) batch.add(a1[i], i, 1, true);
  add(b.decode(batch));
  batch.clear();
  batch.add(1, 0, 2, true);  // the third sequence starts while the others decode
  batch.add(2, 5, 0, true);
  batch.add(4, 3, 1, true);
  add(b.decode(batch));
  return out;
}

// Same bits: a float compare would let -0.0 == 0.0 and fail on equal NaNs.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Where the fused weights live after a Session: packed from the parts (no raw copy) where the
// type has a layout and the Session repacks, else copied raw; phi3's is the file's own.
void expect_state(const Model& m, bool repack) {
  for (int64_t l = 0; l < m.hparams().n_layer; ++l) {
    const FusedGateUp* f = m.fused_gate_up(static_cast<int>(l));
    ASSERT_NE(f, nullptr) << "layer " << l;
    EXPECT_EQ(f->weight.ne[1], 2 * m.hparams().n_ff);
    if (f->borrowed) {
      EXPECT_TRUE(f->raw);
      EXPECT_EQ(f->weight.data, m.weights().layers[l].ffn_gate.data);
      continue;
    }
    const bool packed = repack && m.packed() && m.packed()->find(f->weight.data) != nullptr;
    EXPECT_EQ(f->raw, !packed) << "layer " << l << " repack " << repack;
  }
}

struct Case {
  const char* preset;
  const char* type;
};

class FusedGateUpTypes : public ::testing::TestWithParam<Case> {};

TEST_P(FusedGateUpTypes, SameLogitsAsSeparateMatmuls) {
  const Case c = GetParam();
  test::GenFile gen(c.preset, c.type);
  for (bool repack : {true, false}) {
    // Separate Models: packing happens once per Model, with whatever fusion it was prepared
    // for, and each path must be the one it claims to be.
    auto fused = Model::load(gen.path), plain = Model::load(gen.path);
    const auto want = script(*plain, false, repack);
    const auto got = script(*fused, true, repack);
    EXPECT_EQ(plain->fused_gate_up(0), nullptr);
    expect_state(*fused, repack);
    EXPECT_TRUE(same_bits(got, want)) << c.preset << " " << c.type << " repack " << repack;
    if (repack && fused->packed() && fused->fused_gate_up(0)->borrowed == false) {
      EXPECT_EQ(fused->packed()->bytes(), plain->packed()->bytes())
          << "the fused packed copy replaces the two separate ones";
    }
  }
}

// Files whose gate and up are not adjacent (up first): the fused weight is packed from the two
// parts, or copied raw without packing. K-quants on 256-wide rows.
TEST(FusedGateUpGraph, SameLogitsWhenGateAndUpAreApart) {
  for (GgmlType t :
       {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    for (const char* arch : {"llama", "gemma2"}) {
      TinySpec s;
      s.arch = arch;
      s.wtype = t;
      s.up_before_gate = true;
      s.n_ff = 96;
      if (type_traits(t).block_size == 256) {
        s.n_embd = 256;
        s.n_ff = 256;
      }
      s.weight_std = 0.5f / std::sqrt(static_cast<float>(s.n_embd));
      for (bool repack : {true, false}) {
        auto fused = load_tiny_model(s), plain = load_tiny_model(s);
        const auto want = script(*plain->model, false, repack);
        const auto got = script(*fused->model, true, repack);
        ASSERT_NE(fused->model->fused_gate_up(0), nullptr);
        EXPECT_FALSE(fused->model->fused_gate_up(0)->borrowed);
        expect_state(*fused->model, repack);
        EXPECT_TRUE(same_bits(got, want)) << arch << " " << type_name(t) << " repack " << repack;
      }
    }
  }
}

// 32-element blocks on the 64-wide tiny presets; K-quants need 256-wide rows (tiny-qwen3).
INSTANTIATE_TEST_SUITE_P(Types, FusedGateUpTypes,
                         ::testing::Values(Case{"tiny-llama", "f32"}, Case{"tiny-llama", "q8_0"},
                                           Case{"tiny-llama", "q4_0"}, Case{"tiny-qwen3", "q4_k"},
                                           Case{"tiny-qwen3", "q5_k"}, Case{"tiny-qwen3", "q6_k"},
                                           Case{"tiny-qwen2", "q8_0"}, Case{"tiny-gemma2", "q4_0"},
                                           Case{"tiny-gemma3", "q8_0"}, Case{"tiny-phi3", "q8_0"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = std::string(i.param.preset) + "_" + i.param.type;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// The graph: one gate-up matmul per layer instead of two, the one-source GLU in place over
// it, and the down projection reading the up halves through a strided view.
TEST(FusedGateUpGraph, OneMatmulPerFfnAndAStridedView) {
  auto l = load_tiny_model({});
  l->model->prepare_fused_ffn();
  GraphParams gp;
  gp.n_tokens = 3;
  gp.n_outputs = 1;
  gp.cparams.n_ctx = 16;
  gp.cparams.fusion = fusion(false);
  const Graph plain = l->model->build_graph(gp);
  gp.cparams.fusion = fusion(true);
  const Graph g = l->model->build_graph(gp);
  g.validate();
  int mm_plain = 0, mm = 0;
  for (const Node& n : plain.nodes()) mm_plain += n.op == Op::MatMul;
  for (const Node& n : g.nodes()) mm += n.op == Op::MatMul;
  EXPECT_EQ(mm, mm_plain - l->model->hparams().n_layer);
  const int64_t F = l->model->hparams().n_ff;
  const Node& gu = g.node(g.find("ffn_gate_up-0"));
  EXPECT_EQ(gu.ne[0], 2 * F);
  const Node& glu = g.node(g.find("ffn_swiglu-0"));
  ASSERT_EQ(glu.src.size(), 1u);
  EXPECT_EQ(glu.ne, gu.ne);
  const Node& act = g.node(g.find("ffn_act-0"));
  EXPECT_EQ(act.op, Op::View);
  EXPECT_EQ(act.p.view_offset, F);
  EXPECT_EQ(act.p.view_row_stride, 2 * F);
  EXPECT_EQ(act.ne[0], F);
}

// Nothing is copied until an engine needs raw bytes, and a prepared Model keeps serving
// unfused graphs from the file.
TEST(FusedGateUpGraph, PrepareCopiesNothingUntilNeeded) {
  TinySpec spec;
  spec.wtype = GgmlType::Q8_0;
  spec.n_ff = 96;  // ffn_down's rows: whole Q8_0 blocks
  spec.up_before_gate = true;
  auto tiny = load_tiny_model(spec);
  Model* m = tiny->model.get();
  m->prepare_fused_ffn();
  for (int64_t l = 0; l < m->hparams().n_layer; ++l)
    EXPECT_FALSE(m->fused_gate_up(static_cast<int>(l))->raw);
  EXPECT_FALSE(m->fused_readable(nullptr, cpu::SimdLevel::kBest));
  m->make_fused_readable(nullptr, cpu::SimdLevel::kBest);
  EXPECT_TRUE(m->fused_readable(nullptr, cpu::SimdLevel::kBest));
  const FusedGateUp* f = m->fused_gate_up(0);
  ASSERT_TRUE(f->raw);
  EXPECT_EQ(std::memcmp(f->weight.data, f->gate.data, f->gate.n_bytes), 0);
  EXPECT_EQ(std::memcmp(f->weight.data + f->gate.n_bytes, f->up.data, f->up.n_bytes), 0);
}

// Eager mode runs the fused graph when the weights are readable (here: copied raw), with the
// graph Session's bits.
TEST(FusedGateUpGraph, EagerMatchesGraphSession) {
  test::GenFile gen("tiny-qwen2", "q4_0");
  auto m = Model::load(gen.path);
  m->prepare_fused_ffn();
  m->make_fused_readable(nullptr, cpu::SimdLevel::kBest);
  const auto toks = some_tokens(6, m->hparams().n_vocab);
  SessionParams sp = sparams(true, false);
  sp.type_k = sp.type_v = GgmlType::F16;
  Session s(*m, sp);
  const auto a = s.eval_last(toks, 0);
  const std::vector<float> want(a.begin(), a.end());
  eager::EagerParams ep;
  ep.n_ctx = 64;
  ep.n_threads = 2;
  ep.fusion = fusion(true);
  eager::EagerSession e(*m, ep);
  const auto b = e.eval_last(toks, 0);
  EXPECT_TRUE(same_bits(std::vector<float>(b.begin(), b.end()), want));
}

// stories260K (n_ff 172: not a multiple of the 8 or 16 rows of a panel, f32: no packed
// layout): the same greedy text, 64 tokens.
TEST(FusedGateUpGraph, Stories260KGreedyTextIsTheSame) {
  const std::filesystem::path path =
      std::filesystem::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (../shared absent)";
  std::string text[2];
  for (bool gate_up : {false, true}) {
    auto m = Model::load(path.string());
    const auto tk = tok::Tokenizer::from_gguf(m->file());
    SessionParams sp = sparams(gate_up, true);
    sp.n_ctx = 256;
    Session s(*m, sp);
    SamplerParams smp;
    smp.temperature = 0.0f;
    Sampler sampler(smp, static_cast<int32_t>(m->hparams().n_vocab));
    auto toks = tk.tokenize("Once upon a time", {.add_special = true, .parse_special = false});
    auto lg = s.eval_last(toks, 0);
    int64_t pos = static_cast<int64_t>(toks.size());
    std::string& out = text[gate_up];
    for (int i = 0; i < 64; ++i) {
      const int32_t next = sampler.sample(lg);
      out += std::to_string(next) + " ";
      lg = s.eval_last(std::span<const int32_t>(&next, 1), pos++);
    }
  }
  EXPECT_EQ(text[1], text[0]);
}

}  // namespace
}  // namespace minfer
