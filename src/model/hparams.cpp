#include "model/hparams.h"

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

// A required positive integer key.
int64_t positive(const gguf::File& f, const std::string& key) {
  const int64_t v = f.get_int(key);
  if (v <= 0) fail(ErrorKind::InvalidFile, "{}: key '{}': value {} must be > 0", f.path(), key, v);
  return v;
}

int64_t positive_or(const gguf::File& f, const std::string& key, int64_t fallback) {
  return f.has(key) ? positive(f, key) : fallback;
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
  h.n_embd = positive(f, p + "embedding_length");
  h.n_layer = positive(f, p + "block_count");
  h.n_ff = positive(f, p + "feed_forward_length");
  h.n_head = positive(f, p + "attention.head_count");
  h.n_head_kv = positive_or(f, p + "attention.head_count_kv", h.n_head);
  h.n_ctx_train = positive(f, p + "context_length");
  h.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (!(h.rms_eps > 0.0f) || h.rms_eps > 1.0f)
    fail(ErrorKind::InvalidFile,
         "{}: key '{}attention.layer_norm_rms_epsilon': {} is not in (0, 1]", f.path(), p,
         h.rms_eps);
  h.rope_freq_base = static_cast<float>(f.get_float_or(p + "rope.freq_base", 10000.0));
  if (!(h.rope_freq_base > 0.0f))
    fail(ErrorKind::InvalidFile, "{}: key '{}rope.freq_base': {} must be > 0", f.path(), p,
         h.rope_freq_base);

  if (f.has(p + "attention.key_length")) {
    h.head_dim = positive(f, p + "attention.key_length");
  } else {
    if (h.n_embd % h.n_head != 0)
      fail(ErrorKind::InvalidFile,
           "{}: key '{}attention.head_count': {} does not divide embedding_length {} (and no "
           "attention.key_length)",
           f.path(), p, h.n_head, h.n_embd);
    h.head_dim = h.n_embd / h.n_head;
  }
  if (f.has(p + "attention.value_length")) {
    const int64_t vl = positive(f, p + "attention.value_length");
    if (vl != h.head_dim)
      fail(ErrorKind::Unsupported, "{}: key '{}attention.value_length': {} != key_length {}",
           f.path(), p, vl, h.head_dim);
  }
  if (h.n_head % h.n_head_kv != 0)
    fail(ErrorKind::InvalidFile,
         "{}: key '{}attention.head_count_kv': {} does not divide head_count {}", f.path(), p,
         h.n_head_kv, h.n_head);
  h.n_rot = positive_or(f, p + "rope.dimension_count", h.head_dim);
  if (h.n_rot > h.head_dim || h.n_rot % 2 != 0)
    fail(ErrorKind::InvalidFile,
         "{}: key '{}rope.dimension_count': {} must be even and <= head dim {}", f.path(), p,
         h.n_rot, h.head_dim);
  h.rope_mode = h.arch == Arch::Llama ? RopeMode::Normal : RopeMode::Neox;

  h.n_vocab = static_cast<int64_t>(f.get_string_array("tokenizer.ggml.tokens").size());
  if (h.n_vocab <= 0)
    fail(ErrorKind::InvalidFile, "{}: key 'tokenizer.ggml.tokens': empty vocabulary", f.path());
  return h;
}

std::string HParams::describe() const {
  return fmt::format(
      "arch {}, n_vocab {}, n_embd {}, n_layer {}, n_ff {}, n_head {}, n_head_kv {}, head_dim {}, "
      "n_rot {}, n_ctx_train {}, rms_eps {:g}, rope_base {:g}",
      arch_name(arch), n_vocab, n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim, n_rot,
      n_ctx_train, rms_eps, rope_freq_base);
}

}  // namespace minfer
