// minfer-bench-libs: minfer_backend_cpu minfer_common
// Matmul kernels at the Qwen2.5-0.5B shapes, decode (m=1) and prefill (m=512).
// Counters: GFLOP/s (2 * n_in * n_out * m per call) and GB/s (weight bytes streamed per call).
// Threads: MINFER_BENCH_THREADS (default 2). SIMD cap: MINFER_SIMD=scalar|avx2.
// matmul_bs/TYPE/SHAPE/mM/{gguf,packed}: small batches (decode of M sequences) and prefill, the
// weight in its GGUF layout against the load-time packed copy (PackedWeights); with
// MINFER_BENCH_THREADS=1 the CPU-time column is robust to a loaded machine.
// pack/TYPE/SHAPE: the load-time repack of one matrix (one thread; GB/s of GGUF bytes).
// stream/TYPE/N_IN/m1/packed: decode over ~192 MiB of load-time panels (from memory).
//   ./build-kernels/bench/bench_kernels --benchmark_filter='q8_0'
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/thread_pool.h"
#include "common/fp16.h"

namespace {

using minfer::GgmlType;
using namespace minfer::cpu;

int bench_threads() {
  const char* e = std::getenv("MINFER_BENCH_THREADS");
  return e ? std::atoi(e) : 2;
}

// Random codes with sane scales; speed does not depend on the values.
std::vector<uint8_t> make_weights(GgmlType t, int64_t n_in, int64_t n_out) {
  const size_t rs = minfer::row_size(t, n_in);
  std::vector<uint8_t> w(rs * n_out);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= w.size(); i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    std::memcpy(&w[i], &s, 8);
  }
  const auto& tr = minfer::type_traits(t);
  if (t == GgmlType::F32) {
    for (size_t i = 0; i < w.size(); i += 4) {
      const float f = (float)(w[i] - 128) * 1e-3f;
      std::memcpy(&w[i], &f, 4);
    }
  } else if (tr.quantized) {
    const uint16_t d = minfer::f32_to_fp16(0.01f);
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t b = 0; b < n_in / tr.block_size; ++b) {
        uint8_t* blk = w.data() + r * rs + b * tr.type_size;
        std::memcpy(t == GgmlType::Q6_K ? blk + 208 : blk, &d, 2);
        if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) std::memcpy(blk + 2, &d, 2);
      }
  }
  return w;
}

struct Shared {
  explicit Shared(int n) : pool(n) {}
  ThreadPool pool;
  Arena arena;
};

