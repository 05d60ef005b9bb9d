// minfer-test-libs: minfer_gen minfer_gguf minfer_common
// Model generator: presets, tensor plans (types and fallbacks), metadata key types, round trips
// through the reader, determinism, and the `minfer gen` command line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "common/error.h"
#include "common/quant.h"
#include "gen/gen.h"
#include "gguf/gguf.h"

namespace minfer::gen {
namespace {

std::string tmp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("minfer_gen_" + tag + "_" + std::to_string(getpid()) + ".gguf"))
      .string();
}

std::map<std::string, TensorPlan> by_name(const std::vector<TensorPlan>& plan) {
  std::map<std::string, TensorPlan> m;
  for (const auto& t : plan) m.emplace(t.name, t);
  return m;
}

TEST(GenPresets, RealHyperparameters) {
  const Preset& q = find_preset("Qwen2.5-0.5B");  // case-insensitive
  EXPECT_EQ(q.arch, "qwen2");
  EXPECT_EQ(q.n_embd, 896);
  EXPECT_EQ(q.n_layer, 24);
  EXPECT_EQ(q.n_head, 14);
  EXPECT_EQ(q.n_head_kv, 2);
  EXPECT_EQ(q.head_dim, 64);
  EXPECT_EQ(q.n_ff, 4864);
  EXPECT_EQ(q.n_ctx, 32768);
  EXPECT_EQ(q.rope_base, 1e6f);
  EXPECT_EQ(q.rms_eps, 1e-6f);
  EXPECT_TRUE(q.tied && q.qkv_bias && !q.qk_norm);
  const Preset& q15 = find_preset("qwen2.5-1.5b");
  EXPECT_EQ(q15.n_embd, 1536);
  EXPECT_EQ(q15.n_layer, 28);
  EXPECT_EQ(q15.n_ff, 8960);
  const Preset& q3 = find_preset("qwen3-0.6b");
  EXPECT_EQ(q3.arch, "qwen3");
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.n_head, 16);
  EXPECT_EQ(q3.n_head_kv, 8);
  EXPECT_EQ(q3.n_ctx, 40960);
  EXPECT_TRUE(q3.qk_norm && !q3.qkv_bias && q3.tied);
  const Preset& l = find_preset("llama-3.2-1b");
  EXPECT_EQ(l.arch, "llama");
  EXPECT_EQ(l.n_embd, 2048);
  EXPECT_EQ(l.rope_base, 500000.0f);
  EXPECT_EQ(l.n_ctx, 131072);
  try {
    find_preset("gpt-5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("qwen2.5-0.5b"), std::string::npos) << e.what();
  }
}

TEST(GenPresets, TypeNamesAreCaseInsensitive) {
  EXPECT_EQ(parse_mix("F32"), WeightMix::F32);
  EXPECT_EQ(parse_mix("f16"), WeightMix::F16);
  EXPECT_EQ(parse_mix("Q8_0"), WeightMix::Q8_0);
  EXPECT_EQ(parse_mix("q4_0"), WeightMix::Q4_0);
  EXPECT_EQ(parse_mix("Q4_K"), WeightMix::Q4_K_M);
  EXPECT_EQ(parse_mix("q4_k_m"), WeightMix::Q4_K_M);
  EXPECT_THROW(parse_mix("q3_k"), Error);
  EXPECT_EQ(llama_file_type(WeightMix::Q4_K_M), 15u);
  EXPECT_EQ(parse_mix("Q5_K"), WeightMix::Q5_K_M);
  EXPECT_EQ(parse_mix("q6_k"), WeightMix::Q6_K);
  EXPECT_EQ(llama_file_type(WeightMix::Q5_K_M), 17u);
  EXPECT_EQ(llama_file_type(WeightMix::Q6_K), 18u);
  EXPECT_EQ(llama_file_type(WeightMix::Q8_0), 7u);
}

