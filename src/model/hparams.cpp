#include "model/hparams.h"

#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "gguf/gguf.h"
#include "model/support.h"

namespace minfer {

std::string_view arch_name(Arch a) {
  switch (a) {
    case Arch::Llama:
      return "llama";
    case Arch::Qwen2:
      return "qwen2";
    case Arch::Qwen3:
      return "qwen3";
    case Arch::Gemma2:
      return "gemma2";
    case Arch::Gemma3:
      return "gemma3";
    case Arch::Phi3:
      return "phi3";
  }
  return "?";
}

std::string_view rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::None:
      return "none";
    case RopeScaling::Linear:
      return "linear";
    case RopeScaling::Yarn:
      return "yarn";
    case RopeScaling::LongRope:
      return "longrope";
  }
  return "?";
}

RopeConfig HParams::rope() const {
  RopeConfig r;
  r.mode = rope_mode;
  r.n_rot = static_cast<int32_t>(n_rot);
  r.freq_base = rope_freq_base;
  // llama_context: type "none" never scales; otherwise the factor applies (linear and yarn).
  r.freq_scale = rope_scaling == RopeScaling::None ? 1.0f : rope_freq_scale;
  r.n_ctx_orig = n_ctx_orig > 0 ? n_ctx_orig : n_ctx_train;
  r.beta_fast = yarn_beta_fast;
  r.beta_slow = yarn_beta_slow;
  r.attn_factor = 1.0f;
  if (rope_scaling == RopeScaling::Yarn) {
    r.ext_factor = 1.0f;
    // llama.cpp (llama_context's constructor): attn_factor = mscale(factor) / (1 + 0.1 ln
    // factor), because ggml's rope_yarn multiplies the magnitude by (1 + 0.1 ln factor) again
    // whenever ext_factor != 0. Written out, not simplified, so a factor <= 1 matches too.
    const float factor = 1.0f / r.freq_scale;
    const float mscale = factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f;
    r.attn_factor = mscale * (1.0f / (1.0f + 0.1f * std::log(factor)));
  }
  r.attn_factor *= rope_attn_factor;
  return r;
}

namespace {

// A required integer key in [1, max]. The bound comes before any use: later products (n_q,
// n_kv_embd, KV bytes) are then computed in int64 without overflow.
int64_t positive(const gguf::File& f, const std::string& key, int64_t max) {
  const int64_t v = f.get_int(key);
  if (v <= 0 || v > max)
    fail(ErrorKind::InvalidFile, "{}: key '{}': value {} is not in [1, {}]", f.path(), key, v, max);
  return v;
}

int64_t positive_or(const gguf::File& f, const std::string& key, int64_t max, int64_t fallback) {
  return f.has(key) ? positive(f, key, max) : fallback;
}

// A float key that must be finite and > 0 (NaN and inf included in the refusal; a double too
// large for float becomes inf when narrowed, so the check is on the narrowed value).
float positive_finite(const gguf::File& f, const std::string& key, double value) {
  const auto v = static_cast<float>(value);
  if (!std::isfinite(v) || !(v > 0.0f))
    fail(ErrorKind::InvalidFile, "{}: key '{}': {} must be finite and > 0", f.path(), key, value);
  return v;
}

// A width made of two factors already bounded (<= 2^16 and <= 2^20: the product fits int64).
void check_width(const gguf::File& f, const std::string& what, int64_t a, int64_t b) {
  if (a * b > HParams::kMaxWidth)
    fail(ErrorKind::InvalidFile, "{}: {} = {} x {} = {} exceeds the limit of {}", f.path(), what, a,
         b, a * b, HParams::kMaxWidth);
}

// rope.scaling.* as llama.cpp's load_hparams reads them: type (default "linear"), factor (or
// the old rope.scale_linear; 0 or absent = 1), attn_factor, original_context_length. The
// keys a type does not use and values llama.cpp does not read for these architectures were
// already refused by check_arch_metadata (model/support.h) when they would change the math.
void read_rope_scaling(const gguf::File& f, const std::string& p, HParams& h) {
  const std::string type_key = p + "rope.scaling.type";
  const std::string type = f.get_string_or(type_key, "linear");
  if (type == "none") {
    h.rope_scaling = RopeScaling::None;
  } else if (type == "linear") {
    h.rope_scaling = RopeScaling::Linear;
  } else if (type == "yarn") {
    h.rope_scaling = RopeScaling::Yarn;
  } else if (type == "longrope") {
    h.rope_scaling = RopeScaling::LongRope;
  } else {
    fail(ErrorKind::Unsupported,
         "{}: key '{}': '{}' is not supported (none, linear, yarn, longrope; Llama 3 scaling "
         "comes as the rope_freqs.weight tensor, Phi-3's LongRoPE as rope_factors_long/short)",
         f.path(), type_key, type);
  }
  std::string factor_key = p + "rope.scaling.factor";
  if (!f.has(factor_key)) factor_key = p + "rope.scale_linear";
  const double factor = f.get_float_or(factor_key, 0.0);
  if (factor != 0.0) h.rope_freq_scale = 1.0f / positive_finite(f, factor_key, factor);
  const std::string attn_key = p + "rope.scaling.attn_factor";
  if (f.has(attn_key)) h.rope_attn_factor = positive_finite(f, attn_key, f.get_float(attn_key));
  h.n_ctx_orig = positive_or(f, p + "rope.scaling.original_context_length", HParams::kMaxContext,
                             h.n_ctx_train);
  // A "linear" (or "longrope": the same math in llama.cpp) type with no factor is llama.cpp's
  // default: no scaling at all.
  if ((h.rope_scaling == RopeScaling::Linear || h.rope_scaling == RopeScaling::LongRope) &&
      h.rope_freq_scale == 1.0f)
    h.rope_scaling = RopeScaling::None;
}

// llama.cpp's phi3 loader sizes attn_output as [n_embd, n_embd] and the fused QKV as
// [n_embd, n_embd + 2 n_embd_gqa]: a file whose heads do not span exactly n_embd does not load
// there, so it is refused here rather than run with shapes llama.cpp never runs.
void check_phi3(const gguf::File& f, const HParams& h) {
  if (h.n_q() != h.n_embd)
    fail(ErrorKind::Unsupported,
         "{}: phi3: attention.head_count {} x head dim {} = {} != embedding_length {} (phi3 "
         "needs them equal, as llama.cpp)",
         f.path(), h.n_head, h.head_dim, h.n_q(), h.n_embd);
}

}  // namespace

