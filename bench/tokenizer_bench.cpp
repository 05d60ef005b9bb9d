// minfer-bench-libs: minfer_tokenizer minfer_gguf minfer_common
// Tokenizer throughput on ~300 KB of deterministic mixed-script text (English, German,
// Cyrillic, CJK, emoji, code, numbers) with the vocabularies in ../shared/vocab.
//   ./build/bench/bench_tokenizer            (MB/s in the bytes_per_second column)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

using minfer::tok::Tokenizer;

// Deterministic text: a fixed-seed LCG picks fragments until the target size is reached.
std::string mixed_text(size_t target_bytes) {
  static const char* const kFragments[] = {
      "The quick brown fox jumps over the lazy dog. ",
      "In 2024, revenue grew 17.5% to $3,141,592 (up from $2,718,281). ",
      "Die Straße nach München ist über 600 km lang, schätzungsweise. ",
      "Съешь же ещё этих мягких французских булок, да выпей чаю. ",
      "我们今天去公园散步，天气非常好。東京は日本の首都です。 ",
      "안녕하세요, 만나서 반갑습니다. ",
      "Emoji time 🚀🔥😀👍🏽 and flags 🇩🇪🇯🇵 — done! ",
      "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
      "def f(x):\n    return {'key': [1, 2, 3], \"v\": x ** 2}\n",
      "    if (err != nil) {\n\t\treturn fmt.Errorf(\"bad: %w\", err)\n\t}\n",
      "3.14159 2.71828 1e-9 0xDEADBEEF 1234567890 ",
      "I've been told it's what they'd say, isn't it? ",
      "\n\n",
  };
  constexpr size_t kN = sizeof(kFragments) / sizeof(kFragments[0]);
  std::string s;
  s.reserve(target_bytes + 128);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  while (s.size() < target_bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    s += kFragments[(state >> 33) % kN];
  }
  return s;
}

const std::string& bench_text() {
  static const std::string text = mixed_text(300 * 1024);
  return text;
}

const Tokenizer* load(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  const auto path = std::filesystem::path(MINFER_SHARED_DIR) / "vocab" / name;
  std::unique_ptr<Tokenizer> tk;
  if (std::filesystem::exists(path)) {
    auto file = minfer::gguf::File::open(path.string());
    tk = std::make_unique<Tokenizer>(Tokenizer::from_gguf(file));
  }
  return cache.emplace(name, std::move(tk)).first->second.get();
}

void tokenize_bench(benchmark::State& state, const std::string& vocab) {
  const Tokenizer* tk = load(vocab);
  if (!tk) {
    state.SkipWithError(("vocabulary not found: " + vocab).c_str());
    return;
  }
  const std::string& text = bench_text();
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tk->tokenize(text, {.add_special = false, .parse_special = false});
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["text_KB"] = static_cast<double>(text.size()) / 1024.0;
}

void BM_Tokenize_Qwen2(benchmark::State& s) {
  tokenize_bench(s, "ggml-vocab-qwen2.gguf");
}
void BM_Tokenize_LlamaSpm(benchmark::State& s) {
  tokenize_bench(s, "ggml-vocab-llama-spm.gguf");
}
void BM_Tokenize_LlamaBpe(benchmark::State& s) {
  tokenize_bench(s, "ggml-vocab-llama-bpe.gguf");
}

}  // namespace

BENCHMARK(BM_Tokenize_Qwen2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Tokenize_LlamaSpm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Tokenize_LlamaBpe)->Unit(benchmark::kMillisecond);