TEST(GenPlan, Qwen05Q4KMixWithFallbacks) {
  const Preset& p = find_preset("qwen2.5-0.5b");
  const auto plan = plan_tensors(p, WeightMix::Q4_K_M, 151936);
  EXPECT_EQ(plan.size(), 290u);  // embd + 24 x 12 + output_norm; tied: no output.weight
  const auto m = by_name(plan);
  EXPECT_EQ(m.count("output.weight"), 0u);
  // 896-wide rows are not a multiple of 256: Q6_K -> Q8_0, Q4_K -> Q5_0 (llama.cpp's fallback).
  EXPECT_EQ(m.at("token_embd.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(m.at("token_embd.weight").ne, (std::vector<int64_t>{896, 151936}));
  EXPECT_EQ(m.at("blk.0.attn_q.weight").type, GgmlType::Q5_0);
  EXPECT_EQ(m.at("blk.0.attn_v.weight").type, GgmlType::Q8_0);  // more bits, then fallback
  EXPECT_EQ(m.at("blk.3.attn_v.weight").type, GgmlType::Q5_0);
  // ffn_down rows are 4864 = 19 x 256: real K-quants.
  EXPECT_EQ(m.at("blk.0.ffn_down.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(m.at("blk.3.ffn_down.weight").type, GgmlType::Q4_K);
  EXPECT_EQ(m.at("blk.5.ffn_down.weight").type, GgmlType::Q6_K);   // (5 - 3) % 3 == 2
  EXPECT_EQ(m.at("blk.23.ffn_down.weight").type, GgmlType::Q6_K);  // last eighth
  EXPECT_EQ(m.at("blk.0.ffn_down.weight").ne, (std::vector<int64_t>{4864, 896}));
  EXPECT_EQ(m.at("blk.0.attn_k.weight").ne, (std::vector<int64_t>{896, 128}));
  EXPECT_EQ(m.at("blk.0.attn_q.bias").ne, (std::vector<int64_t>{896}));
  EXPECT_EQ(m.at("blk.0.attn_k.bias").type, GgmlType::F32);
  EXPECT_EQ(m.at("blk.0.attn_norm.weight").init, Init::Ones);
  EXPECT_EQ(m.at("output_norm.weight").type, GgmlType::F32);
}

TEST(GenPlan, Qwen3HasQkNormsAndWideHeads) {
  const auto m = by_name(plan_tensors(find_preset("qwen3-0.6b"), WeightMix::Q8_0, 1000));
  EXPECT_EQ(m.at("blk.0.attn_q.weight").ne, (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(m.at("blk.0.attn_k.weight").ne, (std::vector<int64_t>{1024, 1024}));
  EXPECT_EQ(m.at("blk.0.attn_output.weight").ne, (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(m.at("blk.27.attn_q_norm.weight").ne, (std::vector<int64_t>{128}));
  EXPECT_EQ(m.at("blk.27.attn_k_norm.weight").type, GgmlType::F32);
  EXPECT_EQ(m.count("blk.0.attn_q.bias"), 0u);
  EXPECT_EQ(m.at("blk.0.ffn_gate.weight").type, GgmlType::Q8_0);
}

// Gemma 2 2B / Gemma 3 1B: published shapes (head_dim 256 apart from n_embd / n_head), post
// norms on every layer, gemma3's Q/K norms, tied embeddings, and the window / cap keys.
TEST(GenPlan, GemmaShapesNormsAndKeys) {
  const Preset& g2 = find_preset("gemma-2-2b");
  const auto m2 = by_name(plan_tensors(g2, WeightMix::Q8_0, 256000));
  EXPECT_EQ(m2.at("blk.0.attn_q.weight").ne, (std::vector<int64_t>{2304, 2048}));
  EXPECT_EQ(m2.at("blk.0.attn_k.weight").ne, (std::vector<int64_t>{2304, 1024}));
  EXPECT_EQ(m2.at("blk.25.post_attention_norm.weight").ne, (std::vector<int64_t>{2304}));
  EXPECT_EQ(m2.at("blk.25.post_ffw_norm.weight").init, Init::Ones);
  EXPECT_EQ(m2.count("blk.0.attn_q_norm.weight"), 0u);
  EXPECT_EQ(m2.count("output.weight"), 0u);
  std::map<std::string, double> kv2;
  for (const auto& [k, v] : model_metadata(g2, WeightMix::Q8_0, Vocab{}, 1)) {
    double d = 0;
    if (const auto* u = std::get_if<uint64_t>(&v.scalar)) d = static_cast<double>(*u);
    if (const auto* f = std::get_if<double>(&v.scalar)) d = *f;
    kv2[k] = d;
  }
  EXPECT_EQ(kv2.at("gemma2.attention.sliding_window"), 4096);
  EXPECT_EQ(kv2.at("gemma2.attn_logit_softcapping"), 50);
  EXPECT_EQ(kv2.at("gemma2.final_logit_softcapping"), 30);
  EXPECT_EQ(kv2.at("gemma2.attention.key_length"), 256);
  const Preset& g3 = find_preset("gemma-3-1b");
  const auto m3 = by_name(plan_tensors(g3, WeightMix::F16, 262144));
  EXPECT_EQ(m3.at("blk.0.attn_q.weight").ne, (std::vector<int64_t>{1152, 1024}));
  EXPECT_EQ(m3.at("blk.0.attn_k.weight").ne, (std::vector<int64_t>{1152, 256}));
  EXPECT_EQ(m3.at("blk.0.attn_q_norm.weight").ne, (std::vector<int64_t>{256}));
  EXPECT_EQ(m3.count("blk.0.post_ffw_norm.weight"), 1u);
  EXPECT_EQ(g3.sliding_window, 512);
  EXPECT_EQ(g3.final_softcap, 0.0f);
}

TEST(GenPlan, Llama1BQ4KUsesRealKQuants) {
  const auto m = by_name(plan_tensors(find_preset("llama-3.2-1b"), WeightMix::Q4_K_M, 128256));
  EXPECT_EQ(m.at("token_embd.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(m.at("blk.0.attn_q.weight").type, GgmlType::Q4_K);
  EXPECT_EQ(m.at("blk.0.ffn_down.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(m.at("blk.0.ffn_gate.weight").ne, (std::vector<int64_t>{2048, 8192}));
  const auto m5 = by_name(plan_tensors(find_preset("llama-3.2-1b"), WeightMix::Q5_K_M, 128256));
  EXPECT_EQ(m5.at("blk.1.attn_q.weight").type, GgmlType::Q5_K);
  EXPECT_EQ(m5.at("blk.0.ffn_down.weight").type, GgmlType::Q6_K);
  const auto m6 = by_name(plan_tensors(find_preset("llama-3.2-1b"), WeightMix::Q6_K, 128256));
  EXPECT_EQ(m6.at("blk.1.ffn_up.weight").type, GgmlType::Q6_K);
}

// Llama 3.2's rope_freqs.weight as convert_hf_to_gguf.py writes it (head_dim 64, base 500000,
// factor 32, low 1, high 4, original context 8192): 32 pair factors, the fast pairs 1, the slow
// ones 32, the smooth band between them strictly increasing. Values from Python with the
// converter's formula: pairs 0-14 are 1, 15 is 1.6513, 16 is 3.2923, 17 is 9.6667, 18+ are 32.
TEST(GenPlan, Llama32HasLlama3RopeFreqs) {
  const auto m = by_name(plan_tensors(find_preset("llama-3.2-1b"), WeightMix::F32, 128256));
  const TensorPlan& t = m.at("rope_freqs.weight");
  EXPECT_EQ(t.type, GgmlType::F32);
  EXPECT_EQ(t.init, Init::Values);
  ASSERT_EQ(t.values.size(), 32u);
  for (int i = 0; i <= 14; ++i) EXPECT_EQ(t.values[i], 1.0f) << i;
  EXPECT_NEAR(t.values[15], 1.6513, 1e-3);
  EXPECT_NEAR(t.values[16], 3.2923, 1e-3);
  EXPECT_NEAR(t.values[17], 9.6667, 1e-3);
  for (int i = 18; i < 32; ++i) EXPECT_EQ(t.values[i], 32.0f) << i;
  // Presets without Llama 3 scaling write no such tensor.
  EXPECT_EQ(by_name(plan_tensors(find_preset("qwen2.5-0.5b"), WeightMix::F32, 1000))
                .count("rope_freqs.weight"),
            0u);
}

const gguf::Value& value(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) throw Error(ErrorKind::InvalidFile, "missing " + key);
  return *v;
}

// Generates a tiny preset and checks every key type, tensor shape and type against the plan.
void check_round_trip(const std::string& preset, const std::string& type) {
  SCOPED_TRACE(preset + " " + type);
  GenOptions o;
  o.preset = preset;
  o.type = type;
  o.out_path = tmp_path(preset + "_" + type);
  o.n_threads = 2;
  const GenSummary s = generate(o);
  const gguf::File f = gguf::File::open(o.out_path);
  const Preset& p = find_preset(preset);
  const std::string a = p.arch + ".";
  EXPECT_EQ(f.get_string("general.architecture"), p.arch);
  EXPECT_EQ(value(f, "general.file_type").type, gguf::ValueType::U32);
  EXPECT_EQ(f.get_u32("general.file_type"), llama_file_type(parse_mix(type)));
  for (const char* k : {"context_length", "embedding_length", "block_count", "feed_forward_length",
                        "attention.head_count", "attention.head_count_kv"})
    EXPECT_EQ(value(f, a + k).type, gguf::ValueType::U32) << k;
  EXPECT_EQ(value(f, a + "rope.freq_base").type, gguf::ValueType::F32);
  EXPECT_EQ(value(f, a + "attention.layer_norm_rms_epsilon").type, gguf::ValueType::F32);
  EXPECT_EQ(f.get_u32(a + "embedding_length"), p.n_embd);
  EXPECT_EQ(f.get_u32(a + "block_count"), p.n_layer);
  EXPECT_EQ(f.get_u32(a + "attention.head_count_kv"), p.n_head_kv);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float(a + "rope.freq_base")), p.rope_base);
  if (p.arch == "qwen3") {
    EXPECT_EQ(f.get_u32(a + "attention.key_length"), p.head_dim);
  }
  const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
  EXPECT_EQ(static_cast<int64_t>(tokens.size()), s.n_vocab);
  const auto plan = plan_tensors(p, parse_mix(type), s.n_vocab);
  ASSERT_EQ(f.tensors().size(), plan.size());
  for (const auto& tp : plan) {
    const gguf::TensorInfo* t = f.find_tensor(tp.name);
    ASSERT_NE(t, nullptr) << tp.name;
    EXPECT_EQ(t->type, tp.type) << tp.name;
    EXPECT_EQ(t->n_dims, static_cast<int>(tp.ne.size())) << tp.name;
    for (size_t d = 0; d < tp.ne.size(); ++d) EXPECT_EQ(t->ne[d], tp.ne[d]) << tp.name;
  }
  // Weights look like N(0, 0.02) after dequantization; norms are exactly 1.
  const gguf::TensorInfo* w = f.find_tensor("blk.0.ffn_up.weight");
  std::vector<float> row(static_cast<size_t>(w->ne[0] * w->ne[1]));
  dequantize_row(w->type, w->data, row.data(), static_cast<int64_t>(row.size()));
  double sum = 0, sq = 0;
  for (float x : row) {
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  const double mean = sum / row.size(), sd = std::sqrt(sq / row.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02, 0.003);
  const gguf::TensorInfo* n = f.find_tensor("output_norm.weight");
  for (int64_t i = 0; i < n->ne[0]; ++i)
    EXPECT_EQ(reinterpret_cast<const float*>(n->data)[i], 1.0f);
  std::filesystem::remove(o.out_path);
}

TEST(GenRoundTrip, TinyPresetsEveryType) {
  for (const char* preset :
       {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3"})
    for (const char* type : {"f32", "F16", "q8_0", "q4_0", "Q4_K"}) check_round_trip(preset, type);
}

TEST(GenRoundTrip, SynthesisedVocabularies) {
  GenOptions o;
  o.preset = "tiny-qwen2";
  o.out_path = tmp_path("vocab");
  generate(o);
  {
    const gguf::File f = gguf::File::open(o.out_path);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_GT(f.get_string_array("tokenizer.ggml.merges").size(), 0u);
    EXPECT_NE(f.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);
    const auto& toks = f.get_string_array("tokenizer.ggml.tokens");
    EXPECT_EQ(toks[f.get_u32("tokenizer.ggml.eos_token_id")], "<|im_end|>");
    EXPECT_EQ(std::set<std::string>(toks.begin(), toks.end()).size(), toks.size());
    EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
    EXPECT_NE(f.find_tensor("blk.1.attn_v.bias"), nullptr);
  }
  o.preset = "tiny-llama";
  generate(o);
  {
    const gguf::File f = gguf::File::open(o.out_path);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores").size(),
              f.get_string_array("tokenizer.ggml.tokens").size());
    const auto& toks = f.get_string_array("tokenizer.ggml.tokens");
    EXPECT_EQ(toks[3], "<0x00>");
    EXPECT_EQ(std::set<std::string>(toks.begin(), toks.end()).size(), toks.size());
    EXPECT_NE(f.find_tensor("output.weight"), nullptr);  // tiny-llama is untied
  }
  std::filesystem::remove(o.out_path);
}

TEST(GenRoundTrip, LayersKeepsTheFirstBlocksOnly) {
  GenOptions o;
  o.preset = "tiny-qwen2";
  o.type = "q4_k";
  o.n_layer = 1;
  o.out_path = tmp_path("layers");
  ASSERT_GT(find_preset(o.preset).n_layer, 1);
  generate(o);
  {
    const gguf::File f = gguf::File::open(o.out_path);
    EXPECT_EQ(f.get_int("qwen2.block_count"), 1);
    EXPECT_NE(f.find_tensor("blk.0.ffn_down.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.1.attn_q.weight"), nullptr);
    EXPECT_NE(f.find_tensor("output_norm.weight"), nullptr);
  }
  std::filesystem::remove(o.out_path);
  o.n_layer = find_preset(o.preset).n_layer + 1;
  EXPECT_THROW(generate(o), Error);
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
}

TEST(GenRoundTrip, DeterministicAcrossThreadCounts) {
  auto bytes = [](int threads, uint64_t seed) {
    GenOptions o;
    o.preset = "tiny-qwen3";
    o.type = "q4_k";
    o.seed = seed;
    o.n_threads = threads;
    o.out_path = tmp_path("det" + std::to_string(threads) + "_" + std::to_string(seed));
    generate(o);
    std::vector<uint8_t> b(std::filesystem::file_size(o.out_path));
    FILE* f = fopen(o.out_path.c_str(), "rb");
    EXPECT_EQ(fread(b.data(), 1, b.size(), f), b.size());
    fclose(f);
    std::filesystem::remove(o.out_path);
    return b;
  };
  const auto a = bytes(1, 7);
  EXPECT_EQ(a, bytes(3, 7));
  EXPECT_NE(a, bytes(1, 8));
}

TEST(GenRoundTrip, CopiesTokenizerFromVocabFile) {
  const std::filesystem::path vocab =
      std::filesystem::path(MINFER_SHARED_DIR) / "vocab" / "ggml-vocab-llama-bpe.gguf";
  if (!std::filesystem::exists(vocab)) GTEST_SKIP() << "no " << vocab << " (../shared absent)";
  GenOptions o;
  o.preset = "tiny-qwen2";
  o.type = "q8_0";
  o.vocab_path = vocab.string();
  o.out_path = tmp_path("bpe");
  const GenSummary s = generate(o);
  const gguf::File src = gguf::File::open(vocab.string());
  const gguf::File f = gguf::File::open(o.out_path);
  EXPECT_EQ(s.n_vocab, 128256);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->ne[1], 128256);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges"),
            src.get_string_array("tokenizer.ggml.merges"));
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type"),
            src.get_int_array("tokenizer.ggml.token_type"));
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "llama-bpe");
  EXPECT_EQ(f.get_u32("tokenizer.ggml.bos_token_id"), src.get_u32("tokenizer.ggml.bos_token_id"));
  EXPECT_EQ(f.get_u32("qwen2.vocab_size"), 128256u);
  std::filesystem::remove(o.out_path);
}

TEST(GenErrors, BigPresetNeedsVocab) {
  GenOptions o;
  o.preset = "qwen2.5-0.5b";
  o.out_path = tmp_path("novocab");
  try {
    generate(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
}

// ---- the command line ----

int run(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(GenCli, TinyLlamaWithoutVocabAndErrors) {
  if (!std::filesystem::exists(MINFER_BINARY)) GTEST_SKIP() << "minfer binary not built";
  const std::string path = tmp_path("cli");
  std::string out;
  ASSERT_EQ(
      run(std::string(MINFER_BINARY) + " gen --preset tiny-llama --type F32 -o " + path, &out), 0)
      << out;
  {
    const gguf::File f = gguf::File::open(path);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, GgmlType::F32);
  }
  std::filesystem::remove(path);
  out.clear();
  EXPECT_NE(run(std::string(MINFER_BINARY) + " gen --preset tiny-llama --type q9 -o " + path, &out),
            0);
  EXPECT_NE(out.find("unknown --type 'q9'"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run(std::string(MINFER_BINARY) + " gen --preset nope -o " + path, &out), 0);
  EXPECT_NE(out.find("unknown preset 'nope'"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace minfer::gen
