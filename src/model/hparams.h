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
  static constexpr int64_t kTensorsPerLayer = 9;  // the fewest tensors any supported layer has

  static HParams from_gguf(const gguf::File& f);
  // Throws unless the file's tensor table can hold n_layer layers (key names the field).
  static void check_layer_tensors(const gguf::File& f, const std::string& key, int64_t n_layer);
  std::string describe() const;  // one line for logs
};

}  // namespace minfer
