// minfer-bench-libs: minfer_sample minfer_common
// Sampler cost per token on one row of Qwen2's vocabulary (151,936 logits): the fast chain
// (Sampler::sample) against the plain one it is tested against (sample_reference), for the
// settings run/chat/serve use: greedy, llama.cpp's default chain (top-k 40, top-p 0.95,
// min-p 0.05, temperature 0.8), the same with a repetition penalty, and top-k off.
//   ./build/bench/bench_sample            (time per token in the Time column)
// The row: normal logits (sd 2) with a few standouts, as a model's; sampled tokens are
// accepted, so the penalty's history fills as in generation.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sample/sampler.h"

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

}  // namespace
