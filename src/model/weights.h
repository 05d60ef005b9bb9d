// Model weights located by llama.cpp tensor names, validated against the hyperparameters.
//
// Names: token_embd, output_norm, output (absent -> tied to token_embd), rope_freqs (optional,
// Llama 3 scaling), and per layer blk.N.
// attn_norm, attn_q, attn_k, attn_v, attn_output, (qwen2) attn_q.bias / attn_k.bias /
// attn_v.bias, (qwen3, gemma3) attn_q_norm / attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down,
// (gemma2, gemma3) post_attention_norm / post_ffw_norm.
// Shapes use ggml order: a projection is [n_in, n_out].
//
// This header is independent of the graph path on purpose: the eager engine reuses it.
// Ownership: every WeightRef borrows bytes from the gguf::File it was loaded from; the File
// must outlive the ModelWeights. Fused tensors (FusedQkv, FusedGateUp) own only their
// description (and FusedQkv its bias); Model owns the range their raw bytes go to.
// Thread safety: immutable after load.
// Failure: a missing tensor, a wrong shape or a non-f32 norm / bias throws Error(InvalidFile)
// naming the file, the tensor, the expected and the actual shape / type; a projection of a type
// minfer cannot multiply with throws Error(Unsupported), and so does a tensor the graph would
// not read (e.g. an attn_output.bias or a MoE router): ignoring it would silently change the
// math (model/support.h).
// Cost: load is O(number of tensors); no weight bytes are touched. describe_fused_qkv copies
// the layer's Q, K and V biases only; describe_fused_gate_up copies nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "model/hparams.h"

namespace minfer {
namespace gguf {
class File;
}

struct LayerWeights {
  WeightRef attn_norm, wq, wk, wv, wo;
  WeightRef bq, bk, bv;      // qwen2 only (data == nullptr otherwise)
  WeightRef q_norm, k_norm;  // qwen3 only
  WeightRef ffn_norm, ffn_gate, ffn_up, ffn_down;
  // gemma2 / gemma3: RMS norms of the attention and FFN outputs (post_attention_norm,
  // post_ffw_norm), applied before each residual add.
  WeightRef attn_post_norm, ffn_post_norm;
  // phi3: the file's attn_qkv.weight, of which wq / wk / wv are row views (borrowed as the
  // fused QKV weight, no copy). data == nullptr for the other architectures.
  WeightRef wqkv;
};

struct ModelWeights {
  WeightRef tok_embd;
  WeightRef output_norm;
  WeightRef output;  // == tok_embd when tied
  bool tied_output = false;
  // Llama 3 rope scaling: rope_freqs.weight, [n_rot / 2] f32, each rotated pair's frequency is
  // divided by its factor (ggml_rope_ext's freq_factors). data == nullptr when absent.
  WeightRef rope_freqs;
  // Phi-3 LongRoPE: rope_factors_long.weight / rope_factors_short.weight, [n_rot / 2] f32
  // divisors like rope_freqs, each optional; rope_factors() picks one by context size.
  WeightRef rope_long, rope_short;
  std::vector<LayerWeights> layers;

  static ModelWeights load(const gguf::File& f, const HParams& hp);
  uint64_t total_bytes() const;  // bytes of distinct tensors
  uint64_t n_params() const;     // elements of distinct tensors
};

inline bool has_data(const WeightRef& w) {
  return w.data != nullptr;
}

// The rope frequency divisors a context of n_ctx_seq positions per sequence runs with, as
// llama.cpp's llama_model::get_rope_factors: rope_freqs when present; otherwise
// rope_factors_long when the context (rounded up to 256, as llama.cpp pads n_ctx_seq) exceeds
// rope.scaling.original_context_length (default context_length), else rope_factors_short.
// The result may be empty (data == nullptr: no factors). Fixed for an engine's life, since the
// context size is.
const WeightRef& rope_factors(const ModelWeights& w, const HParams& hp, int64_t n_ctx_seq);

// Q, K and V projections (and biases) of one layer concatenated along n_out: rows are
// [q | k | v], so one matmul produces all three and quantizes the activations once.
// Only possible when the three share a type and input width; otherwise describe_fused_qkv
// returns false. As FusedGateUp: `weight.data` is where the concatenated bytes live once `raw`
// (a range Model reserved without access until then; phi3: the file's own attn_qkv, always
// raw) and the key of the load-time packed copy, which Model packs from the three parts
// without the raw bytes. The bias (f32, a few KB) is always a copy: zeros when the layer has
// none (llama, phi3).
// Move-only: bias points into bias_bytes, whose buffer a move keeps (a copy would leave it
// pointing into the source).
struct FusedQkv {
  FusedQkv() = default;
  FusedQkv(FusedQkv&&) = default;
  FusedQkv& operator=(FusedQkv&&) = default;
  FusedQkv(const FusedQkv&) = delete;
  FusedQkv& operator=(const FusedQkv&) = delete;

  WeightRef weight;                 // [n_embd, n_q + 2 n_kv]
  WeightRef q, k, v;                // the parts (borrowed from the file)
  bool borrowed = false;            // phi3: weight is the file's attn_qkv.weight
  bool raw = false;                 // weight.data holds the bytes
  std::vector<uint8_t> bias_bytes;  // the concatenated biases, or zeros
  WeightRef bias;                   // points into bias_bytes
};
// Describes the fused weight of `lw`'s Q, K and V at `data` (not touched) and copies their
// biases; false when their types or input widths differ.
bool describe_fused_qkv(const LayerWeights& lw, int layer, const uint8_t* data, FusedQkv& out);

// A layer's FFN gate and up projections as one [W_gate | W_up] weight (n_out 2 n_ff, the gate
// rows first), so one matmul streams both and quantizes the activations once; the GLU reads
// each output row's halves (Graph::swiglu_halves). Only where gate and up share a type.
// `weight.data` is where the concatenated bytes live once `raw` (a range Model reserved
// without access until then; phi3: the file's own gate-up tensor, always raw) and the key of
// the load-time packed copy, which Model packs from the two parts without the raw bytes.
struct FusedGateUp {
  WeightRef weight;       // [n_embd, 2 n_ff]
  WeightRef gate, up;     // the parts (borrowed from the file)
  bool borrowed = false;  // phi3: weight is the file's ffn_up.weight (gate and up are its rows)
  bool raw = false;       // weight.data holds the bytes
};
// Describes the fused weight of `lw`'s gate and up at `data` (not touched); false when their
// types or input widths differ. Borrows the file's bytes when gate and up are adjacent rows of
// one tensor (phi3).
bool describe_fused_gate_up(const LayerWeights& lw, int layer, const uint8_t* data,
                            FusedGateUp& out);
// phi3: the file's attn_qkv borrowed as the fused weight (no copy) with a zero bias.
void borrow_fused_qkv(const LayerWeights& lw, int layer, FusedQkv& out);

}  // namespace minfer
