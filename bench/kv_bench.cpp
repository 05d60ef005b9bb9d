// minfer-bench-libs: minfer_backend_cpu minfer_common
// KV cache element types: attention over f32 vs f16 vs q8_0 K/V (the same shapes, back to back),
// and the row store (f32 copy vs f16 conversion vs Q8_0 quantization). Qwen2.5-0.5B's attention
// shape: head_dim 64, 14 query heads, 2 KV heads. Decode = one query token at position n_kv-1;
// prefill = 512 causal tokens. Threads: MINFER_BENCH_THREADS (default 2).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "common/fp16.h"
#include "common/quant.h"

namespace {

using namespace minfer;
using namespace minfer::cpu;

int bench_threads() {
  const char* e = std::getenv("MINFER_BENCH_THREADS");
  return e ? std::atoi(e) : 2;
}

struct Shared {
  explicit Shared(int n) : pool(n) {}
  ThreadPool pool;
  Arena arena;
};

Shared& shared() {
  static Shared sh(bench_threads());
  return sh;
}

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// n_tok query tokens at positions n_kv - n_tok .. n_kv - 1 over n_kv cached rows.
void BM_attention(benchmark::State& st, GgmlType type, int64_t n_tok, int64_t n_kv) {
  constexpr int64_t hd = 64, nh = 14, nkv = 2;
  Shared& sh = shared();
  const auto kf = randn(hd * nkv * n_kv, 1), vf = randn(kf.size(), 2);
  std::vector<uint16_t> kh(kf.size()), vh(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) {
    kh[i] = f32_to_fp16(kf[i]);
    vh[i] = f32_to_fp16(vf[i]);
  }
  const size_t rs = row_size(GgmlType::Q8_0, hd * nkv);
  std::vector<uint8_t> kq(rs * n_kv), vq(rs * n_kv);
  for (int64_t r = 0; r < n_kv; ++r) {
    quantize_row(GgmlType::Q8_0, kf.data() + r * hd * nkv, kq.data() + r * rs, hd * nkv);
    quantize_row(GgmlType::Q8_0, vf.data() + r * hd * nkv, vq.data() + r * rs, hd * nkv);
  }
  const auto q = randn(hd * nh * n_tok, 3);
  std::vector<float> out(q.size());
  std::vector<int32_t> pos(n_tok);
  for (int64_t t = 0; t < n_tok; ++t) pos[t] = (int32_t)(n_kv - n_tok + t);
  const bool f16 = type == GgmlType::F16, q8 = type == GgmlType::Q8_0;
  AttentionArgs a{q.data(),
                  HeadLayout{hd, nh, n_tok, 0, 0},
                  q8    ? (const void*)kq.data()
                  : f16 ? (const void*)kh.data()
                        : kf.data(),
                  q8    ? (const void*)vq.data()
                  : f16 ? (const void*)vh.data()
                        : vf.data(),
                  hd * nkv,
                  n_kv,
                  (int32_t)nkv,
                  pos.data(),
                  0.125f,
                  out.data(),
                  type,
                  type};
  const Exec ex{&sh.pool, &sh.arena, SimdLevel::kBest};
  for (auto _ : st) {
    attention(ex, a);
    benchmark::DoNotOptimize(out.data());
  }
  // K and V bytes the kernel reads at least once.
  const double kv_bytes = 2.0 * static_cast<double>(row_size(type, hd * nkv)) * n_kv;
  st.counters["KV_GB/s"] =
      benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Storing n_tok rows of 128 (K and V) at positions 0..n_tok-1.
void BM_kv_store(benchmark::State& st, GgmlType type, int64_t n_tok) {
  constexpr int64_t w = 128;
  Shared& sh = shared();
  const auto k = randn(w * n_tok, 1), v = randn(w * n_tok, 2);
  std::vector<float> kr(w * n_tok), vr(w * n_tok);
  std::vector<int32_t> pos(n_tok);
  for (int64_t t = 0; t < n_tok; ++t) pos[t] = (int32_t)t;
  const Exec ex{&sh.pool, &sh.arena, SimdLevel::kBest};
  for (auto _ : st) {
    kv_store(ex, k.data(), w, v.data(), w, w, n_tok, pos.data(),
             KvRegions{kr.data(), vr.data(), type, type}, n_tok);
    benchmark::DoNotOptimize(kr.data());
  }
}

void register_all() {
  for (const auto& [t, tn] : {std::pair{GgmlType::F32, "f32"}, std::pair{GgmlType::F16, "f16"},
                              std::pair{GgmlType::Q8_0, "q8_0"}}) {
    for (int64_t n_kv : {512, 4096, 16384})
      benchmark::RegisterBenchmark(
          (std::string("attention_decode/") + tn + "/kv" + std::to_string(n_kv)).c_str(),
          BM_attention, t, 1, n_kv)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("attention_prefill/") + tn + "/t512").c_str(),
                                 BM_attention, t, 512, 512)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("kv_store/") + tn + "/t512").c_str(), BM_kv_store, t,
                                 512)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

const int kRegistered = (register_all(), 0);

}  // namespace
