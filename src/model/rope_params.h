// The CPU kernels' RoPE parameters for a model: HParams::rope() (scaling resolved from the
// metadata as llama.cpp does) plus the frequency factors (Llama 3's rope_freqs.weight, or
// Phi-3's LongRoPE long / short factors as rope_factors() picks them for n_ctx_seq). The
// graph path passes the same values through OpParams (graph_builder.cpp); eager mode and the
// context shift call the kernels with these.
// Ownership: freq_factors borrows the model's mapped tensor. Cost: a handful of copies.
#pragma once

#include "backend/cpu/kernels.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace minfer {

// n_ctx_seq: the most positions one sequence of the engine may use (its context size);
// layer < 0: the model's global RoPE; otherwise layer's (gemma's windowed layers differ).
inline cpu::RopeParams rope_kernel_params(const HParams& hp, const ModelWeights& w,
                                          int64_t n_ctx_seq, int64_t layer = -1) {
  const RopeConfig r = layer < 0 ? hp.rope() : hp.rope(layer);
  cpu::RopeParams p;
  p.mode = r.mode;
  p.n_rot = r.n_rot;
  p.freq_base = r.freq_base;
  p.freq_scale = r.freq_scale;
  p.ext_factor = r.ext_factor;
  p.attn_factor = r.attn_factor;
  p.beta_fast = r.beta_fast;
  p.beta_slow = r.beta_slow;
  p.n_ctx_orig = r.n_ctx_orig;
  const WeightRef& ff = rope_factors(w, hp, n_ctx_seq);
  p.freq_factors = has_data(ff) ? reinterpret_cast<const float*>(ff.data) : nullptr;
  return p;
}

}  // namespace minfer
