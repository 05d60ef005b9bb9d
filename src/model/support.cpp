#include "model/support.h"

#include <array>
#include <limits>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "common/error.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace minfer {
namespace {

constexpr std::array<std::string_view, 6> kArchs = {"llama",  "qwen2",  "qwen3",
                                                    "gemma2", "gemma3", "phi3"};

enum class Rule {
  Read,     // HParams reads and implements it
  Ignored,  // descriptive: cannot change the logits
  Only,     // accepted only at the value that changes nothing (`only`), refused otherwise
};

struct KeyRule {
  std::string_view suffix;  // after "{arch}."
  Rule rule;
  double only = 0.0;  // Rule::Only: the accepted value (bools: 1 = true)
  double also = std::numeric_limits<double>::quiet_NaN();  // a second one, if any
};

// The keys of llama.cpp's llama / qwen2 / qwen3 loaders, and the math-neutral values of keys
// that belong to features minfer does not implement. Anything not listed is refused.
constexpr std::array<KeyRule, 29> kRules = {{
    {"context_length", Rule::Read},
    {"embedding_length", Rule::Read},
    {"block_count", Rule::Read},
    {"feed_forward_length", Rule::Read},
    {"attention.head_count", Rule::Read},
    {"attention.head_count_kv", Rule::Read},
    {"attention.layer_norm_rms_epsilon", Rule::Read},
    {"attention.key_length", Rule::Read},
    {"attention.value_length", Rule::Read},
    {"rope.dimension_count", Rule::Read},
    {"rope.freq_base", Rule::Read},
    {"rope.scaling.type", Rule::Read},
    {"rope.scaling.factor", Rule::Read},
    {"rope.scale_linear", Rule::Read},
    {"rope.scaling.attn_factor", Rule::Read},
    {"rope.scaling.original_context_length", Rule::Read},
    {"vocab_size", Rule::Ignored},              // the token list's length is what counts
    {"rope.scaling.finetuned", Rule::Ignored},  // provenance only
    {"pooling_type", Rule::Ignored},            // embeddings output; minfer returns logits
    {"attention.causal", Rule::Only, 1.0},
    {"expert_count", Rule::Only, 0.0},  // mixture of experts
    // 0 = no window (convert_hf_to_gguf.py writes it for llama configs whose layers are all
    // full attention); any real window is not implemented.
    {"attention.sliding_window", Rule::Only, 0.0},
    {"expert_used_count", Rule::Only, 0.0},
    {"expert_shared_count", Rule::Only, 0.0},
    {"rope.scaling.yarn_log_multiplier", Rule::Only, 0.0},
    // llama.cpp's llama/qwen loaders do not read these: its defaults are the only values
    // that mean the same thing to both engines.
    {"rope.scaling.yarn_beta_fast", Rule::Only, 32.0},
    {"rope.scaling.yarn_beta_slow", Rule::Only, 1.0},
    {"rope.scaling.yarn_attn_factor", Rule::Only, 1.0},
    // -1 = unset; 1 = what llama.cpp uses for type yarn (and convert_hf_to_gguf.py writes
    // when a config spells extrapolation_factor 1 out).
    {"rope.scaling.yarn_ext_factor", Rule::Only, -1.0, 1.0},
}};

// Gemma's own keys (model/hparams_gemma.cpp reads them), looked up before kRules: they
// override kRules' refusal of a real sliding window. gemma3 has no attention soft-capping in
// llama.cpp (its loader never reads attn_logit_softcapping), so that key stays refused there.
constexpr std::array<KeyRule, 5> kGemma2Rules = {{
    {"attention.sliding_window", Rule::Read},
    {"attention.sliding_window_pattern", Rule::Read},
    {"attn_logit_softcapping", Rule::Read},
    {"final_logit_softcapping", Rule::Read},
    {"rope.freq_base_swa", Rule::Read},
}};
constexpr std::array<KeyRule, 4> kGemma3Rules = {{
    {"attention.sliding_window", Rule::Read},
    {"attention.sliding_window_pattern", Rule::Read},
    {"final_logit_softcapping", Rule::Read},
    {"rope.freq_base_swa", Rule::Read},
}};

// Keys whose rule differs for phi3 (looked up before kRules; Read or Ignored only).
// attention.sliding_window: llama.cpp reads it for phi3 and then switches the window off for
// every phi3 file (llama_model_phi3::load_arch_hparams: "Phi SWA is currently disabled",
// swa_type NONE, n_swa 0), so Phi-3-mini's 2047 means full attention there. minfer runs the
// same full attention; refusing it would refuse every Phi-3 file llama.cpp runs.
constexpr std::array<KeyRule, 1> kPhi3Rules = {{
    {"attention.sliding_window", Rule::Ignored},
}};

// Per-architecture overrides of kRules (Read or Ignored only).
std::span<const KeyRule> arch_rules(std::string_view arch) {
  if (arch == "gemma2") return kGemma2Rules;
  if (arch == "gemma3") return kGemma3Rules;
  if (arch == "phi3") return kPhi3Rules;
  return {};
}

// A scalar's value as a number (bools 0/1); false for strings and arrays.
bool as_number(const gguf::Value& v, double* out) {
  if (const auto* u = std::get_if<uint64_t>(&v.scalar)) {
    *out = static_cast<double>(*u);
  } else if (const auto* i = std::get_if<int64_t>(&v.scalar)) {
    *out = static_cast<double>(*i);
  } else if (const auto* d = std::get_if<double>(&v.scalar)) {
    *out = *d;
  } else if (const auto* b = std::get_if<bool>(&v.scalar)) {
    *out = *b ? 1.0 : 0.0;
  } else {
    return false;
  }
  return v.type != gguf::ValueType::Array;
}

std::string value_text(const gguf::Value& v) {
  if (v.type == gguf::ValueType::Array) return fmt::format("an array of {}", v.array_size());
  if (const auto* s = std::get_if<std::string>(&v.scalar))
    return fmt::format("'{}'", s->size() > 64 ? s->substr(0, 64) + "..." : *s);
  if (const auto* b = std::get_if<bool>(&v.scalar)) return *b ? "true" : "false";
  double d = 0;
  as_number(v, &d);
  return fmt::format("{:g}", d);
}

void check_key(const gguf::File& f, const std::string& key, std::string_view suffix,
               const gguf::Value& v, std::span<const KeyRule> own) {
  for (const KeyRule& r : own)
    if (r.suffix == suffix) return;  // per-architecture overrides: Read / Ignored
  for (const KeyRule& r : kRules) {
    if (r.suffix != suffix) continue;
    if (r.rule != Rule::Only) return;
    double d = 0;
    if (as_number(v, &d) && (d == r.only || d == r.also)) return;
    fail(ErrorKind::Unsupported,
         "{}: key '{}' = {}: not implemented (minfer runs this architecture only with {} = {:g}); "
         "the file is refused rather than run with different math",
         f.path(), key, value_text(v), key, r.only);
  }
  fail(ErrorKind::Unsupported,
       "{}: key '{}' = {}: not implemented by minfer for this architecture (it may change the "
       "model's math, so the file is refused rather than run without it)",
       f.path(), key, value_text(v));
}

}  // namespace

void check_arch_metadata(const gguf::File& f) {
  const std::string& arch = f.get_string("general.architecture");
  bool known = false;
  for (std::string_view a : kArchs) known = known || a == arch;
  if (!known)
    fail(ErrorKind::Unsupported,
         "{}: key 'general.architecture' = '{}': architecture not supported (llama, qwen2, qwen3, "
         "gemma2, gemma3, phi3)",
         f.path(), arch);
  const std::string prefix = arch + ".";
  for (const auto& [key, value] : f.metadata()) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    check_key(f, key, std::string_view(key).substr(prefix.size()), value, arch_rules(arch));
  }
}

std::string unsupported_reason(const gguf::File& f) {
  try {
    const HParams hp = HParams::from_gguf(f);
    (void)ModelWeights::load(f, hp);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace minfer
