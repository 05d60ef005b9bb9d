// minfer-test-libs: minfer_eager minfer_model minfer_gen
// Eager vs graph on every full-size `minfer gen` preset (Qwen2.5, Qwen3, Llama 3.2, SmolLM2,
// Mistral, Gemma 2 / 3, Phi-3 / 3.5): real widths, head counts, head_dim, rope settings and
// windows, one layer deep (GenOptions::n_layer = 1) with the shared 32,000-token SentencePiece
// vocabulary, so a preset is tens to hundreds of MB instead of GBs. The tiny presets are in
// eager_forward_test. Label "slow" (the file name): the Release run of scripts/test.sh runs it,
// the sanitizer run does not. Cost: 15 s CPU (57 s wall at load average 11 on the shared
// 2-core machine), ~300 MB written to and removed from the temp directory, one file at a time.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <string>

#include "eager_vs_graph_util.h"
#include "gen/gen.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

const fs::path kVocab = fs::path(MINFER_SHARED_DIR) / "vocab" / "ggml-vocab-llama-spm.gguf";

TEST(EagerVsGraphPresets, EveryFullSizeGenPresetOneLayerSameLogits) {
  if (!fs::exists(kVocab)) GTEST_SKIP() << "needs " << kVocab;
  const fs::path dir =
      fs::temp_directory_path() / ("minfer_eager_presets_slow_" + std::to_string(getpid()));
  fs::create_directories(dir);
  int n_presets = 0;
  for (const gen::Preset& p : gen::presets()) {
    if (p.tiny) continue;
    ++n_presets;
    SCOPED_TRACE(p.name);
    gen::GenOptions o;
    o.preset = p.name;
    o.type = "q4_0";  // the smallest file; every preset's rows are whole q4_0 blocks
    o.vocab_path = kVocab.string();
    o.out_path = (dir / (p.name + ".gguf")).string();
    o.n_layer = 1;
    o.n_threads = 2;
    gen::generate(o);
    {
      auto model = Model::load(o.out_path);
      model->prepare_fused_qkv();
      const test::EagerVsGraph r =
          test::compare_eager_and_graph(*model, /*fused=*/true, GgmlType::F16, /*n_threads=*/2);
      EXPECT_TRUE(r.finite);
      EXPECT_LE(r.max_diff, 1e-6);
      EXPECT_EQ(r.outstanding, 0);
      EXPECT_EQ(r.allocs_after, 0);
    }
    fs::remove(o.out_path);
  }
  fs::remove_all(dir);
  EXPECT_GE(n_presets, 10) << "full-size presets went missing";
}

}  // namespace
}  // namespace minfer
