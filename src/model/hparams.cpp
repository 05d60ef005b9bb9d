#include "model/hparams.h"

#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "gguf/gguf.h"

namespace minfer {

std::string_view arch_name(Arch a) {
  switch (a) {
    case Arch::Llama:
      return "llama";
    case Arch::Qwen2:
      return "qwen2";
    case Arch::Qwen3:
      return "qwen3";
  }
  return "?";
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

}  // namespace

HParams HParams::from_gguf(const gguf::File& f) {
  HParams h;
  const std::string& arch = f.get_string("general.architecture");
  if (arch == "llama") {
    h.arch = Arch::Llama;
  } else if (arch == "qwen2") {
    h.arch = Arch::Qwen2;
  } else if (arch == "qwen3") {
    h.arch = Arch::Qwen3;
  } else {
    fail(ErrorKind::Unsupported,
         "{}: key 'general.architecture': '{}' is not supported (llama, qwen2, qwen3)", f.path(),
         arch);
  }
  const std::string p = arch + ".";
  h.n_embd = positive(f, p + "embedding_length", kMaxWidth);
  h.n_layer = positive(f, p + "block_count", kMaxLayers);
  check_layer_tensors(f, p + "block_count", h.n_layer);
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
  h.rope_mode = h.arch == Arch::Llama ? RopeMode::Normal : RopeMode::Neox;

  h.n_vocab = static_cast<int64_t>(f.get_string_array("tokenizer.ggml.tokens").size());
  if (h.n_vocab <= 0)
    fail(ErrorKind::InvalidFile, "{}: key 'tokenizer.ggml.tokens': empty vocabulary", f.path());
  if (h.n_vocab > kMaxVocab)  // token ids are int32
    fail(ErrorKind::InvalidFile,
         "{}: key 'tokenizer.ggml.tokens': {} tokens exceed the limit of {}", f.path(), h.n_vocab,
         kMaxVocab);
  return h;
}

void HParams::check_layer_tensors(const gguf::File& f, const std::string& key, int64_t n_layer) {
  // Every layer has at least kTensorsPerLayer tensors (attn_norm, q, k, v, output, ffn_norm,
  // gate, up, down): a block count the tensor table cannot hold is refused before anything is
  // sized by it (the weights' per-layer vector, the KV regions).
  const auto have = static_cast<int64_t>(f.tensors().size());
  if (n_layer > have / kTensorsPerLayer)
    fail(ErrorKind::InvalidFile,
         "{}: key '{}': {} layers need at least {} tensors ({} each) but the file has {}", f.path(),
         key, n_layer, n_layer * kTensorsPerLayer, kTensorsPerLayer, have);
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
      "n_rot {}, n_ctx_train {}, rms_eps {:g}, rope_base {:g}",
      arch_name(arch), n_vocab, n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim, n_rot,
      n_ctx_train, rms_eps, rope_freq_base);
}

}  // namespace minfer
