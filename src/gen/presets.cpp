// Presets (published hyperparameters), the tensor plan and the model metadata.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/error.h"
#include "gen/gen.h"

namespace minfer::gen {
namespace {

Preset make(std::string name, std::string arch, std::string display, int64_t embd, int64_t layers,
            int64_t heads, int64_t kv_heads, int64_t ff, int64_t ctx, float rope, float eps) {
  Preset p;
  p.name = std::move(name);
  p.arch = std::move(arch);
  p.display_name = std::move(display);
  p.n_embd = embd;
  p.n_layer = layers;
  p.n_head = heads;
  p.n_head_kv = kv_heads;
  p.head_dim = embd / heads;
  p.n_ff = ff;
  p.n_ctx = ctx;
  p.rope_base = rope;
  p.rms_eps = eps;
  return p;
}

// Gemma 2 / 3: published shapes (config.json of google/gemma-2-2b and gemma-3-1b-pt), and tiny
// ones whose windows are small enough that the fidelity positions (up to 4000) cross them.
void add_gemma_presets(std::vector<Preset>& v) {
  // Gemma 2 2B: head_dim 256 (not 2304 / 8), window 4096 on the even layers, soft-capping 50
  // (attention scores) and 30 (logits), tied embeddings.
  Preset g2 = make("gemma-2-2b", "gemma2", "Gemma-2-2B (random weights)", 2304, 26, 8, 4, 9216,
                   8192, 10000.0f, 1e-6f);
  g2.head_dim = 256;
  g2.tied = true;
  g2.sliding_window = 4096;
  g2.attn_softcap = 50.0f;
  g2.final_softcap = 30.0f;
  v.push_back(g2);
  // Gemma 3 1B: Q/K norms, window 512 on five layers of every six (local rope base 10000,
  // global 1e6), no soft-capping.
  Preset g3 = make("gemma-3-1b", "gemma3", "Gemma-3-1B (random weights)", 1152, 26, 4, 1, 6912,
                   32768, 1e6f, 1e-6f);
  g3.head_dim = 256;
  g3.tied = g3.qk_norm = true;
  g3.sliding_window = 512;
  v.push_back(g3);
  // Tiny: head_dim 32 != 64 / 4 (key_length is read), window 96 (not a multiple of the
  // attention kernel's 64-position tiles). Caps smaller than the real 50 / 30 so that they
  // bite on these logits (which reach ~10-20 at weight std 0.25).
  Preset tg2 = make("tiny-gemma2", "gemma2", "tiny-gemma2 (random weights)", 64, 4, 4, 2, 192, 4096,
                    10000.0f, 1e-6f);
  tg2.head_dim = 32;
  tg2.tiny = tg2.tied = true;
  tg2.sliding_window = 96;
  tg2.attn_softcap = 20.0f;
  tg2.final_softcap = 10.0f;
  v.push_back(tg2);
  // Period 2 (attention.sliding_window_pattern) so that two layers hold a windowed one (local
  // rope base 10000) and a global one (base 1e6); window 80.
  Preset tg3 = make("tiny-gemma3", "gemma3", "tiny-gemma3 (random weights)", 64, 4, 4, 2, 192, 4096,
                    1e6f, 1e-6f);
  tg3.head_dim = 32;
  tg3.tiny = tg3.tied = tg3.qk_norm = true;
  tg3.sliding_window = 80;
  tg3.swa_period = 2;
  v.push_back(tg3);
}

// Phi-3 / Phi-3.5 mini (config.json: hidden 3072, 32 layers, 32 heads, intermediate 8192,
// vocabulary 32064, rope_theta 10000, rms_norm_eps 1e-5; sliding_window 2047 for mini-4k,
// 262144 for the 128k models, which llama.cpp reads and ignores) and tiny test versions.
void add_phi3_presets(std::vector<Preset>& v) {
  Preset p4 = make("phi-3-mini-4k", "phi3", "Phi-3-mini-4k-instruct (random weights)", 3072, 32, 32,
                   32, 8192, 4096, 10000.0f, 1e-5f);
  p4.sliding_window = 2047;
  v.push_back(p4);
  // Phi-3.5-mini-instruct: LongRoPE over an original 4096-token context to 131072.
  Preset p35 = make("phi-3.5-mini", "phi3", "Phi-3.5-mini-instruct (random weights)", 3072, 32, 32,
                    32, 8192, 131072, 10000.0f, 1e-5f);
  p35.sliding_window = 262144;
  p35.longrope_orig_ctx = 4096;
  v.push_back(p35);
  // GQA (4 heads, 2 KV heads, as Phi-3-medium's 40 / 10) so the fused QKV's k and v offsets
  // differ from an MHA split.
  Preset t = make("tiny-phi3", "phi3", "tiny-phi3 (random weights)", 64, 2, 4, 2, 192, 4096,
                  10000.0f, 1e-5f);
  t.tiny = true;
  t.sliding_window = 2047;
  v.push_back(t);
  // LongRoPE over an original 1024-token context to 8192: a 4001-token run uses the long
  // factors, a context up to 1024 the short ones.
  Preset tl = make("tiny-phi3-longrope", "phi3", "tiny-phi3-longrope (random weights)", 64, 2, 4, 2,
                   192, 8192, 10000.0f, 1e-5f);
  tl.tiny = true;
  tl.sliding_window = 262144;
  tl.longrope_orig_ctx = 1024;
  v.push_back(tl);
}

std::vector<Preset> build_presets() {
  std::vector<Preset> v;
  // Qwen2.5: tied embeddings (0.5B, 1.5B), QKV biases, NeoX RoPE (implied by the arch).
  Preset q05 = make("qwen2.5-0.5b", "qwen2", "Qwen2.5-0.5B (random weights)", 896, 24, 14, 2, 4864,
                    32768, 1e6f, 1e-6f);
  q05.tied = q05.qkv_bias = true;
  v.push_back(q05);
  Preset q15 = make("qwen2.5-1.5b", "qwen2", "Qwen2.5-1.5B (random weights)", 1536, 28, 12, 2, 8960,
                    32768, 1e6f, 1e-6f);
  q15.tied = q15.qkv_bias = true;
  v.push_back(q15);
  Preset q3 = make("qwen3-0.6b", "qwen3", "Qwen3-0.6B (random weights)", 1024, 28, 16, 8, 3072,
                   40960, 1e6f, 1e-6f);
  q3.head_dim = 128;  // Qwen3 decouples head_dim from n_embd / n_head
  q3.tied = q3.qk_norm = true;
  v.push_back(q3);
  Preset l1 = make("llama-3.2-1b", "llama", "Llama-3.2-1B (random weights)", 2048, 16, 32, 8, 8192,
                   131072, 500000.0f, 1e-5f);
  l1.tied = true;
  // Llama 3.1 / 3.2 config.json: rope_scaling {rope_type llama3, factor 32, low_freq_factor 1,
  // high_freq_factor 4, original_max_position_embeddings 8192}.
  l1.llama3_rope_factor = 32.0f;
  v.push_back(l1);
  // Mistral and SmolLM are llama-architecture files (llama.cpp's converter writes them as
  // general.architecture = llama): same graph, other shapes. Mistral-7B-v0.3 has no sliding
  // window (config sliding_window null); v0.1's 4096 would be refused (model/support.h).
  Preset sm = make("smollm2-135m", "llama", "SmolLM2-135M (random weights)", 576, 30, 9, 3, 1536,
                   8192, 100000.0f, 1e-5f);
  sm.tied = true;
  v.push_back(sm);
  v.push_back(make("mistral-7b-v0.3", "llama", "Mistral-7B-v0.3 (random weights)", 4096, 32, 32, 8,
                   14336, 32768, 1e6f, 1e-5f));
  // Tiny test presets: seconds to generate, shapes that exercise each architecture's options.
  Preset tl = make("tiny-llama", "llama", "tiny-llama (random weights)", 64, 2, 4, 2, 192, 512,
                   10000.0f, 1e-5f);
  tl.tiny = true;
  v.push_back(tl);
  // Llama 3 rope scaling at tiny size: head_dim 16 gives 8 pairs, three of them scaled by 32,
  // one smoothly (wavelengths 6 .. 110K against the 2048 / 8192 bounds).
  Preset tl3 = make("tiny-llama3", "llama", "tiny-llama3 (random weights)", 64, 2, 4, 2, 192, 4096,
                    500000.0f, 1e-5f);
  tl3.tiny = tl3.tied = true;
  tl3.llama3_rope_factor = 32.0f;
  v.push_back(tl3);
  // Linear rope scaling (rope.scaling.type linear, factor 2): the older long-context recipe.
  Preset tll = make("tiny-llama-linear", "llama", "tiny-llama-linear (random weights)", 64, 2, 4, 2,
                    192, 1024, 10000.0f, 1e-5f);
  tll.tiny = true;
  tll.rope_scaling = "linear";
  tll.rope_scaling_factor = 2.0f;
  v.push_back(tll);
  Preset tq2 = make("tiny-qwen2", "qwen2", "tiny-qwen2 (random weights)", 64, 2, 4, 2, 192, 512,
                    1e6f, 1e-6f);
  tq2.tiny = tq2.tied = tq2.qkv_bias = true;
  v.push_back(tq2);
  // YaRN at tiny size: factor 4 over an original 512-token context (Qwen2.5's documented
  // long-context setting, factor 4 over 32768, scaled down). Same shapes and base as
  // tiny-qwen2, so the same seed gives the same weights and only the scaling differs; the
  // ramp runs over pairs 0..3 of its 16-wide heads.
  Preset tqy = make("tiny-qwen2-yarn", "qwen2", "tiny-qwen2-yarn (random weights)", 64, 2, 4, 2,
                    192, 2048, 1e6f, 1e-6f);
  tqy.tiny = tqy.tied = tqy.qkv_bias = true;
  tqy.rope_scaling = "yarn";
  tqy.rope_scaling_factor = 4.0f;
  tqy.rope_scaling_orig_ctx = 512;
  v.push_back(tqy);
  add_phi3_presets(v);
  // 256 wide so the K-quant paths (not only their fallbacks) are exercised.
  add_gemma_presets(v);
  Preset tq3 = make("tiny-qwen3", "qwen3", "tiny-qwen3 (random weights)", 256, 2, 4, 2, 512, 512,
                    1e6f, 1e-6f);
  tq3.head_dim = 128;
  tq3.tiny = tq3.tied = tq3.qk_norm = true;
  v.push_back(tq3);
  return v;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// llama.cpp's Q4_K_M gives these layers more bits: the first and last eighth, and every third
// layer in between.
bool more_bits_layer(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// A K-quant needs rows that are a multiple of 256; otherwise use llama.cpp's fallback.
GgmlType fit_row(GgmlType t, int64_t row) {
  if (row % QK_K == 0) return t;
  if (t == GgmlType::Q4_K) return GgmlType::Q5_0;
  if (t == GgmlType::Q5_K || t == GgmlType::Q6_K) return GgmlType::Q8_0;
  return t;
}

GgmlType weight_type(WeightMix mix, std::string_view role, int64_t layer, int64_t n_layer) {
  switch (mix) {
    case WeightMix::F32:
      return GgmlType::F32;
    case WeightMix::F16:
      return GgmlType::F16;
    case WeightMix::Q8_0:
      return GgmlType::Q8_0;
    case WeightMix::Q4_0:
      return GgmlType::Q4_0;
    case WeightMix::Q4_K_M:
    case WeightMix::Q5_K_M:
      if (role == "token_embd" || role == "output") return GgmlType::Q6_K;
      if ((role == "attn_v" || role == "ffn_down") && more_bits_layer(layer, n_layer))
        return GgmlType::Q6_K;
      return mix == WeightMix::Q4_K_M ? GgmlType::Q4_K : GgmlType::Q5_K;
    case WeightMix::Q6_K:
      return GgmlType::Q6_K;
  }
  return GgmlType::F32;
}

}  // namespace

std::vector<float> llama3_rope_factors(const Preset& p) {
  if (p.llama3_rope_factor <= 0.0f) return {};
  // convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors), in the same float32 order.
  const float old_ctx = static_cast<float>(p.llama3_orig_ctx);
  const float low_wavelen = old_ctx / p.llama3_low_freq_factor;
  const float high_wavelen = old_ctx / p.llama3_high_freq_factor;
  std::vector<float> f;
  for (int64_t i = 0; i < p.head_dim; i += 2) {
    const float freq =
        1.0f / std::pow(p.rope_base, static_cast<float>(i) / static_cast<float>(p.head_dim));
    const float wavelen = 2.0f * static_cast<float>(M_PI) / freq;
    if (wavelen < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      f.push_back(p.llama3_rope_factor);
    } else {
      const float smooth = (old_ctx / wavelen - p.llama3_low_freq_factor) /
                           (p.llama3_high_freq_factor - p.llama3_low_freq_factor);
      f.push_back(1.0f / ((1.0f - smooth) / p.llama3_rope_factor + smooth));
    }
  }
  return f;
}

std::vector<float> phi3_rope_factors(const Preset& p, bool long_factors) {
  if (p.arch != "phi3" || p.longrope_orig_ctx <= 0) return {};
  const int64_t n = p.head_dim / 2;
  const double scale = static_cast<double>(p.n_ctx) / static_cast<double>(p.longrope_orig_ctx);
  std::vector<float> f;
  for (int64_t i = 0; i < n; ++i) {
    const double x = n > 1 ? static_cast<double>(i) / static_cast<double>(n - 1) : 0.0;
    f.push_back(static_cast<float>(long_factors ? 1.0 + (scale - 1.0) * x * x : 1.0 + 0.2 * x));
  }
  return f;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> v = build_presets();
  return v;
}

const Preset& find_preset(std::string_view name) {
  const std::string n = lower(name);
  std::string names;
  for (const auto& p : presets()) {
    if (p.name == n) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  fail(ErrorKind::InvalidArgument, "unknown preset '{}' (known: {})", name, names);
}

WeightMix parse_mix(std::string_view name) {
  const std::string n = lower(name);
  if (n == "f32") return WeightMix::F32;
  if (n == "f16") return WeightMix::F16;
  if (n == "q8_0") return WeightMix::Q8_0;
  if (n == "q4_0") return WeightMix::Q4_0;
  if (n == "q4_k" || n == "q4_k_m") return WeightMix::Q4_K_M;
  if (n == "q5_k" || n == "q5_k_m") return WeightMix::Q5_K_M;
  if (n == "q6_k") return WeightMix::Q6_K;
  fail(ErrorKind::InvalidArgument,
       "unknown --type '{}' (known: f32, f16, q8_0, q4_0, q4_k, q5_k, q6_k)", name);
}

std::string_view mix_name(WeightMix m) {
  switch (m) {
    case WeightMix::F32:
      return "f32";
    case WeightMix::F16:
      return "f16";
    case WeightMix::Q8_0:
      return "q8_0";
    case WeightMix::Q4_0:
      return "q4_0";
    case WeightMix::Q4_K_M:
      return "q4_K_M";
    case WeightMix::Q5_K_M:
      return "q5_K_M";
    case WeightMix::Q6_K:
      return "q6_K";
  }
  return "?";
}

uint32_t llama_file_type(WeightMix m) {
  switch (m) {
    case WeightMix::F32:
      return 0;  // LLAMA_FTYPE_ALL_F32
    case WeightMix::F16:
      return 1;  // LLAMA_FTYPE_MOSTLY_F16
    case WeightMix::Q4_0:
      return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
    case WeightMix::Q8_0:
      return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case WeightMix::Q4_K_M:
      return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    case WeightMix::Q5_K_M:
      return 17;  // LLAMA_FTYPE_MOSTLY_Q5_K_M
    case WeightMix::Q6_K:
      return 18;  // LLAMA_FTYPE_MOSTLY_Q6_K
  }
  return 0;
}

std::vector<TensorPlan> plan_tensors(const Preset& p, WeightMix mix, int64_t n_vocab) {
  std::vector<TensorPlan> v;
  const int64_t q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim;
  auto weight = [&](std::string name, std::string_view role, int64_t layer, int64_t ne0,
                    int64_t ne1) {
    const GgmlType t = fit_row(weight_type(mix, role, layer, p.n_layer), ne0);
    v.push_back({std::move(name), t, {ne0, ne1}, Init::Normal});
  };
  auto vec = [&](std::string name, int64_t n, Init init) {
    v.push_back({std::move(name), GgmlType::F32, {n}, init});
  };
  weight("token_embd.weight", "token_embd", 0, p.n_embd, n_vocab);
  if (std::vector<float> ff = llama3_rope_factors(p); !ff.empty()) {
    const auto n = static_cast<int64_t>(ff.size());
    v.push_back({"rope_freqs.weight", GgmlType::F32, {n}, Init::Values, std::move(ff)});
  }
  for (bool lf : {true, false}) {
    if (std::vector<float> ff = phi3_rope_factors(p, lf); !ff.empty()) {
      const auto n = static_cast<int64_t>(ff.size());
      v.push_back({lf ? "rope_factors_long.weight" : "rope_factors_short.weight",
                   GgmlType::F32,
                   {n},
                   Init::Values,
                   std::move(ff)});
    }
  }
  for (int64_t i = 0; i < p.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    if (p.arch == "phi3") {
      // llama.cpp's phi3 tensors: fused [q | k | v] and [gate | up] projections.
      vec(b + "attn_norm.weight", p.n_embd, Init::Ones);
      weight(b + "attn_qkv.weight", "attn_qkv", i, p.n_embd, q_dim + 2 * kv_dim);
      weight(b + "attn_output.weight", "attn_output", i, q_dim, p.n_embd);
      vec(b + "ffn_norm.weight", p.n_embd, Init::Ones);
      weight(b + "ffn_up.weight", "ffn_up", i, p.n_embd, 2 * p.n_ff);
      weight(b + "ffn_down.weight", "ffn_down", i, p.n_ff, p.n_embd);
      continue;
    }
    vec(b + "attn_norm.weight", p.n_embd, Init::Ones);
    weight(b + "attn_q.weight", "attn_q", i, p.n_embd, q_dim);
    if (p.qkv_bias) vec(b + "attn_q.bias", q_dim, Init::SmallNormal);
    weight(b + "attn_k.weight", "attn_k", i, p.n_embd, kv_dim);
    if (p.qkv_bias) vec(b + "attn_k.bias", kv_dim, Init::SmallNormal);
    weight(b + "attn_v.weight", "attn_v", i, p.n_embd, kv_dim);
    if (p.qkv_bias) vec(b + "attn_v.bias", kv_dim, Init::SmallNormal);
    if (p.qk_norm) {
      vec(b + "attn_q_norm.weight", p.head_dim, Init::Ones);
      vec(b + "attn_k_norm.weight", p.head_dim, Init::Ones);
    }
    weight(b + "attn_output.weight", "attn_output", i, q_dim, p.n_embd);
    vec(b + "ffn_norm.weight", p.n_embd, Init::Ones);
    weight(b + "ffn_gate.weight", "ffn_gate", i, p.n_embd, p.n_ff);
    weight(b + "ffn_up.weight", "ffn_up", i, p.n_embd, p.n_ff);
    weight(b + "ffn_down.weight", "ffn_down", i, p.n_ff, p.n_embd);
    if (p.arch.rfind("gemma", 0) == 0) {
      vec(b + "post_attention_norm.weight", p.n_embd, Init::Ones);
      vec(b + "post_ffw_norm.weight", p.n_embd, Init::Ones);
    }
  }
  vec("output_norm.weight", p.n_embd, Init::Ones);
  if (!p.tied) weight("output.weight", "output", 0, p.n_embd, n_vocab);
  return v;
}

namespace {
// The phi3 keys convert_hf_to_gguf.py's Phi3MiniModel writes beyond the common ones.
void add_phi3_metadata(const Preset& p, std::vector<std::pair<std::string, gguf::Value>>& kv) {
  const int64_t orig = p.longrope_orig_ctx > 0 ? p.longrope_orig_ctx : p.n_ctx;
  kv.emplace_back("phi3.rope.scaling.original_context_length",
                  gguf::Value::u32(static_cast<uint32_t>(orig)));
  kv.emplace_back("phi3.attention.sliding_window",
                  gguf::Value::u32(static_cast<uint32_t>(p.sliding_window)));
  if (p.longrope_orig_ctx > 0) {
    const double scale = static_cast<double>(p.n_ctx) / static_cast<double>(orig);
    const double attn =
        scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(double(orig))) : 1.0;
    kv.emplace_back("phi3.rope.scaling.attn_factor", gguf::Value::f32(static_cast<float>(attn)));
  }
}
}  // namespace

std::vector<std::pair<std::string, gguf::Value>> model_metadata(const Preset& p, WeightMix mix,
                                                                const Vocab& vocab, uint64_t seed) {
  using gguf::Value;
  std::vector<std::pair<std::string, Value>> kv;
  const std::string a = p.arch + ".";
  auto u32 = [](int64_t x) { return Value::u32(static_cast<uint32_t>(x)); };
  kv.emplace_back("general.architecture", Value::string(p.arch));
  kv.emplace_back("general.name", Value::string(p.display_name));
  kv.emplace_back("general.description",
                  Value::string("random weights written by minfer gen (preset " + p.name +
                                ", type " + std::string(mix_name(mix)) + ", seed " +
                                std::to_string(seed) + "); its text is noise"));
  kv.emplace_back("general.file_type", Value::u32(llama_file_type(mix)));
  kv.emplace_back("general.quantization_version", Value::u32(2));
  kv.emplace_back(a + "vocab_size", u32(vocab.n_vocab));
  kv.emplace_back(a + "context_length", u32(p.n_ctx));
  kv.emplace_back(a + "embedding_length", u32(p.n_embd));
  kv.emplace_back(a + "block_count", u32(p.n_layer));
  kv.emplace_back(a + "feed_forward_length", u32(p.n_ff));
  kv.emplace_back(a + "attention.head_count", u32(p.n_head));
  kv.emplace_back(a + "attention.head_count_kv", u32(p.n_head_kv));
  kv.emplace_back(a + "rope.freq_base", Value::f32(p.rope_base));
  kv.emplace_back(a + "rope.dimension_count", u32(p.head_dim));
  kv.emplace_back(a + "attention.layer_norm_rms_epsilon", Value::f32(p.rms_eps));
  if (!p.rope_scaling.empty()) {
    kv.emplace_back(a + "rope.scaling.type", Value::string(p.rope_scaling));
    kv.emplace_back(a + "rope.scaling.factor", Value::f32(p.rope_scaling_factor));
    if (p.rope_scaling_orig_ctx > 0)
      kv.emplace_back(a + "rope.scaling.original_context_length", u32(p.rope_scaling_orig_ctx));
  }
  if (p.sliding_window > 0) kv.emplace_back(a + "attention.sliding_window", u32(p.sliding_window));
  if (p.swa_period > 0) kv.emplace_back(a + "attention.sliding_window_pattern", u32(p.swa_period));
  if (p.attn_softcap > 0.0f)
    kv.emplace_back(a + "attn_logit_softcapping", Value::f32(p.attn_softcap));
  if (p.final_softcap > 0.0f)
    kv.emplace_back(a + "final_logit_softcapping", Value::f32(p.final_softcap));
  if (p.head_dim != p.n_embd / p.n_head || p.arch == "qwen3") {
    kv.emplace_back(a + "attention.key_length", u32(p.head_dim));
    kv.emplace_back(a + "attention.value_length", u32(p.head_dim));
  }
  if (p.arch == "phi3") add_phi3_metadata(p, kv);
  for (const auto& e : vocab.kv) kv.push_back(e);
  return kv;
}

}  // namespace minfer::gen