HParams HParams::from_gguf(const gguf::File& f) {
  HParams h;
  check_arch_metadata(f);  // model/support.h: refuse what we would otherwise silently ignore
  const std::string& arch = f.get_string("general.architecture");
  if (arch == "llama") {
    h.arch = Arch::Llama;
  } else if (arch == "qwen2") {
    h.arch = Arch::Qwen2;
  } else if (arch == "qwen3") {
    h.arch = Arch::Qwen3;
  } else if (arch == "gemma2") {
    h.arch = Arch::Gemma2;
  } else if (arch == "gemma3") {
    h.arch = Arch::Gemma3;
  } else if (arch == "phi3") {
    h.arch = Arch::Phi3;
  } else {
    fail(ErrorKind::Unsupported,
         "{}: key 'general.architecture': '{}' is not supported (llama, qwen2, qwen3, gemma2, "
         "gemma3, phi3)",
         f.path(), arch);
  }
  const std::string p = arch + ".";
  h.n_embd = positive(f, p + "embedding_length", kMaxWidth);
  h.n_layer = positive(f, p + "block_count", kMaxLayers);
  check_layer_tensors(f, p + "block_count", h.n_layer, h.arch);
  h.n_ff = positive(f, p + "feed_forward_length", kMaxWidth);
  h.n_head = positive(f, p + "attention.head_count", kMaxHeads);
  h.n_head_kv = positive_or(f, p + "attention.head_count_kv", kMaxHeads, h.n_head);
  h.n_ctx_train = positive(f, p + "context_length", kMaxContext);
  h.rms_eps = positive_finite(f, p + "attention.layer_norm_rms_epsilon",
                              f.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (h.rms_eps > 1.0f)
    fail(ErrorKind::InvalidFile,
         "{}: key '{}attention.layer_norm_rms_epsilon': {} is not in (0, 1]", f.path(), p,
         h.rms_eps);
  h.rope_freq_base =
      positive_finite(f, p + "rope.freq_base", f.get_float_or(p + "rope.freq_base", 10000.0));

  if (f.has(p + "attention.key_length")) {
    h.head_dim = positive(f, p + "attention.key_length", kMaxWidth);
  } else {
    if (h.n_embd % h.n_head != 0)
      fail(ErrorKind::InvalidFile,
           "{}: key '{}attention.head_count': {} does not divide embedding_length {} (and no "
           "attention.key_length)",
           f.path(), p, h.n_head, h.n_embd);
    h.head_dim = h.n_embd / h.n_head;
  }
  if (f.has(p + "attention.value_length")) {
    const int64_t vl = positive(f, p + "attention.value_length", kMaxWidth);
    if (vl != h.head_dim)
      fail(ErrorKind::Unsupported, "{}: key '{}attention.value_length': {} != key_length {}",
           f.path(), p, vl, h.head_dim);
  }
  if (h.n_head % h.n_head_kv != 0)
    fail(ErrorKind::InvalidFile,
         "{}: key '{}attention.head_count_kv': {} does not divide head_count {}", f.path(), p,
         h.n_head_kv, h.n_head);
  check_width(f, "n_q (" + p + "attention.head_count x key_length)", h.n_head, h.head_dim);
  check_width(f, "n_kv_embd (" + p + "attention.head_count_kv x key_length)", h.n_head_kv,
              h.head_dim);
  h.n_rot = positive_or(f, p + "rope.dimension_count", kMaxWidth, h.head_dim);
  if (h.n_rot > h.head_dim || h.n_rot % 2 != 0)
    fail(ErrorKind::InvalidFile,
         "{}: key '{}rope.dimension_count': {} must be even and <= head dim {}", f.path(), p,
         h.n_rot, h.head_dim);
  if (h.arch == Arch::Phi3) check_phi3(f, h);
  // llama.cpp's llama_model_rope_type: llama NORM; qwen2, qwen3 and phi3 NEOX.
  h.rope_mode = h.arch == Arch::Llama ? RopeMode::Normal : RopeMode::Neox;
  read_rope_scaling(f, p, h);
  if (h.is_gemma()) read_gemma(f, p, h);

  h.n_vocab = static_cast<int64_t>(f.get_string_array("tokenizer.ggml.tokens").size());
  if (h.n_vocab <= 0)
    fail(ErrorKind::InvalidFile, "{}: key 'tokenizer.ggml.tokens': empty vocabulary", f.path());
  if (h.n_vocab > kMaxVocab)  // token ids are int32
    fail(ErrorKind::InvalidFile,
         "{}: key 'tokenizer.ggml.tokens': {} tokens exceed the limit of {}", f.path(), h.n_vocab,
         kMaxVocab);
  return h;
}

void HParams::check_layer_tensors(const gguf::File& f, const std::string& key, int64_t n_layer,
                                  Arch arch) {
  // Every layer has at least tensors_per_layer(arch) tensors: a block count the tensor table
  // cannot hold is refused before anything is sized by it (the weights' per-layer vector, the
  // KV regions).
  const int64_t per = tensors_per_layer(arch);
  const auto have = static_cast<int64_t>(f.tensors().size());
  if (n_layer > have / per)
    fail(ErrorKind::InvalidFile,
         "{}: key '{}': {} layers need at least {} tensors ({} each) but the file has {}", f.path(),
         key, n_layer, n_layer * per, per, have);
}

uint64_t HParams::kv_bytes(int64_t n_ctx) const {
  uint64_t b = 2ull * sizeof(float);
  for (int64_t factor : {n_layer, n_kv_embd(), n_ctx}) {
    if (factor < 0 || __builtin_mul_overflow(b, static_cast<uint64_t>(factor), &b))
      fail(ErrorKind::InvalidArgument,
           "KV cache of {} layers x {} values x {} tokens overflows 64-bit byte counts", n_layer,
           n_kv_embd(), n_ctx);
  }
  return b;
}

std::string HParams::describe() const {
  return fmt::format(
      "arch {}, n_vocab {}, n_embd {}, n_layer {}, n_ff {}, n_head {}, n_head_kv {}, head_dim {}, "
      "n_rot {}, n_ctx_train {}, rms_eps {:g}, rope_base {:g}, rope_scaling {} (freq_scale {:g}, "
      "orig ctx {})",
      arch_name(arch), n_vocab, n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim, n_rot,
      n_ctx_train, rms_eps, rope_freq_base, rope_scaling_name(rope_scaling), rope_freq_scale,
      n_ctx_orig);
}

}  // namespace minfer
