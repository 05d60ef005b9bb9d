// minfer-test-libs: minfer_model minfer_tokenizer minfer_sample
// Greedy generation on stories260K must start with llama.cpp's output for each golden case
// (BOS added, temperature 0, 96 new tokens, context 2048; ../shared/golden/README.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "model/model.h"
#include "model/session.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The same loop `minfer run --temp 0` runs: prefill, then greedy decode with streamed text.
std::string generate(Model& m, const tok::Tokenizer& tk, const std::string& prompt, int n_new,
                     const FusionToggles& fusion) {
  SessionParams sp;
  sp.n_ctx = 2048;
  sp.n_threads = 2;
  sp.fusion = fusion;
  Session s(m, sp);
  SamplerParams smp;
  smp.temperature = 0.0f;
  smp.seed = 1;
  Sampler sampler(smp, static_cast<int32_t>(m.hparams().n_vocab));
  const auto toks = tk.tokenize(prompt, {.add_special = true, .parse_special = true});
  auto logits = s.eval_last(toks, 0);
  tok::StreamDecoder dec(tk);
  std::string out;
  int64_t pos = static_cast<int64_t>(toks.size());
  for (int i = 0; i < n_new; ++i) {
    const int32_t next = sampler.sample(logits);
    if (tk.is_eog(next)) break;
    out += dec.push(next);
    if (i + 1 == n_new) break;
    logits = s.eval_last(std::span<const int32_t>(&next, 1), pos++);
  }
  return out + dec.flush();
}

void run_goldens(const FusionToggles& fusion) {
  const fs::path shared = MINFER_SHARED_DIR;
  const fs::path model = shared / "models" / "stories260K.gguf";
  const fs::path dir = shared / "golden" / "stories260K";
  if (!fs::exists(model) || !fs::exists(dir))
    GTEST_SKIP() << "../shared is absent (" << model << "): golden test skipped";
  auto m = Model::load(model.string());
  const auto tk = tok::Tokenizer::from_gguf(m->file());
  int n_cases = 0;
  for (int i = 1;; ++i) {
    const fs::path prompt = dir / ("case" + std::to_string(i) + ".prompt");
    if (!fs::exists(prompt)) break;
    const std::string expected = slurp(dir / ("case" + std::to_string(i) + ".expected"));
    const std::string got = generate(*m, tk, slurp(prompt), 96, fusion);
    // llama.cpp ends its output with newlines after the last token; when generation stops
    // right at the end of the expected text those trailing newlines are not model output.
    // Where we generated past that point, the newlines must be there as well.
    std::string text = expected;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    const std::string& want = got.size() > text.size() ? expected : text;
    EXPECT_EQ(got.substr(0, want.size()), want) << "case" << i << " full output:\n" << got;
    ++n_cases;
  }
  EXPECT_GE(n_cases, 1);
}

TEST(Golden, Stories260KFused) {
  run_goldens({true, true});
}
TEST(Golden, Stories260KUnfused) {
  run_goldens({false, false, false});
}

}  // namespace
}  // namespace minfer
