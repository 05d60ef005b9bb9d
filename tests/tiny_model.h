// Test helper: a tiny random-weight llama / qwen2 / qwen3 / gemma2 / gemma3 GGUF image with
// llama.cpp's names,
// and that image loaded as a Model. Header-only so any test can include it; needs minfer_model
// (which brings minfer_gguf's Writer and minfer_common).
#pragma once

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/quant.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace minfer::testing {

struct TinySpec {
  std::string arch = "llama";
  int64_t n_embd = 32, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 48, n_vocab = 64;
  int64_t n_ctx_train = 256;
  GgmlType wtype = GgmlType::F32;  // projections' type
  bool tied = false;               // omit output.weight
  uint32_t seed = 1;
  // Standard deviation of the random projection weights. The default 0.3 makes attention
  // scores of wide models huge (one-hot softmax, logits that jump at the smallest change);
  // ~1/sqrt(n_embd) gives trained-model-like scores of a few units.
  float weight_std = 0.3f;
  std::string skip_key;    // metadata key to leave out
  std::string bad_tensor;  // tensor written with its last dim + 1
  // Llama 3 rope scaling: rope_freqs.weight [head_dim / 2] with these factors (empty: none).
  std::vector<float> rope_freqs;
  // Extra f32 tensors [n_embd] the graph does not read (refusal tests).
  std::vector<std::string> extra_tensors;
  // Write each layer's ffn_up before its ffn_gate (files where the two are not adjacent in
  // gate, up order, so a fused gate-up weight cannot borrow the file's bytes).
  bool up_before_gate = false;
  // Metadata written after (and replacing) the generated keys: hostile-value tests.
  std::vector<std::pair<std::string, gguf::Value>> overrides;
};

inline std::vector<uint8_t> make_tiny_model(const TinySpec& s) {
  gguf::Writer w;
  const std::string a = s.arch;
  auto set = [&](const std::string& k, gguf::Value v) {
    if (k != s.skip_key) w.set(k, std::move(v));
  };
  set("general.architecture", gguf::Value::string(a));
  set(a + ".embedding_length", gguf::Value::u32(static_cast<uint32_t>(s.n_embd)));
  set(a + ".block_count", gguf::Value::u32(static_cast<uint32_t>(s.n_layer)));
  set(a + ".feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(s.n_ff)));
  set(a + ".attention.head_count", gguf::Value::u32(static_cast<uint32_t>(s.n_head)));
  set(a + ".attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(s.n_head_kv)));
  set(a + ".context_length", gguf::Value::u32(static_cast<uint32_t>(s.n_ctx_train)));
  set(a + ".attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-6f));
  set(a + ".rope.freq_base", gguf::Value::f32(a == "llama" ? 10000.0f : 1000000.0f));
  const bool gemma = a == "gemma2" || a == "gemma3";
  if (gemma) {
    // Windows small enough that a short test crosses them; gemma3 with period 2 (a windowed
    // and a global layer in two); gemma2's caps small enough to bite on these scores.
    set(a + ".attention.sliding_window", gguf::Value::u32(5));
    if (a == "gemma3") set(a + ".attention.sliding_window_pattern", gguf::Value::u32(2));
    if (a == "gemma2") {
      set(a + ".attn_logit_softcapping", gguf::Value::f32(4.0f));
      set(a + ".final_logit_softcapping", gguf::Value::f32(3.0f));
    }
  }
  std::vector<std::string> toks;
  for (int64_t i = 0; i < s.n_vocab; ++i) toks.push_back(fmt::format("t{}", i));
  set("tokenizer.ggml.model", gguf::Value::string("llama"));
  set("tokenizer.ggml.tokens", gguf::Value::string_array(toks));
  for (const auto& [k, v] : s.overrides) w.set(k, v);

  std::mt19937 rng(s.seed);
  std::normal_distribution<float> nd(0.0f, s.weight_std);
  auto tensor = [&](const std::string& name, std::vector<int64_t> ne, GgmlType t, bool norm) {
    if (name == s.bad_tensor) ne.back() += 1;
    int64_t n = 1;
    for (auto d : ne) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = norm ? 1.0f + 0.1f * nd(rng) : nd(rng);
    const int64_t rows = n / ne[0];
    std::vector<uint8_t> bytes(row_size(t, ne[0]) * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(t, v.data() + r * ne[0], bytes.data() + r * row_size(t, ne[0]), ne[0]);
    w.add_tensor(name, t, ne, std::move(bytes));
  };
  const int64_t E = s.n_embd, D = E / s.n_head, Q = D * s.n_head, KV = D * s.n_head_kv;
  tensor("token_embd.weight", {E, s.n_vocab}, s.wtype, false);
  tensor("output_norm.weight", {E}, GgmlType::F32, true);
  if (!s.rope_freqs.empty()) {
    std::vector<uint8_t> bytes(s.rope_freqs.size() * sizeof(float));
    std::memcpy(bytes.data(), s.rope_freqs.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", GgmlType::F32, {static_cast<int64_t>(s.rope_freqs.size())},
                 std::move(bytes));
  }
  for (const std::string& name : s.extra_tensors) tensor(name, {E}, GgmlType::F32, true);
  if (!s.tied) tensor("output.weight", {E, s.n_vocab}, s.wtype, false);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    tensor(b + "attn_norm.weight", {E}, GgmlType::F32, true);
    tensor(b + "attn_q.weight", {E, Q}, s.wtype, false);
    tensor(b + "attn_k.weight", {E, KV}, s.wtype, false);
    tensor(b + "attn_v.weight", {E, KV}, s.wtype, false);
    tensor(b + "attn_output.weight", {Q, E}, s.wtype, false);
    if (a == "qwen2") {
      tensor(b + "attn_q.bias", {Q}, GgmlType::F32, false);
      tensor(b + "attn_k.bias", {KV}, GgmlType::F32, false);
      tensor(b + "attn_v.bias", {KV}, GgmlType::F32, false);
    }
    if (a == "qwen3" || a == "gemma3") {
      tensor(b + "attn_q_norm.weight", {D}, GgmlType::F32, true);
      tensor(b + "attn_k_norm.weight", {D}, GgmlType::F32, true);
    }
    tensor(b + "ffn_norm.weight", {E}, GgmlType::F32, true);
    if (s.up_before_gate) tensor(b + "ffn_up.weight", {E, s.n_ff}, s.wtype, false);
    tensor(b + "ffn_gate.weight", {E, s.n_ff}, s.wtype, false);
    if (!s.up_before_gate) tensor(b + "ffn_up.weight", {E, s.n_ff}, s.wtype, false);
    tensor(b + "ffn_down.weight", {s.n_ff, E}, s.wtype, false);
    if (gemma) {
      tensor(b + "post_attention_norm.weight", {E}, GgmlType::F32, true);
      tensor(b + "post_ffw_norm.weight", {E}, GgmlType::F32, true);
    }
  }
  return w.to_bytes();
}

// A tiny model and the image it was loaded from: the Model borrows the bytes
// (gguf::File::from_memory), so they live together.
struct LoadedTiny {
  std::vector<uint8_t> bytes;
  std::unique_ptr<Model> model;
};

inline std::unique_ptr<LoadedTiny> load_tiny_model(const TinySpec& s) {
  auto l = std::make_unique<LoadedTiny>();
  l->bytes = make_tiny_model(s);
  l->model =
      Model::from_file(gguf::File::from_memory(l->bytes.data(), l->bytes.size(), "tiny.gguf"));
  return l;
}

}  // namespace minfer::testing
