// Gemma 2 / Gemma 3 (text) hyperparameters, read as llama.cpp's llama_model_gemma2 /
// llama_model_gemma3::load_arch_hparams read them (src/models/gemma2.cpp, gemma3.cpp), and the
// per-layer RoPE and query scale that the graph builder and the eager engine share.
//
// What the keys mean (llama.cpp's defaults where a key is absent):
//   gemma2: every layer l with l % period < period - 1 is windowed (period
//     "attention.sliding_window_pattern", default 2: even layers; the key may instead be an
//     array of one bool per layer, true = windowed, as newer converters write it), window
//     "attention.sliding_window" (default 4096); attention scores soft-capped at
//     "attn_logit_softcapping" (default 50), logits at "final_logit_softcapping" (default 30);
//     windowed layers rope with "rope.freq_base_swa" (default: rope.freq_base).
//   gemma3: windowed only when "attention.sliding_window" > 0 (period default 6: five local
//     layers, then a global one); windowed layers rope with "rope.freq_base_swa" (default
//     10000) and freq_scale 1 (a linear rope scaling applies to the global layers only);
//     logits soft-capped only when "final_logit_softcapping" is given and non-zero.
//   both: token embeddings scaled by sqrt(n_embd) (in f32, as llama.cpp: not HF's bf16
//     rounding of the normaliser); query scale 1 / sqrt(key_length), except for the 27B shapes
//     (46 layers for gemma2, 62 for gemma3), which llama.cpp recognises by their layer count and
//     give 1 / sqrt(n_embd / n_head) (query_pre_attn_scalar = 144 there).
// The norm weights are used as stored: llama.cpp's converter already wrote Gemma's (1 + w).
#include <cmath>

#include "common/error.h"
#include "gguf/gguf.h"
#include "model/hparams.h"

namespace minfer {
namespace {

// An optional float key that must be finite and > 0 when present.
float positive_float_or(const gguf::File& f, const std::string& key, float fallback) {
  if (!f.has(key)) return fallback;
  const double d = f.get_float(key);
  const auto v = static_cast<float>(d);
  if (!std::isfinite(v) || !(v > 0.0f))
    fail(ErrorKind::InvalidFile, "{}: key '{}': {} must be finite and > 0", f.path(), key, d);
  return v;
}

int64_t int_in(const gguf::File& f, const std::string& key, int64_t lo, int64_t hi,
               int64_t fallback) {
  if (!f.has(key)) return fallback;
  const int64_t v = f.get_int(key);
  if (v < lo || v > hi)
    fail(ErrorKind::InvalidFile, "{}: key '{}': value {} is not in [{}, {}]", f.path(), key, v, lo,
         hi);
  return v;
}

// attention.sliding_window_pattern: a period (u32), or one flag per layer (an array of bools,
// or of integers 0 / 1, n_layer long), which then decides alone. llama.cpp 80fb11ac's gemma2 /
// gemma3 loaders ignore an array and keep their default period (its scalar get_key_or_arr
// returns false for one); a file's explicit per-layer list is followed here instead, which
// agrees with llama.cpp whenever the list is the default pattern (docs/NUMERICS.md).
void read_swa_pattern(const gguf::File& f, const std::string& key, int64_t fallback, HParams& h) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr || v->type != gguf::ValueType::Array) {
    h.swa_period = int_in(f, key, 0, HParams::kMaxLayers, fallback);
    return;
  }
  const std::vector<int64_t>& flags = f.get_int_array(key);  // refuses non-integer elements
  if (static_cast<int64_t>(flags.size()) != h.n_layer)
    fail(ErrorKind::InvalidFile, "{}: key '{}': array has {} entries, the model has {} layers",
         f.path(), key, flags.size(), h.n_layer);
  h.swa_layers.reserve(flags.size());
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] != 0 && flags[i] != 1)
      fail(ErrorKind::InvalidFile, "{}: key '{}': entry {} = {} is not a bool (0 or 1)", f.path(),
           key, i, flags[i]);
    h.swa_layers.push_back(static_cast<uint8_t>(flags[i]));
  }
  h.swa_period = fallback;  // unused while swa_layers decides; kept for display
}

}  // namespace

void HParams::read_gemma(const gguf::File& f, const std::string& p, HParams& h) {
  h.embd_scale = std::sqrt(static_cast<float>(h.n_embd));
  const std::string swa_key = p + "attention.sliding_window";
  const std::string period_key = p + "attention.sliding_window_pattern";
  if (h.arch == Arch::Gemma2) {
    // A window of 0 would mask every position (llama.cpp masks p - j >= n_swa): refused.
    h.n_swa = int_in(f, swa_key, 1, kMaxContext, 4096);
    read_swa_pattern(f, period_key, 2, h);
    h.attn_softcap = positive_float_or(f, p + "attn_logit_softcapping", 50.0f);
    h.final_softcap = positive_float_or(f, p + "final_logit_softcapping", 30.0f);
    h.rope_freq_base_swa = positive_float_or(f, p + "rope.freq_base_swa", h.rope_freq_base);
    h.rope_freq_scale_swa = 0.0f;  // the global layers' scale
  } else {
    h.n_swa = int_in(f, swa_key, 0, kMaxContext, 0);
    if (h.n_swa > 0) {
      read_swa_pattern(f, period_key, 6, h);
      h.rope_freq_base_swa = positive_float_or(f, p + "rope.freq_base_swa", 10000.0f);
      h.rope_freq_scale_swa = 1.0f;
    }
    // 0 (or absent) = no capping, as llama.cpp's `if (f_final_logit_softcapping)`.
    const std::string cap_key = p + "final_logit_softcapping";
    if (f.has(cap_key) && f.get_float(cap_key) != 0.0)
      h.final_softcap = positive_float_or(f, cap_key, 0.0f);
  }
  const bool is_27b = h.n_layer == (h.arch == Arch::Gemma2 ? 46 : 62);
  const int64_t d = is_27b ? h.n_embd / h.n_head : h.head_dim;
  h.attn_scale = 1.0f / std::sqrt(static_cast<float>(d));
}

RopeConfig HParams::rope(int64_t layer) const {
  RopeConfig r = rope();
  if (is_swa(layer)) {
    r.freq_base = rope_freq_base_swa;
    if (rope_freq_scale_swa > 0.0f) r.freq_scale = rope_freq_scale_swa;
  }
  return r;
}

float HParams::query_scale() const {
  return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace minfer
