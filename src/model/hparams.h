// Model hyperparameters read from GGUF metadata (llama.cpp's key names).
//
// Supported architectures: llama (incl. Llama 3), qwen2 (Qwen2 / Qwen2.5), qwen3. The keys are
// "{arch}.embedding_length", ".block_count", ".feed_forward_length", ".attention.head_count",
// ".attention.head_count_kv", ".attention.layer_norm_rms_epsilon", ".rope.freq_base",
// ".context_length", ".attention.key_length", ".rope.dimension_count"; the vocabulary size is
// the length of "tokenizer.ggml.tokens".
//
// This header is independent of the graph path on purpose: the eager engine reuses it.
// Ownership: plain values. Thread safety: immutable after construction.
// Failure: a missing required key, a wrong type or an inconsistent value (e.g. head count not
// dividing the width) throws Error(InvalidFile) naming the file and the key; an unknown
// architecture or a value_length different from key_length throws Error(Unsupported).
// Cost: from_gguf is a dozen key lookups (O(log keys) each); nothing is allocated per token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "graph/graph.h"

namespace minfer {
namespace gguf {
class File;
}

enum class Arch : uint8_t { Llama, Qwen2, Qwen3 };
std::string_view arch_name(Arch a);

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

  bool has_qkv_bias() const { return arch == Arch::Qwen2; }
  bool has_qk_norm() const { return arch == Arch::Qwen3; }
  int64_t n_q() const { return n_head * head_dim; }           // width of Q (and attn output)
  int64_t n_kv_embd() const { return n_head_kv * head_dim; }  // width of K and V

  // Bytes of the persistent KV cache (K and V, f32) for a context of n_ctx tokens.
  uint64_t kv_bytes(int64_t n_ctx) const {
    return 2ull * static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(n_kv_embd()) *
           static_cast<uint64_t>(n_ctx) * sizeof(float);
  }

  static HParams from_gguf(const gguf::File& f);
  std::string describe() const;  // one line for logs
};

}  // namespace minfer
