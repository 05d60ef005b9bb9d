// Model hyperparameters read from GGUF metadata (llama.cpp's key names).
//
// Supported architectures: llama (incl. Llama 3), qwen2 (Qwen2 / Qwen2.5), qwen3, gemma2,
// gemma3 (text; hparams_gemma.cpp has their keys: sliding window, soft-capping, ...), phi3
// (Phi-3 / Phi-3.5 mini: fused attn_qkv and gate-up weights, LongRoPE factor tensors). The keys are
// "{arch}.embedding_length", ".block_count", ".feed_forward_length", ".attention.head_count",
// ".attention.head_count_kv", ".attention.layer_norm_rms_epsilon", ".rope.freq_base",
// ".context_length", ".attention.key_length", ".rope.dimension_count", the rope scaling keys
// ".rope.scaling.{type,factor,attn_factor,original_context_length,yarn_beta_fast,
// yarn_beta_slow}" (and the old ".rope.scale_linear"); the vocabulary size is the length of
// "tokenizer.ggml.tokens". Every other "{arch}.*" key is checked by model/support.h first: a key
// that would change the math and is not implemented refuses the file (never silently ignored).
//
// This header is independent of the graph path on purpose: the eager engine reuses it.
// Ownership: plain values. Thread safety: immutable after construction.
// Failure: a missing required key, a wrong type, a value outside the bounds below (before any
// product uses it), a non-finite or non-positive float, a block count the tensor table cannot
// hold, or an inconsistent value (e.g. head count not dividing the width) throws
// Error(InvalidFile) naming the file, the key and the value; an unknown
// architecture or a value_length different from key_length throws Error(Unsupported).
// Cost: from_gguf is a dozen key lookups (O(log keys) each); nothing is allocated per token.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace minfer {
namespace gguf {
class File;
}

enum class Arch : uint8_t { Llama, Qwen2, Qwen3, Gemma2, Gemma3, Phi3 };
std::string_view arch_name(Arch a);

// "{arch}.rope.scaling.type" as llama.cpp reads it (absent = linear, which with no factor is
// no scaling). Llama 3's scaling is not a type: its per-dimension frequency divisors come as the
// tensor rope_freqs.weight (ModelWeights::rope_freqs) and combine with any of these. Phi-3's
// LongRoPE is not a type either in the files llama.cpp's converter writes: the
// rope_factors_long/short tensors (ModelWeights::rope_factors) plus rope.scaling.attn_factor.
// LongRope is the type name "longrope", which llama.cpp accepts and computes as linear (the
// factor, if any, scales every frequency; no YaRN mixing).
enum class RopeScaling : uint8_t { None, Linear, Yarn, LongRope };
std::string_view rope_scaling_name(RopeScaling s);

// Everything RoPE needs besides the positions, resolved from metadata exactly as llama.cpp's
// llama_context does (cparams.rope_freq_scale, yarn_ext_factor, yarn_attn_factor, ...).
struct RopeConfig {
  RopeMode mode = RopeMode::Normal;  // llama: Normal; qwen2/qwen3: NeoX
  int32_t n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // 1 / rope.scaling.factor (linear and yarn)
  float ext_factor = 0.0f;   // YaRN extrapolation mix: 1 for yarn, else 0
  float attn_factor = 1.0f;  // YaRN magnitude factor as llama.cpp passes it to ggml_rope_ext
  float beta_fast = 32.0f;   // YaRN correction range
  float beta_slow = 1.0f;
  int64_t n_ctx_orig = 0;  // rope.scaling.original_context_length (default context_length)
};

struct HParams {
  Arch arch = Arch::Llama;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ff = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // attention.key_length (default n_embd / n_head)
  int64_t n_rot = 0;     // rope.dimension_count (default head_dim)
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  RopeMode rope_mode = RopeMode::Normal;  // llama: Normal; qwen2/qwen3: NeoX
  RopeScaling rope_scaling = RopeScaling::None;
  float rope_freq_scale = 1.0f;   // 1 / rope.scaling.factor
  float rope_attn_factor = 1.0f;  // rope.scaling.attn_factor
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  int64_t n_ctx_orig = 0;  // rope.scaling.original_context_length

