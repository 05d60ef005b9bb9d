// minfer-test-libs: minfer_eager minfer_model minfer_gen minfer_tokenizer minfer_sample
// The fused QKV projection's weight (Model::prepare_fused_qkv): described without copying,
// packed straight from the file's Q, K and V rows (PackedWeights::add_rows) with no raw copy
// left, and copied raw only for an engine that reads it unpacked. The packed copy must equal
// the packing of the concatenation [Wq | Wk | Wv] bit for bit, the raw copy the concatenation,
// and the logits those of the unfused graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/packed_weights.h"
#include "eager/forward.h"
#include "model/model.h"
#include "model/session.h"
#include "tiny_model.h"

namespace minfer {
namespace {

using testing::load_tiny_model;
using testing::TinySpec;

TinySpec spec_for(GgmlType t, const char* arch) {
  TinySpec s;
  s.arch = arch;
  s.wtype = t;
  s.n_ff = 64;
  if (type_traits(t).block_size == 256) {  // K-quants: 256-wide rows
    s.n_embd = 256;
    s.n_ff = 256;
  }
  s.weight_std = 0.5f / std::sqrt(static_cast<float>(s.n_embd));
  return s;
}

// The concatenation of a layer's Q, K and V bytes (and biases) as the file holds them.
std::vector<uint8_t> concat(std::span<const WeightRef* const> parts) {
  std::vector<uint8_t> out;
  for (const WeightRef* r : parts) out.insert(out.end(), r->data, r->data + r->n_bytes);
  return out;
}

// Nothing is copied until an engine needs raw bytes; then the raw weight is the concatenation
// of the parts and the bias that of the biases (qwen2), bit for bit.
TEST(FusedQkv, PrepareCopiesNothingUntilNeeded) {
  auto tiny = load_tiny_model(spec_for(GgmlType::Q8_0, "qwen2"));
  Model* m = tiny->model.get();
  m->prepare_fused_qkv();
  for (int64_t l = 0; l < m->hparams().n_layer; ++l) {
    const FusedQkv* f = m->fused_qkv(static_cast<int>(l));
    ASSERT_NE(f, nullptr);
    EXPECT_FALSE(f->raw);
    EXPECT_FALSE(f->borrowed);
    EXPECT_EQ(f->weight.ne[1], f->q.ne[1] + f->k.ne[1] + f->v.ne[1]);
  }
  EXPECT_FALSE(m->fused_readable(nullptr, cpu::SimdLevel::kBest));
  m->make_fused_readable(nullptr, cpu::SimdLevel::kBest);
  EXPECT_TRUE(m->fused_readable(nullptr, cpu::SimdLevel::kBest));
  for (int64_t l = 0; l < m->hparams().n_layer; ++l) {
    const FusedQkv* f = m->fused_qkv(static_cast<int>(l));
    ASSERT_TRUE(f->raw);
    const WeightRef* parts[3] = {&f->q, &f->k, &f->v};
    const auto want = concat(parts);
    ASSERT_EQ(f->weight.n_bytes, want.size());
    EXPECT_EQ(std::memcmp(f->weight.data, want.data(), want.size()), 0) << "layer " << l;
    const LayerWeights& lw = m->weights().layers[l];
    const WeightRef* biases[3] = {&lw.bq, &lw.bk, &lw.bv};
    const auto bias = concat(biases);
    ASSERT_EQ(f->bias.n_bytes, bias.size());
    EXPECT_EQ(std::memcmp(f->bias.data, bias.data(), bias.size()), 0) << "layer " << l;
  }
}

// Packed from the three parts (no raw copy made): the same panels as packing the
// concatenation, for every type with a load-time layout at the best level, and the same total
// packed bytes as the separate Q, K and V copies' layout would take for the fused shape.
TEST(FusedQkv, PackedFromThePartsEqualsThePackedConcatenation) {
  int checked = 0;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K}) {
    auto tiny = load_tiny_model(spec_for(t, "llama"));
    Model* m = tiny->model.get();
    m->prepare_fused_qkv();
    m->prepare_packed(cpu::SimdLevel::kBest);
    const FusedQkv* f0 = m->fused_qkv(0);
    ASSERT_NE(f0, nullptr);
    if (m->packed()->find(f0->weight.data) == nullptr) continue;  // no layout for t here
    EXPECT_EQ(m->packed()->bytes(), m->packed_bytes(cpu::SimdLevel::kBest));
    for (int64_t l = 0; l < m->hparams().n_layer; ++l) {
      const FusedQkv* f = m->fused_qkv(static_cast<int>(l));
      EXPECT_FALSE(f->raw) << "a packed fused weight has no raw copy";
      const cpu::PackedWeight* got = m->packed()->find(f->weight.data);
      ASSERT_NE(got, nullptr);
      const WeightRef* parts[3] = {&f->q, &f->k, &f->v};
      const auto raw = concat(parts);
      cpu::PackedWeights ref(cpu::SimdLevel::kBest);
      ASSERT_TRUE(ref.add(t, raw.data(), f->weight.ne[0], f->weight.ne[1]));
      const cpu::PackedWeight* want = ref.find(raw.data());
      ASSERT_EQ(got->bytes, want->bytes);
      EXPECT_EQ(got->n_out, want->n_out);
      EXPECT_EQ(std::memcmp(got->data, want->data, want->bytes), 0)
          << type_name(t) << " layer " << l;
    }
    // The Session on an already packed Model copies nothing either.
    SessionParams sp;
    sp.n_ctx = 32;
    sp.n_threads = 2;
    Session s(*m, sp);
    EXPECT_FALSE(m->fused_qkv(0)->raw);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no load-time packed layout on this CPU/build";
}

// The logits of a 7-token prompt (every row) and then one decoded token, from either engine
// (graph Session or EagerSession): the sequence every comparison here runs.
template <typename AnySession>
std::vector<float> prompt_then_one(AnySession& e, int64_t n_vocab) {
  std::vector<int32_t> toks, all;
  for (int i = 0; i < 7; ++i) {
    toks.push_back(static_cast<int32_t>((i * 37 + 11) % n_vocab));
    all.push_back(i);
  }
  const auto lg = e.eval(toks, 0, all);
  std::vector<float> out(lg.begin(), lg.end());
  const int32_t next = 3;
  const auto d = e.eval_last(std::span<const int32_t>(&next, 1), 7);
  out.insert(out.end(), d.begin(), d.end());
  return out;
}

std::vector<float> logits(Model& m, bool fused, bool repack) {
  SessionParams sp;
  sp.n_ctx = 32;
  sp.n_threads = 2;
  sp.fusion = FusionToggles{fused, true, true};
  sp.repack_weights = repack;
  sp.type_k = sp.type_v = GgmlType::F32;
  Session s(m, sp);
  return prompt_then_one(s, m.hparams().n_vocab);
}

// End to end: the fused graph, its weight packed from the parts or copied raw, gives the
// unfused graph's logits (the epilogue's own rounding: within 1e-5); where the Session packs,
// no raw copy is made, and without packing every layer is copied raw.
TEST(FusedQkv, SameLogitsAsUnfused) {
  for (GgmlType t : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    for (const char* arch : {"llama", "qwen2"}) {
      for (bool repack : {true, false}) {
        auto fused = load_tiny_model(spec_for(t, arch)), plain = load_tiny_model(spec_for(t, arch));
        const auto want = logits(*plain->model, false, repack);
        const auto got = logits(*fused->model, true, repack);
        ASSERT_EQ(got.size(), want.size());
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i)
          worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
        EXPECT_LE(worst, 1e-5) << arch << " " << type_name(t) << " repack " << repack;
        const Model& m = *fused->model;
        for (int64_t l = 0; l < m.hparams().n_layer; ++l) {
          const FusedQkv* f = m.fused_qkv(static_cast<int>(l));
          ASSERT_NE(f, nullptr);
          const bool packed = repack && m.packed() && m.packed()->find(f->weight.data);
          EXPECT_EQ(f->raw, !packed) << arch << " " << type_name(t) << " layer " << l;
        }
      }
    }
  }
}

// Eager mode takes the fused path only on readable weights: after make_fused_readable it runs
// fused with the graph Session's bits (no packing on either side).
TEST(FusedQkv, EagerReadsTheRawCopy) {
  auto tiny = load_tiny_model(spec_for(GgmlType::Q8_0, "qwen2"));
  Model& m = *tiny->model;
  m.prepare_fused_qkv();
  m.make_fused_readable(nullptr, cpu::SimdLevel::kBest);
  const auto want = logits(m, true, false);
  eager::EagerParams ep;
  ep.n_ctx = 32;
  ep.n_threads = 2;
  ep.kv_type = GgmlType::F32;
  eager::EagerSession e(m, ep);
  const std::vector<float> got = prompt_then_one(e, m.hparams().n_vocab);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace minfer