void BM_matmul(benchmark::State& st, GgmlType t, int64_t n_in, int64_t n_out, int64_t m,
               bool packed = false) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::vector<uint8_t>> cache;
  auto& w = cache[{(int)t, n_in, n_out}];
  if (w.empty()) w = make_weights(t, n_in, n_out);
  static Shared sh(bench_threads());
  static PackedWeights pw(SimdLevel::kBest);
  std::vector<float> x(n_in * m), y(n_out * m);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  const Exec ex{&sh.pool, &sh.arena, SimdLevel::kBest};
  MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, m, y.data(), n_out};
  if (packed) {
    pw.add(t, w.data(), n_in, n_out);
    a.packed = pw.find(w.data());
    if (!a.packed) {
      st.SkipWithError("no load-time layout for this type at this SIMD level");
      return;
    }
  }
  for (auto _ : st) {
    matmul(ex, a);
    benchmark::DoNotOptimize(y.data());
  }
  const double flop = 2.0 * n_in * n_out * m;
  st.counters["GFLOP/s"] =
      benchmark::Counter(flop * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GB/s"] =
      benchmark::Counter((double)w.size() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["threads"] = sh.pool.size();
}

// Decode streaming from memory: one m = 1 matmul over the load-time panels of a ~192 MiB
// matrix (6 x the 32 MiB L3 of a core's CCD), as a decode step streams its weights; GB/s of
// panel bytes, against a read-bandwidth probe of the same threads (membw.h, `minfer bench`).
// Allocated per benchmark and freed after it (unlike BM_matmul's cache).
void BM_stream(benchmark::State& st, GgmlType t, int64_t n_in) {
  const int64_t n_out = (int64_t)((size_t{192} << 20) / minfer::row_size(t, n_in)) / 16 * 16;
  const auto w = make_weights(t, n_in, n_out);
  static Shared sh(bench_threads());
  PackedWeights pw(SimdLevel::kBest);
  const size_t bytes = PackedWeights::packed_bytes(SimdLevel::kBest, t, n_in, n_out);
  if (bytes == 0) {
    st.SkipWithError("no load-time layout for this type at this SIMD level");
    return;
  }
  pw.reserve(bytes);
  pw.add(t, w.data(), n_in, n_out);
  std::vector<float> x(n_in), y(n_out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  const Exec ex{&sh.pool, &sh.arena, SimdLevel::kBest};
  MatmulArgs a{t, w.data(), n_in, n_out, x.data(), n_in, 1, y.data(), n_out};
  a.packed = pw.find(w.data());
  for (auto _ : st) {
    matmul(ex, a);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GB/s"] =
      benchmark::Counter((double)bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["threads"] = sh.pool.size();
}

// Load-time repack (PackedWeights::add) of one matrix: the load-time cost per weight byte.
void BM_pack(benchmark::State& st, GgmlType t, int64_t n_in, int64_t n_out) {
  const auto w = make_weights(t, n_in, n_out);
  for (auto _ : st) {
    PackedWeights pw(SimdLevel::kBest);
    if (!pw.add(t, w.data(), n_in, n_out)) {
      st.SkipWithError("no load-time layout for this type at this SIMD level");
      return;
    }
    benchmark::DoNotOptimize(pw.bytes());
  }
  st.counters["GB/s"] =
      benchmark::Counter((double)w.size() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Causal prefill attention over n_tok tokens at positions 0..n_tok-1.
void BM_attention(benchmark::State& st, int64_t hd, int64_t nh, int64_t nkv, int64_t n_tok) {
  static Shared sh(bench_threads());
  const int64_t n_ctx = n_tok;
  std::vector<float> q(hd * nh * n_tok, 0.01f), k(hd * nkv * n_ctx, 0.02f), v(k.size(), 0.5f),
      out(q.size());
  std::vector<int32_t> pos(n_tok);
  for (int64_t t = 0; t < n_tok; ++t) pos[t] = (int32_t)t;
  AttentionArgs a{q.data(),     HeadLayout{hd, nh, n_tok, 0, 0},
                  k.data(),     v.data(),
                  hd * nkv,     n_ctx,
                  (int32_t)nkv, pos.data(),
                  0.125f,       out.data()};
  const Exec ex{&sh.pool, &sh.arena, SimdLevel::kBest};
  for (auto _ : st) {
    attention(ex, a);
    benchmark::DoNotOptimize(out.data());
  }
  // QK^T and PV over the causal triangle.
  const double flop = 4.0 * hd * nh * (double)n_tok * (n_tok + 1) / 2;
  st.counters["GFLOP/s"] =
      benchmark::Counter(flop * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  benchmark::RegisterBenchmark("attention/stories260K/hd8_h8_kv4/t512", BM_attention, 8, 8, 4, 512)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("attention/qwen0.5b/hd64_h14_kv2/t512", BM_attention, 64, 14, 2, 512)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  const std::pair<GgmlType, const char*> types[] = {
      {GgmlType::Q8_0, "q8_0"}, {GgmlType::Q4_0, "q4_0"}, {GgmlType::Q5_0, "q5_0"},
      {GgmlType::Q4_K, "q4_K"}, {GgmlType::Q5_K, "q5_K"}, {GgmlType::Q6_K, "q6_K"},
      {GgmlType::F32, "f32"}};
  // 4864x8192: an ffn_down-wide matrix larger than the LLC (decode streams it from DRAM).
  const int64_t shapes[][2] = {{896, 896}, {896, 4864}, {4864, 896}, {896, 151936}, {4864, 8192}};
  for (const auto& [t, tn] : types)
    for (const auto& sh : shapes)
      for (int64_t m : {1, 512}) {
        // K-quants need n_in % 256 == 0 (896 is not; llama.cpp falls back to other types there).
        if (sh[0] % minfer::type_traits(t).block_size != 0) continue;
        const std::string name = std::string("matmul/") + tn + "/" + std::to_string(sh[0]) + "x" +
                                 std::to_string(sh[1]) + "/m" + std::to_string(m);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, sh[0], sh[1], m, false);
        b->Unit(benchmark::kMillisecond)->UseRealTime();
        if ((sh[1] == 151936 || sh[1] == 8192) && m == 512) b->Iterations(1);
      }
  for (const auto& [t, tn] : types)
    if (t != GgmlType::F32)
      benchmark::RegisterBenchmark((std::string("pack/") + tn + "/4864x896").c_str(), BM_pack, t,
                                   4864, 896)
          ->Unit(benchmark::kMillisecond);
  // stream/TYPE/N_IN/m1/packed: decode over ~192 MiB of panels (BM_stream).
  for (const auto& [t, tn] : types) {
    if (t == GgmlType::F32) continue;
    const bool kq = minfer::type_traits(t).block_size == 256;
    for (int64_t n_in : kq ? std::vector<int64_t>{2048, 8192} : std::vector<int64_t>{896, 4864})
      benchmark::RegisterBenchmark(
          (std::string("stream/") + tn + "/" + std::to_string(n_in) + "/m1/packed").c_str(),
          BM_stream, t, n_in)
          ->Unit(benchmark::kMillisecond);
  }
  // 4864x8192 (past the LLC): decode streaming from DRAM, m <= 4 only.
  const int64_t bs_shapes[][2] = {{896, 4864}, {4864, 896}, {4864, 8192}};
  for (const auto& [t, tn] : types) {
    if (t == GgmlType::F32) continue;
    for (const auto& sh : bs_shapes)
      for (int64_t m : {1, 2, 4, 8, 16, 512})
        for (bool packed : {false, true}) {
          if (sh[0] % minfer::type_traits(t).block_size != 0) continue;
          if (sh[1] == 8192 && m > 4) continue;
          const std::string name = std::string("matmul_bs/") + tn + "/" + std::to_string(sh[0]) +
                                   "x" + std::to_string(sh[1]) + "/m" + std::to_string(m) +
                                   (packed ? "/packed" : "/gguf");
          benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, sh[0], sh[1], m, packed)
              ->Unit(benchmark::kMicrosecond);
        }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