  // Gemma 2 / 3 (read by read_gemma, model/hparams_gemma.cpp, as llama.cpp's loaders do).
  // Other architectures keep these neutral defaults.
  float embd_scale = 1.0f;     // token embeddings times this: sqrt(n_embd)
  float attn_scale = 0.0f;     // query scale; 0 = 1 / sqrt(head_dim)
  float attn_softcap = 0.0f;   // attention scores s -> c tanh(s / c); 0 = none (gemma2: 50)
  float final_softcap = 0.0f;  // logits l -> c tanh(l / c); 0 = none (gemma2: 30)
  int64_t n_swa = 0;           // sliding window of the windowed layers; 0 = none
  int64_t swa_period = 0;      // windowed layers: l % period < period - 1 (0: all)
  // Per-layer windowed flags when the file gives the pattern as an array (one bool per
  // layer); empty: swa_period decides.
  std::vector<uint8_t> swa_layers;
  float rope_freq_base_swa = 10000.0f;  // rope base of the windowed layers
  float rope_freq_scale_swa = 0.0f;     // their freq_scale; 0 = the global layers' one

  // The RoPE parameters every path (graph, eager, context shift) passes to the kernels.
  RopeConfig rope() const;
  // Layer l's: rope() with the windowed layers' base and scale where they differ (gemma).
  RopeConfig rope(int64_t layer) const;

  bool is_gemma() const { return arch == Arch::Gemma2 || arch == Arch::Gemma3; }
  // Sliding-window layer (llama.cpp's set_swa_pattern(period) without dense_first), or the
  // file's per-layer flags. Period 0 windows every layer, as llama.cpp.
  bool is_swa(int64_t layer) const {
    if (n_swa <= 0) return false;
    if (!swa_layers.empty()) return swa_layers[static_cast<size_t>(layer)] != 0;
    return swa_period == 0 || layer % swa_period < swa_period - 1;
  }
  int64_t attn_window(int64_t layer) const { return is_swa(layer) ? n_swa : 0; }
  float query_scale() const;

  bool has_qkv_bias() const { return arch == Arch::Qwen2; }
  bool has_qk_norm() const { return arch == Arch::Qwen3 || arch == Arch::Gemma3; }
  // Gemma: RMS norms of the attention and FFN outputs before each residual add, and GeGLU.
  bool has_post_norms() const { return is_gemma(); }
  // phi3: attn_qkv.weight holds [Wq | Wk | Wv] and ffn_up.weight [Wgate | Wup] (ModelWeights
  // splits them into row views at load, weights.h).
  bool has_fused_weights() const { return arch == Arch::Phi3; }
  int64_t n_q() const { return n_head * head_dim; }           // width of Q (and attn output)
  int64_t n_kv_embd() const { return n_head_kv * head_dim; }  // width of K and V

  // Bytes of the persistent KV cache (K and V, f32) for a context of n_ctx tokens; throws
  // Error(InvalidArgument) when the product overflows 64 bits.
  uint64_t kv_bytes(int64_t n_ctx) const;

  // Documented bounds on file-provided values (beyond any real model by orders of magnitude):
  // validated before any product or allocation uses them, so n_q(), n_kv_embd() and the
  // tensor shapes never overflow int64. A value outside them is an InvalidFile error naming
  // the key and the value.
  static constexpr int64_t kMaxWidth = int64_t{1} << 20;    // n_embd, n_ff, head dims, n_q
  static constexpr int64_t kMaxHeads = int64_t{1} << 16;    // head_count(_kv)
  static constexpr int64_t kMaxLayers = int64_t{1} << 16;   // block_count
  static constexpr int64_t kMaxContext = int64_t{1} << 32;  // context_length
  static constexpr int64_t kMaxVocab = INT32_MAX;           // token ids are int32
  // The fewest tensors a layer of `a` has: attn_norm, q, k, v, output, ffn_norm, gate, up,
  // down; phi3 fuses q/k/v and gate/up (6).
  static int64_t tensors_per_layer(Arch a) { return a == Arch::Phi3 ? 6 : 9; }

  static HParams from_gguf(const gguf::File& f);
  // The Gemma keys (hparams_gemma.cpp); p is "{arch}.".
  static void read_gemma(const gguf::File& f, const std::string& p, HParams& h);
  // Throws unless the file's tensor table can hold n_layer layers (key names the field).
  static void check_layer_tensors(const gguf::File& f, const std::string& key, int64_t n_layer,
                                  Arch arch);
  std::string describe() const;  // one line for logs
};

}  // namespace minfer
