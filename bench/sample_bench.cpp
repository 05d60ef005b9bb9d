// minfer-bench-libs: minfer_sample minfer_grammar minfer_tokenizer minfer_gguf minfer_common
// Sampler cost per token on one row of Qwen2's vocabulary (151,936 logits): the fast chain
// (Sampler::sample) against the plain one it is tested against (sample_reference), for the
// settings run/chat/serve use: greedy, llama.cpp's default chain (top-k 40, top-p 0.95,
// min-p 0.05, temperature 0.8), the same with a repetition penalty, and top-k off.
//   ./build/bench/bench_sample            (time per token in the Time column)
// BM_SampleGrammar: the same with a grammar over Qwen2's real vocabulary (../shared/vocab/
// ggml-vocab-qwen2.gguf): a drawn token the grammar allows (one walk of its bytes), and a
// rejected one (the whole-vocabulary mask and a second draw) at three states of the JSON
// grammar; BM_GrammarMask the mask alone, BM_GrammarVocabIndex the one-off trie build.
// The row: normal logits (sd 2) with a few standouts, as a model's; sampled tokens are
// accepted, so the penalty's history fills as in generation.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/token_filter.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace {

using minfer::Sampler;
using minfer::SamplerParams;

constexpr int32_t kVocab = 151936;

const std::vector<float>& row() {
  static const std::vector<float> r = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> x(kVocab);
    for (auto& v : x) v = nd(rng);
    for (int j = 0; j < 8; ++j) x[rng() % kVocab] = 10.0f + float(j);
    return x;
  }();
  return r;
}

SamplerParams params(int setting) {
  SamplerParams p;
  p.seed = 1234;
  switch (setting) {
    case 0:  // greedy
      p.temperature = 0.0f;
      break;
    case 1:  // llama.cpp's default chain
      break;
    case 2:  // default + repetition penalty over the last 64 tokens
      p.repeat_penalty = 1.1f;
      break;
    case 3:  // top-k off: top-p over the whole vocabulary
      p.top_k = 0;
      break;
  }
  return p;
}

const char* kNames[] = {"greedy", "default", "default+penalty", "top-k off"};

template <bool kReference>
void BM_Sample(benchmark::State& state) {
  const int setting = static_cast<int>(state.range(0));
  Sampler s(params(setting), kVocab);
  const std::vector<float>& x = row();
  for (int i = 0; i < 64; ++i) s.accept(i * 997 % kVocab);  // a full penalty window
  for (auto _ : state) {
    const int32_t t = kReference ? s.sample_reference(x) : s.sample(x);
    s.accept(t);
    benchmark::DoNotOptimize(t);
  }
  state.SetLabel(kNames[setting]);
}

BENCHMARK(BM_Sample<false>)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Sample<true>)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

// ---- grammar-constrained sampling over Qwen2's vocabulary ----

struct QwenVocab {
  std::unique_ptr<minfer::tok::Tokenizer> tk;
  std::vector<std::string> pieces;
};

const QwenVocab* qwen() {
  static const std::unique_ptr<QwenVocab> v = []() -> std::unique_ptr<QwenVocab> {
    const std::string path = std::string(MINFER_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf";
    try {
      auto q = std::make_unique<QwenVocab>();
      q->tk = std::make_unique<minfer::tok::Tokenizer>(
          minfer::tok::Tokenizer::from_gguf(minfer::gguf::File::open(path)));
      q->pieces.resize(kVocab);
      for (int32_t id = 0; id < std::min(kVocab, q->tk->n_tokens()); ++id)
        q->pieces[size_t(id)] = q->tk->token_to_piece(id);
      return q;
    } catch (const std::exception&) {
      return nullptr;
    }
  }();
  return v.get();
}

std::shared_ptr<const minfer::grammar::VocabIndex> qwen_index() {
  static const auto idx = qwen() ? std::make_shared<const minfer::grammar::VocabIndex>(
                                       qwen()->pieces, qwen()->tk->eog_ids())
                                 : nullptr;
  return idx;
}

// The JSON-object grammar after `prefix`: 0 the start (only "{" and whitespace tokens pass),
// 1 inside a string value (almost every token passes), 2 after a value (, or }).
const char* kStates[] = {"", "{\"name\": \"Al", "{\"name\": 12"};
const char* kStateNames[] = {"json start", "json in string", "json after value"};

std::unique_ptr<minfer::grammar::TokenFilter> json_filter(int state) {
  auto g = std::make_shared<const minfer::grammar::Grammar>(
      minfer::grammar::parse_gbnf(minfer::grammar::json_object_gbnf()));
  auto f = std::make_unique<minfer::grammar::TokenFilter>(g, qwen_index());
  for (const int32_t t : qwen()->tk->tokenize(kStates[state], {.add_special = false}))
    if (!f->accept(t)) return nullptr;
  return f;
}

// range(0): 0 greedy, 1 the default chain; range(1): the JSON state; range(2): 1 the row's
// best tokens are ones the grammar rejects (the mask path), 0 one it allows is on top.
void BM_SampleGrammar(benchmark::State& state) {
  if (!qwen()) return state.SkipWithError("../shared/vocab/ggml-vocab-qwen2.gguf absent");
  const int st = static_cast<int>(state.range(1));
  const bool rejected = state.range(2) != 0;
  auto f = json_filter(st);
  if (!f) return state.SkipWithError("prefix rejected");
  std::vector<float> x = row();
  // Put a token on top that the grammar allows (or rejects) in this state.
  int32_t top = -1;
  for (int32_t id = 0; id < kVocab && top < 0; ++id)
    if (f->allows(id) != rejected && !qwen()->pieces[size_t(id)].empty()) top = id;
  for (int j = 0; j < 8; ++j) x[size_t((top + j * 7919) % kVocab)] = 9.0f;
  x[size_t(top)] = 30.0f;
  Sampler s(params(static_cast<int>(state.range(0))), kVocab);
  for (auto _ : state) {
    const int32_t t = s.sample(x, *f);
    benchmark::DoNotOptimize(t);
  }
  state.counters["masks/token"] =
      double(s.n_grammar_masks()) / double(std::max<int64_t>(1, s.n_grammar_samples()));
  state.SetLabel(std::string(kNames[state.range(0)]) + ", " + kStateNames[st] +
                 (rejected ? ", top token rejected" : ", top token allowed"));
}

void BM_GrammarMask(benchmark::State& state) {
  if (!qwen()) return state.SkipWithError("../shared/vocab/ggml-vocab-qwen2.gguf absent");
  const int st = static_cast<int>(state.range(0));
  auto f = json_filter(st);
  std::vector<float> x = row();
  size_t allowed = 0;
  for (auto _ : state) {
    std::vector<float>& w = x;
    allowed = f->mask(w);
    benchmark::DoNotOptimize(w.data());
  }
  state.counters["allowed"] = double(allowed);
  state.SetLabel(kStateNames[st]);
}

void BM_GrammarVocabIndex(benchmark::State& state) {
  if (!qwen()) return state.SkipWithError("../shared/vocab/ggml-vocab-qwen2.gguf absent");
  size_t nodes = 0;
  for (auto _ : state) {
    minfer::grammar::VocabIndex v(qwen()->pieces, qwen()->tk->eog_ids());
    nodes = v.n_trie_nodes();
    benchmark::DoNotOptimize(nodes);
  }
  state.counters["trie nodes"] = double(nodes);
}

BENCHMARK(BM_SampleGrammar)
    ->ArgsProduct({{0, 1}, {0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GrammarMask)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GrammarVocabIndex)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
