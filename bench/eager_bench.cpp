// minfer-bench-libs: minfer_eager minfer_model minfer_gguf minfer_common CLI11::CLI11
//
// Eager (op by op over the buffer pool) against graph mode (planned memory) on one model, same
// kernels and threads: prefill and decode tokens/s, alternating engines each repetition, plus
// each engine's memory report (eager: peak transient pool bytes, cached bytes, heap allocations
// after warm-up; graph: compute pool bytes).
//
//   bench_eager -m ../shared/models/stories260K.gguf -p 128 -n 128 -t 1 -r 3
//
// Token ids are deterministic pseudo-random ids in [0, n_vocab) (no tokenizer needed), so any
// GGUF the engines load works, including random-weight files from `minfer gen`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "eager/forward.h"
#include "model/model.h"
#include "model/session.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  std::vector<double> pp_ts, tg_ts;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// One repetition: prefill n_prompt tokens, then n_gen greedy decode steps. Appends tokens/s.
void run_once(minfer::Engine& e, const std::vector<int32_t>& prompt, int n_gen, Timing& t) {
  if (!prompt.empty()) {
    const auto t0 = Clock::now();
    e.eval_last(prompt, 0);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    t.pp_ts.push_back(static_cast<double>(prompt.size()) / s);
  }
  if (n_gen > 0) {
    // Decode starts after a 1-token context so it measures decode even with -p 0.
    int32_t tok = prompt.empty() ? 1 : prompt.back();
    int64_t pos = prompt.empty() ? 0 : static_cast<int64_t>(prompt.size());
    const auto t0 = Clock::now();
    for (int i = 0; i < n_gen; ++i) {
      const int32_t one[1] = {tok};
      tok = argmax(e.eval_last(one, pos++));
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    t.tg_ts.push_back(n_gen / s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"eager vs graph: tokens/s and memory on one model"};
  std::string path;
  int n_prompt = 128, n_gen = 128, threads = 1, reps = 3;
  int64_t n_ctx = 0;
  app.add_option("-m,--model", path, "GGUF file")->required();
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens (0 skips prefill)");
  app.add_option("-n,--n-gen", n_gen, "decode steps (0 skips decode)");
  app.add_option("-t,--threads", threads, "kernel threads");
  app.add_option("-r,--reps", reps, "repetitions (after one warm-up run each)");
  app.add_option("-c,--ctx", n_ctx, "context (default: prompt + gen + 1)");
  CLI11_PARSE(app, argc, argv);

  try {
    auto model = minfer::Model::load(path);
    model->prepare_fused_qkv();
    const minfer::HParams& hp = model->hparams();
    if (n_ctx <= 0) n_ctx = n_prompt + n_gen + 1;
    std::mt19937 rng(42);
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (auto& id : prompt) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(hp.n_vocab));

    minfer::SessionParams gp;
    gp.n_ctx = n_ctx;
    gp.n_threads = threads;
    gp.n_batch = std::max(2048, n_prompt);
    minfer::eager::EagerParams ep;
    ep.n_ctx = n_ctx;
    ep.n_threads = threads;
    minfer::Session graph(*model, gp);
    minfer::eager::EagerSession eager(*model, ep);

    Timing tg_graph, tg_eager, warm;
    run_once(graph, prompt, n_gen, warm);  // warm-up: builds graphs, grows pools and scratch
    run_once(eager, prompt, n_gen, warm);
    for (int r = 0; r < reps; ++r) {  // alternate so background load hits both alike
      run_once(graph, prompt, n_gen, tg_graph);
      run_once(eager, prompt, n_gen, tg_eager);
    }

    std::printf("model %s (%s), threads %d, ctx %lld, reps %d\n", path.c_str(),
                model->type_description().c_str(), threads, static_cast<long long>(n_ctx), reps);
    std::printf(
        "| engine | pp%d t/s | tg%d t/s | transient bytes | cached bytes | heap allocs after "
        "warm-up |\n",
        n_prompt, n_gen);
    std::printf("|---|---|---|---|---|---|\n");
    const minfer::MemReport mg = graph.mem_report();
    const minfer::MemReport me = eager.mem_report();
    std::printf("| graph | %.1f ± %.1f | %.1f ± %.1f | %llu (compute pool) | - | %lld |\n",
                mean(tg_graph.pp_ts), stddev(tg_graph.pp_ts), mean(tg_graph.tg_ts),
                stddev(tg_graph.tg_ts), static_cast<unsigned long long>(mg.compute_bytes),
                static_cast<long long>(mg.heap_allocs_after_warmup));
    std::printf("| eager | %.1f ± %.1f | %.1f ± %.1f | %llu (peak) | %llu | %lld |\n",
                mean(tg_eager.pp_ts), stddev(tg_eager.pp_ts), mean(tg_eager.tg_ts),
                stddev(tg_eager.tg_ts), static_cast<unsigned long long>(me.compute_bytes),
                static_cast<unsigned long long>(me.cached_bytes),
                static_cast<long long>(me.heap_allocs_after_warmup));
    std::printf("graph: %s\neager: %s\nKV bytes: graph %llu, eager %llu\n", mg.detail.c_str(),
                me.detail.c_str(), static_cast<unsigned long long>(mg.kv_bytes),
                static_cast<unsigned long long>(me.kv_bytes));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_eager: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
