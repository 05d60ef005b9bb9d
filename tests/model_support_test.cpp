// minfer-test-libs: minfer_eager minfer_model minfer_gen
// What the model layer accepts (model/support.h): metadata and tensors that would change the
// math and are not implemented refuse the file naming the key / tensor and value; rope scaling
// (Llama 3 rope_freqs, linear, YaRN) read as llama.cpp reads it and computed the same by the
// graph path (fused and unfused), the eager path and a textbook reference forward.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.h"

#include "common/error.h"
#include "eager/forward.h"
#include "gen/gen.h"
#include "model/model.h"
#include "model/session.h"
#include "model/support.h"
#include "numeric_test_util.h"
#include "reference_forward.h"
#include "tiny_model.h"

namespace minfer {
namespace {

using test::max_abs_diff;
using test::reference_forward;
using testing::load_tiny_model;
using testing::make_tiny_model;
using testing::TinySpec;

struct Refusal {
  std::string kind;  // Unsupported / InvalidFile ...
  std::string message;
};

Refusal refusal_of(const TinySpec& s) {
  try {
    load_tiny_model(s);
  } catch (const Error& e) {
    return {e.kind() == ErrorKind::Unsupported ? "unsupported" : "other", e.what()};
  }
  return {};
}

void expect_refused(const TinySpec& s, const std::vector<std::string>& words) {
  const Refusal r = refusal_of(s);
  ASSERT_FALSE(r.message.empty()) << "accepted but should be refused";
  EXPECT_EQ(r.kind, "unsupported") << r.message;
  for (const std::string& w : words) EXPECT_NE(r.message.find(w), std::string::npos) << r.message;
  // info's check says the same.
  const auto bytes = make_tiny_model(s);
  const std::string why =
      unsupported_reason(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
  EXPECT_EQ(why, r.message);
}

TinySpec with(std::string key, gguf::Value v, std::string arch = "llama") {
  TinySpec s;
  s.arch = std::move(arch);
  s.overrides.emplace_back(s.arch + "." + key, std::move(v));
  return s;
}

TEST(ModelSupport, MathChangingKeysAreRefusedNamingKeyAndValue) {
  expect_refused(with("attn_logit_softcapping", gguf::Value::f32(50.0f)),
                 {"llama.attn_logit_softcapping", "50"});
  expect_refused(with("final_logit_softcapping", gguf::Value::f32(30.0f), "qwen2"),
                 {"qwen2.final_logit_softcapping", "30"});
  expect_refused(with("attention.sliding_window", gguf::Value::u32(4096)),
                 {"llama.attention.sliding_window", "4096"});
  expect_refused(with("expert_count", gguf::Value::u32(8)), {"llama.expert_count", "8"});
  expect_refused(with("attention.causal", gguf::Value::boolean(false), "qwen3"),
                 {"qwen3.attention.causal", "false"});
  expect_refused(with("embedding_scale", gguf::Value::f32(12.0f)), {"llama.embedding_scale"});
  expect_refused(with("rope.scaling.yarn_beta_fast", gguf::Value::f32(8.0f)),
                 {"llama.rope.scaling.yarn_beta_fast", "8"});
  expect_refused(with("rope.scaling.yarn_ext_factor", gguf::Value::f32(0.5f)),
                 {"llama.rope.scaling.yarn_ext_factor", "0.5"});
  expect_refused(with("some_future_key", gguf::Value::u32(1)), {"llama.some_future_key", "1"});
}

// Hostile rope scaling values: refused as bad files, naming the key / tensor and the value.
TEST(ModelSupport, HostileRopeScalingValuesAreRefused) {
  const auto invalid = [](const TinySpec& s, const std::string& what) {
    try {
      load_tiny_model(s);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidFile) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  invalid(with("rope.scaling.factor", gguf::Value::f32(-2.0f)), "llama.rope.scaling.factor");
  invalid(with("rope.scaling.factor", gguf::Value::f32(std::nanf(""))), "rope.scaling.factor");
  invalid(with("rope.scaling.attn_factor", gguf::Value::f32(0.0f)), "rope.scaling.attn_factor");
  invalid(with("rope.scaling.original_context_length", gguf::Value::u32(0)),
          "rope.scaling.original_context_length");
  TinySpec s;
  s.rope_freqs = {1.0f, 0.0f, 2.0f, 4.0f};
  invalid(s, "rope_freqs.weight");
  s.rope_freqs = {1.0f, 1.0f, std::nanf(""), 4.0f};
  invalid(s, "rope_freqs.weight");
}

TEST(ModelSupport, UnknownRopeScalingTypeIsRefused) {
  // ("longrope" is accepted: llama.cpp computes it as linear; model_phi3_test.cpp.)
  expect_refused(with("rope.scaling.type", gguf::Value::string("su")),
                 {"llama.rope.scaling.type", "su"});
}

TEST(ModelSupport, UnknownArchitectureIsRefused) {
  TinySpec s;
  s.arch = "gemma7";
  expect_refused(s, {"general.architecture", "gemma7"});
}

// Gemma 2 / 3: their own keys are read (windows, caps, the local rope base), with llama.cpp's
// defaults when absent; what llama.cpp's gemma3 does not implement (attention soft-capping)
// stays refused, and values that would break the math are bad files.
TEST(ModelSupport, GemmaKeysAreReadWithLlamaCppDefaults) {
  {
    auto l = load_tiny_model(with("rope.freq_base_swa", gguf::Value::f32(5000.0f), "gemma2"));
    const HParams& h = l->model->hparams();
    EXPECT_EQ(h.n_swa, 5);
    EXPECT_TRUE(h.is_swa(0));
    EXPECT_FALSE(h.is_swa(1));  // period 2: even layers windowed
    EXPECT_EQ(h.attn_softcap, 4.0f);
    EXPECT_EQ(h.final_softcap, 3.0f);
    EXPECT_EQ(h.rope(0).freq_base, 5000.0f);
    EXPECT_EQ(h.rope(1).freq_base, 1e6f);
    EXPECT_FLOAT_EQ(h.embd_scale, std::sqrt(32.0f));
    EXPECT_FLOAT_EQ(h.query_scale(), 1.0f / std::sqrt(8.0f));
  }
  {
    TinySpec s;
    s.arch = "gemma2";
    s.skip_key = "gemma2.attn_logit_softcapping";
    EXPECT_EQ(load_tiny_model(s)->model->hparams().attn_softcap, 50.0f);  // llama.cpp's default
    s.skip_key = "gemma2.attention.sliding_window";
    EXPECT_EQ(load_tiny_model(s)->model->hparams().n_swa, 4096);
  }
  {
    TinySpec s;
    s.arch = "gemma3";
    s.skip_key = "gemma3.attention.sliding_window_pattern";
    auto l = load_tiny_model(s);
    const HParams& h = l->model->hparams();
    EXPECT_EQ(h.swa_period, 6);
    EXPECT_TRUE(h.is_swa(1));
    EXPECT_EQ(h.rope(0).freq_base, 10000.0f);  // gemma3's local base
    EXPECT_EQ(h.final_softcap, 0.0f);
    s.skip_key = "gemma3.attention.sliding_window";
    EXPECT_FALSE(load_tiny_model(s)->model->hparams().is_swa(0));  // no window: all global
  }
  expect_refused(with("attn_logit_softcapping", gguf::Value::f32(50.0f), "gemma3"),
                 {"gemma3.attn_logit_softcapping", "50"});
  for (const auto& [key, v] :
       {std::pair<std::string, gguf::Value>{"attention.sliding_window", gguf::Value::u32(0)},
        {"final_logit_softcapping", gguf::Value::f32(0.0f)},
        {"attn_logit_softcapping", gguf::Value::f32(std::nanf(""))}}) {
    try {
      load_tiny_model(with(key, v, "gemma2"));
      ADD_FAILURE() << "accepted gemma2." << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidFile) << e.what();
      EXPECT_NE(std::string(e.what()).find("gemma2." + key), std::string::npos) << e.what();
    }
  }
  TinySpec s;
  s.arch = "gemma2";
  s.bad_tensor = "blk.1.post_ffw_norm.weight";
  EXPECT_THROW(load_tiny_model(s), Error);
}

// attention.sliding_window_pattern as one bool per layer (newer converters): followed layer by
// layer; a wrong length, a non-bool entry or a non-integer array is refused naming the key.
gguf::Value bool_array(std::vector<int64_t> flags, gguf::ValueType type = gguf::ValueType::Bool) {
  gguf::Value v;
  v.type = gguf::ValueType::Array;
  v.array_type = type;
  v.ints = std::move(flags);
  return v;
}

TEST(ModelSupport, GemmaSlidingWindowPatternArray) {
  for (const char* arch : {"gemma2", "gemma3"}) {
    // The opposite of either default (period 2 / 6 window layer 0): layer 1 only.
    auto l = load_tiny_model(with("attention.sliding_window_pattern", bool_array({0, 1}), arch));
    const HParams& h = l->model->hparams();
    EXPECT_FALSE(h.is_swa(0)) << arch;
    EXPECT_TRUE(h.is_swa(1)) << arch;
    EXPECT_EQ(h.attn_window(1), h.n_swa) << arch;
    auto all = load_tiny_model(
        with("attention.sliding_window_pattern", bool_array({1, 1}, gguf::ValueType::U8), arch));
    EXPECT_TRUE(all->model->hparams().is_swa(0) && all->model->hparams().is_swa(1)) << arch;
  }
  const std::string key = "gemma2.attention.sliding_window_pattern";
  for (const auto& [v, what] : {std::pair<gguf::Value, std::string>{bool_array({1}), "1 entries"},
                                {bool_array({1, 0, 1}), "3 entries"},
                                {bool_array({0, 2}, gguf::ValueType::I32), "entry 1 = 2"},
                                {gguf::Value::f32_array({1.0f, 0.0f}), key}}) {
    try {
      load_tiny_model(with("attention.sliding_window_pattern", v, "gemma2"));
      ADD_FAILURE() << "accepted " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidFile) << e.what();
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

TEST(ModelSupport, TensorTheGraphWouldNotReadIsRefused) {
  TinySpec s;
  s.extra_tensors = {"blk.0.post_attention_norm.weight"};
  expect_refused(s, {"blk.0.post_attention_norm.weight", "not used"});
}

TEST(ModelSupport, NeutralValuesAndDescriptiveKeysAreAccepted) {
  TinySpec s;
  s.overrides = {{"llama.expert_count", gguf::Value::u32(0)},
                 {"llama.attention.causal", gguf::Value::boolean(true)},
                 {"llama.vocab_size", gguf::Value::u32(64)},
                 {"llama.rope.scaling.type", gguf::Value::string("none")},
                 {"llama.rope.scaling.yarn_beta_fast", gguf::Value::f32(32.0f)},
                 {"llama.attention.sliding_window", gguf::Value::u32(0)},
                 {"llama.rope.scaling.yarn_ext_factor", gguf::Value::f32(1.0f)},
                 {"llama.rope.scaling.factor", gguf::Value::f32(4.0f)}};
  auto l = load_tiny_model(s);
  EXPECT_EQ(l->model->hparams().rope_scaling, RopeScaling::None);
  EXPECT_EQ(l->model->hparams().rope().freq_scale, 1.0f);  // "none" never scales
  const auto bytes = make_tiny_model(s);
  EXPECT_EQ(unsupported_reason(gguf::File::from_memory(bytes.data(), bytes.size(), "t")), "");
}

TEST(ModelSupport, RopeScalingKeysAsLlamaCppReadsThem) {
  TinySpec s = with("rope.scaling.type", gguf::Value::string("yarn"), "qwen2");
  s.overrides.emplace_back("qwen2.rope.scaling.factor", gguf::Value::f32(4.0f));
  s.overrides.emplace_back("qwen2.rope.scaling.original_context_length", gguf::Value::u32(64));
  const RopeConfig r = load_tiny_model(s)->model->hparams().rope();
  EXPECT_EQ(r.mode, RopeMode::Neox);
  EXPECT_FLOAT_EQ(r.freq_scale, 0.25f);
  EXPECT_EQ(r.ext_factor, 1.0f);
  // llama.cpp: mscale(4) / (1 + 0.1 ln 4) = 1; the kernel multiplies (1 + 0.1 ln 4) back.
  EXPECT_FLOAT_EQ(r.attn_factor, 1.0f);
  EXPECT_EQ(r.n_ctx_orig, 64);

  // Linear through the old key name; no original_context_length: the training context.
  const RopeConfig lin =
      load_tiny_model(with("rope.scale_linear", gguf::Value::f32(2.0f)))->model->hparams().rope();
  EXPECT_FLOAT_EQ(lin.freq_scale, 0.5f);
  EXPECT_EQ(lin.ext_factor, 0.0f);
  EXPECT_EQ(lin.n_ctx_orig, 256);
}

// Every command that loads a model refuses the same file with the same key and value; `info`
// prints the file and says why it cannot run.
TEST(ModelSupportCli, InfoRunChatServeAllRefuse) {
  namespace fs = std::filesystem;
  const fs::path path =
      fs::temp_directory_path() / ("minfer_support_" + std::to_string(::getpid()) + ".gguf");
  {
    const auto bytes = make_tiny_model(with("attn_logit_softcapping", gguf::Value::f32(50.0f)));
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  const std::string bin = MINFER_BINARY, m = " -m " + path.string();
  const auto info = test::run_captured(bin + " info" + m, "support");
  EXPECT_EQ(info.status, 0) << info.err;
  EXPECT_NE(info.out.find("runnable:    no: "), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("llama.attn_logit_softcapping"), std::string::npos) << info.out;
  // serve would listen forever if it accepted the file: `timeout` bounds the test.
  for (const std::string& cmd : {bin + " run -p hi -n 1" + m, bin + " chat" + m + " </dev/null",
                                "timeout 30 " + bin + " serve --port 0" + m}) {
    const auto r = test::run_captured(cmd, "support");
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_NE(r.err.find("llama.attn_logit_softcapping' = 50"), std::string::npos)
        << cmd << ": " << r.err;
  }
  fs::remove(path);
}

// ---- rope scaling end to end: graph (fused / unfused), eager and the reference agree --------

struct ScaledCase {
  std::string name;
  TinySpec spec;
};

std::vector<ScaledCase> scaled_cases() {
  std::vector<ScaledCase> v;
  {  // Llama 3: per-pair divisors (head_dim 8: 4 factors), no other scaling.
    ScaledCase c{"llama3_rope_freqs", {}};
    c.spec.rope_freqs = {1.0f, 1.7f, 5.3f, 8.0f};
    v.push_back(c);
  }
  {  // Llama 3 factors on top of linear scaling.
    ScaledCase c{"llama3_plus_linear", {}};
    c.spec.rope_freqs = {1.0f, 2.0f, 4.0f, 8.0f};
    c.spec.overrides = {{"llama.rope.scaling.type", gguf::Value::string("linear")},
                        {"llama.rope.scaling.factor", gguf::Value::f32(2.0f)}};
    v.push_back(c);
  }
  {  // YaRN on qwen2 (NeoX): base 100 and original context 256 put the ramp across pairs 0..4.
    ScaledCase c{"qwen2_yarn", {}};
    c.spec.arch = "qwen2";
    c.spec.overrides = {{"qwen2.rope.freq_base", gguf::Value::f32(100.0f)},
                        {"qwen2.rope.scaling.type", gguf::Value::string("yarn")},
                        {"qwen2.rope.scaling.factor", gguf::Value::f32(4.0f)},
                        {"qwen2.rope.scaling.attn_factor", gguf::Value::f32(0.9f)},
                        {"qwen2.rope.scaling.original_context_length", gguf::Value::u32(256)}};
    v.push_back(c);
  }
  return v;
}

std::vector<int32_t> tokens(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + 11) % 64;
  return t;
}

TEST(ModelRopeScaling, GraphAndEagerMatchReferenceForward) {
  for (const ScaledCase& c : scaled_cases()) {
    SCOPED_TRACE(c.name);
    auto l = load_tiny_model(c.spec);
    l->model->prepare_fused_qkv();
    const auto toks = tokens(12);
    const auto ref = reference_forward(*l->model, toks);
    std::vector<int32_t> all(toks.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
    for (bool fuse : {false, true}) {
      SessionParams sp;
      sp.n_ctx = 32;
      sp.n_threads = 2;
      sp.fusion = {fuse, fuse};
      sp.type_k = sp.type_v = GgmlType::F32;
      Session sess(*l->model, sp);
      const auto lg = sess.eval(toks, 0, all);
      for (size_t t = 0; t < toks.size(); ++t)
        EXPECT_LT(max_abs_diff(lg.subspan(t * 64, 64), ref[t]), 1e-4f)
            << "graph, token " << t << " fused " << fuse;

      eager::EagerParams ep;
      ep.n_ctx = 32;
      ep.fusion = {fuse, fuse};
      ep.kv_type = GgmlType::F32;
      eager::EagerSession es(*l->model, ep);
      const auto le = es.eval(toks, 0, all);
      for (size_t t = 0; t < toks.size(); ++t)
        EXPECT_LT(max_abs_diff(le.subspan(t * 64, 64), ref[t]), 1e-4f)
            << "eager, token " << t << " fused " << fuse;
    }
  }
}

// The scaling must actually reach the math: the same weights without it give other logits.
TEST(ModelRopeScaling, ScalingChangesTheLogits) {
  for (const ScaledCase& c : scaled_cases()) {
    SCOPED_TRACE(c.name);
    TinySpec plain;
    plain.arch = c.spec.arch;
    auto a = load_tiny_model(c.spec);
    auto b = load_tiny_model(plain);
    const auto toks = tokens(12);
    SessionParams sp;
    sp.n_ctx = 32;
    sp.type_k = sp.type_v = GgmlType::F32;
    Session sa(*a->model, sp), sb(*b->model, sp);
    const auto la = sa.eval_last(toks, 0);
    const std::vector<float> va(la.begin(), la.end());
    EXPECT_GT(max_abs_diff(va, sb.eval_last(toks, 0)), 1e-3f);
  }
}

// SmolLM and Mistral files are llama-architecture files: their `minfer gen` presets (real
// shapes) load and run through the llama graph. SmolLM2-135M is generated (one layer, q4_0,
// Llama 2's 32000-token vocabulary: 10 MB) and evaluated; Mistral-7B's plan is checked only
// (a layer is 200M parameters).
TEST(ModelLlamaFamily, SmolLMAndMistralRunThroughTheLlamaPath) {
  namespace fs = std::filesystem;
  const gen::Preset& m7 = gen::find_preset("mistral-7b-v0.3");
  EXPECT_EQ(m7.arch, "llama");
  EXPECT_EQ(m7.n_head_kv, 8);
  EXPECT_EQ(m7.n_ff, 14336);
  for (const auto& [k, v] : gen::model_metadata(m7, gen::WeightMix::F16, gen::Vocab{}, 1))
    EXPECT_EQ(k.find("sliding_window"), std::string::npos) << k;

  const fs::path vocab = fs::path(MINFER_SHARED_DIR) / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) GTEST_SKIP() << "no " << vocab << " (../shared absent)";
  gen::GenOptions o;
  o.preset = "smollm2-135m";
  o.type = "q4_0";
  o.n_layer = 1;
  o.vocab_path = vocab.string();
  o.n_threads = 2;
  o.out_path =
      (fs::temp_directory_path() / ("minfer_smollm_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  gen::generate(o);
  {
    auto model = Model::load(o.out_path);
    const HParams& h = model->hparams();
    EXPECT_EQ(h.arch, Arch::Llama);
    EXPECT_EQ(h.n_head, 9);
    EXPECT_EQ(h.n_head_kv, 3);
    EXPECT_EQ(h.head_dim, 64);
    EXPECT_TRUE(model->weights().tied_output);
    SessionParams sp;
    sp.n_ctx = 16;
    sp.n_threads = 2;
    Session s(*model, sp);
    const std::vector<int32_t> toks = {1, 450, 4996, 17354};
    const auto lg = s.eval_last(toks, 0);
    ASSERT_EQ(lg.size(), 32000u);
    for (float x : lg) ASSERT_TRUE(std::isfinite(x));
  }
  fs::remove(o.out_path);
}

}  // namespace
}  // namespace minfer
