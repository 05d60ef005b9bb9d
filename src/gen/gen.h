// Model generator: GGUF files with a real architecture's hyperparameters, llama.cpp's tensor
// names and metadata keys, random weights (normal(0, 0.02); norms 1; biases normal(0, 0.002)),
// and a tokenizer copied from a vocabulary GGUF (or synthesised for tiny test presets).
//
// The work is split into plain data that can be printed and tested (Preset, TensorPlan,
// metadata) and one executor, generate(), which streams every tensor through gguf::Writer's
// FillFn: rows are generated and quantized by a pool of threads straight into the output
// mapping, so the model never sits in memory twice.
//
// Ownership: generate() owns its worker threads and the output file's writer for the call;
// Presets, plans and options are plain values owned by the caller.
// Determinism: the weights depend only on (seed, tensor name, row), never on the thread count.
// Thread safety: generate() may run concurrently on different outputs. Failure: unknown preset
// or type, a missing vocabulary, or I/O problems throw minfer::Error.
// Cost: O(parameters) CPU, spread over `n_threads`; memory O(threads x row length).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "gguf/gguf.h"

namespace minfer::gen {

struct Preset {
  std::string name;          // CLI name, e.g. "qwen2.5-0.5b"
  std::string arch;          // general.architecture: llama | qwen2 | qwen3 | gemma2 | gemma3
  std::string display_name;  // general.name
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // n_embd / n_head unless set
  int64_t n_ff = 0;
  int64_t n_ctx = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied = false;      // no output.weight; token_embd is reused (llama.cpp duplicates it)
  bool qkv_bias = false;  // qwen2: attn_{q,k,v}.bias
  bool qk_norm = false;   // qwen3: attn_{q,k}_norm.weight
  bool tiny = false;      // test preset: may synthesise a vocabulary
  // Llama 3 rope scaling (rope_scaling.rope_type "llama3" in the HF config): > 0 writes the
  // rope_freqs.weight tensor as convert_hf_to_gguf.py computes it from these.
  float llama3_rope_factor = 0.0f;
  float llama3_low_freq_factor = 1.0f;
  float llama3_high_freq_factor = 4.0f;
  int64_t llama3_orig_ctx = 8192;
  // rope.scaling.* metadata (empty type: none written): "linear" or "yarn" with its factor
  // and original context (llama.cpp's keys; Qwen2.5's long-context YaRN is such a config).
  std::string rope_scaling;
  float rope_scaling_factor = 1.0f;
  int64_t rope_scaling_orig_ctx = 0;
  // Gemma 2 / 3 (arch gemma*: post_attention_norm / post_ffw_norm tensors, gemma3 also Q/K
  // norms) and phi3: the keys below are written when > 0 (llama.cpp's names and meanings,
  // model/hparams_gemma.cpp). phi3 writes attention.sliding_window as convert_hf_to_gguf.py
  // does (llama.cpp ignores it for phi3).
  int64_t sliding_window = 0;  // attention.sliding_window
  int64_t swa_period = 0;      // attention.sliding_window_pattern
  float attn_softcap = 0.0f;   // attn_logit_softcapping
  float final_softcap = 0.0f;  // final_logit_softcapping
  // phi3 (fused attn_qkv and gate-up weights, always): when longrope_orig_ctx > 0, Phi-3's
  // LongRoPE as that converter writes it: rope_factors_long/short tensors,
  // rope.scaling.original_context_length and rope.scaling.attn_factor =
  // sqrt(1 + ln(n_ctx / orig) / ln(orig)). Without LongRoPE the original context is n_ctx.
  int64_t longrope_orig_ctx = 0;
};

// Phi-3 LongRoPE factors ([head_dim / 2]; empty when the preset has none). Synthetic but
// shaped like Phi-3.5's: short factors 1 .. 1.2, long factors rising smoothly from 1 for the
// fastest pair to n_ctx / orig for the slowest. Real files carry their own values.
std::vector<float> phi3_rope_factors(const Preset& p, bool long_factors);

// Llama 3's per-pair frequency divisors ([head_dim / 2]; empty when the preset has none):
// 1 for wavelengths under orig_ctx / high_freq_factor, `factor` above orig_ctx /
// low_freq_factor, smoothly interpolated between.
std::vector<float> llama3_rope_factors(const Preset& p);

const std::vector<Preset>& presets();
const Preset& find_preset(std::string_view name);  // throws InvalidArgument listing the names

// What --type selects. Plain types put every 2-D weight in that type; Q4_K_M is llama.cpp's
// "Q4_K_M"-like mix (see plan_tensors and docs/GGUF.md).
// Q4_K_M / Q5_K_M: llama.cpp's mixes (Q6_K for the output, token embeddings and some attn_v /
// ffn_down); Q6_K: every 2-D weight Q6_K (llama.cpp's Q6_K file type).
enum class WeightMix { F32, F16, Q8_0, Q4_0, Q4_K_M, Q5_K_M, Q6_K };
// Case-insensitive; "q4_k" == "q4_k_m", "q5_k" == "q5_k_m".
WeightMix parse_mix(std::string_view name);
std::string_view mix_name(WeightMix m);
uint32_t llama_file_type(WeightMix m);  // general.file_type (llama_ftype)

enum class Init { Normal, Ones, SmallNormal, Values };

struct TensorPlan {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
  Init init;
  std::vector<float> values{};  // Init::Values: the exact contents (one row)
};

// Every tensor of the model in file order. Q4_K_M mix: token_embd and output Q6_K; attn_v and
// ffn_down Q6_K in the first and last eighth of the layers and every third layer between,
// otherwise Q4_K; all other 2-D weights Q4_K. A K-quant whose row length is not a multiple of
// 256 falls back as llama.cpp does (Q4_K -> Q5_0, Q6_K -> Q8_0). 1-D tensors are always F32.
std::vector<TensorPlan> plan_tensors(const Preset& p, WeightMix mix, int64_t n_vocab);

struct Vocab {
  std::vector<std::pair<std::string, gguf::Value>> kv;  // tokenizer.* keys, in order
  int64_t n_vocab = 0;
};
// Copies every tokenizer.* key from a vocabulary GGUF; throws if it has no token list.
Vocab load_vocab(const std::string& path);
// A small vocabulary for tests: SentencePiece-like ("llama") or byte-level BPE ("gpt2").
Vocab synth_vocab(std::string_view arch);

// Model metadata (general.* and {arch}.*) followed by the vocabulary's keys.
std::vector<std::pair<std::string, gguf::Value>> model_metadata(const Preset& p, WeightMix mix,
                                                                const Vocab& vocab, uint64_t seed);

struct GenOptions {
  std::string preset;
  std::string type = "f32";
  std::string vocab_path;  // empty: synthesise (tiny presets only)
  std::string out_path;
  uint64_t seed = 42;
  // > 0: keep only the first n_layer blocks of the preset (same shapes and mix rules, which
  // then follow the smaller depth). A shallow model lets numerics checks compare engines
  // without the depth's amplification of rounding noise. Must not exceed the preset's depth.
  int64_t n_layer = 0;
  int n_threads = 0;  // 0: std::thread::hardware_concurrency()
  // Standard deviation of the 2-D weights (biases get a tenth). 0.02 is a trained model's
  // scale; a numerics fixture uses more (e.g. 0.25) so that attention is sharp and a RoPE
  // difference moves the logits by whole units instead of 1e-3.
  float weight_std = 0.02f;
  // Called on the writing thread as bytes are produced (for a progress bar); may be empty.
  std::function<void(uint64_t done_bytes, uint64_t total_bytes)> progress;
};

struct GenSummary {
  int n_tensors = 0;
  int64_t n_params = 0;
  uint64_t tensor_bytes = 0;
  int64_t n_vocab = 0;
};

GenSummary generate(const GenOptions& opt);

}  // namespace minfer::gen
