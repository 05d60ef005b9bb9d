// minfer-bench-libs: minfer_model
// Offset planner benchmark (a plain program, not Google Benchmark: the figures are heights, not
// only times). For every instance of ../shared/planner-bench: the lower bound, the best known
// height (from the README table), the fast mode's height and time, the exact mode's height
// and time under a time limit (default 10 s; `--time-limit S`, `--fast-only`), and the time
// the exact mode needs with PlanParams::capacity = the best known height (MiniMalloc's "does it
// fit?" question, the one its published times answer).
//
// With --model FILE it instead times the fast mode on that model's decoder graphs (prefill of
// --n-tokens, default 512, and decode of 1 token; -c context, default 4096): the best and the
// median of --reps runs of plan_arena, per 1000 graph nodes, and the arena against the bound.
//
//   build-plan/bench/bench_planner [--dir DIR] [--time-limit S] [--fast-only] [--only A]
//   build-plan/bench/bench_planner --model FILE [-c CTX] [--n-tokens N] [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "alloc/arena.h"
#include "alloc/liveness.h"
#include "model/model.h"
#include "planner/intervals.h"
#include "planner/offset_planner.h"

namespace {

// Best known heights from ../shared/planner-bench/README.md (MiniMalloc's exact search): C's
// is its lower bound 1039360; every other instance's is 1048576, its capacity (D and J have
// lower bounds below it).
uint64_t best_known(const std::string& name) {
  return name == "C" ? 1039360 : 1048576;
}

int bench_model(const std::string& path, int64_t n_ctx, int64_t n_tokens, int reps) {
  auto model = minfer::Model::load(path);
  model->prepare_fused_qkv();
  std::printf(
      "| graph | nodes | intervals | arena B | lower bound B | over | method | best us |"
      " median us | us per 1000 nodes (best) |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t nt : {n_tokens, int64_t{1}}) {
    minfer::GraphParams gp;
    gp.n_tokens = nt;
    gp.n_outputs = 1;
    gp.cparams.n_ctx =
        std::min(n_ctx, model->hparams().n_ctx_train > 0 ? model->hparams().n_ctx_train : n_ctx);
    const minfer::Graph g = model->build_graph(gp);
    const minfer::Liveness lv = minfer::compute_liveness(g);
    std::vector<double> us;
    minfer::ArenaPlan ap;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      ap = minfer::plan_arena(lv);
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    const uint64_t a = ap.total_arena_bytes(), lb = ap.total_lower_bound();
    std::printf("| %s %lld | %zu | %zu | %llu | %llu | %+.3f%% | %s | %.1f | %.1f | %.1f |\n",
                nt == 1 ? "decode" : "prefill", (long long)nt, g.size(), lv.intervals.size(),
                (unsigned long long)a, (unsigned long long)lb,
                lb ? 100.0 * (double(a) - double(lb)) / double(lb) : 0.0, ap.method[0].c_str(),
                us.front(), us[us.size() / 2], us.front() * 1000.0 / double(g.size()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::string(MINFER_SHARED_DIR) + "/planner-bench";
  double limit = 10.0;
  bool fast_only = false;
  std::string only, model;
  int64_t n_ctx = 4096, n_tokens = 512;
  int reps = 200;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--model") && i + 1 < argc) {
      model = argv[++i];
      continue;
    }
    if (!std::strcmp(argv[i], "-c") && i + 1 < argc) {
      n_ctx = std::atoll(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--n-tokens") && i + 1 < argc) {
      n_tokens = std::atoll(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--dir") && i + 1 < argc)
      dir = argv[++i];
    else if (!std::strcmp(argv[i], "--time-limit") && i + 1 < argc)
      limit = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--fast-only"))
      fast_only = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--dir DIR] [--time-limit S] [--fast-only] [--only A]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!model.empty()) return bench_model(model, n_ctx, n_tokens, reps);
  if (!std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "no planner-bench folder at %s\n", dir.c_str());
    return 1;
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".csv") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::printf(
      "| file | buffers | lower bound | best known | fast height | fast vs best | fast ms |"
      " fast method | exact height | exact vs best | exact s | found at s | nodes |"
      " capacity = best known: s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  int fast_ok = 0, exact_ok = 0, fit_ok = 0, n = 0;
  for (const auto& f : files) {
    std::string name = f.stem().stem().string();
    if (!only.empty() && name != only) continue;
    std::vector<minfer::PlanBuffer> bufs = minfer::read_intervals_csv(f.string());
    uint64_t best = best_known(name);
    minfer::PlanParams fp;
    minfer::OffsetPlan fast = minfer::plan_offsets(bufs, fp);
    double fast_pct = 100.0 * (double(fast.height) - double(best)) / double(best);
    ++n;
    fast_ok += fast_pct <= 10.0;
    std::printf("| %s | %zu | %llu | %llu | %llu | %+.2f%% | %.2f | %s |", name.c_str(),
                bufs.size(), (unsigned long long)fast.lower_bound, (unsigned long long)best,
                (unsigned long long)fast.height, fast_pct, fast.plan_us / 1000.0,
                fast.method.c_str());
    if (!fast_only) {
      minfer::PlanParams ep;
      ep.mode = minfer::PlanMode::Exact;
      ep.time_limit_s = limit;
      minfer::OffsetPlan exact = minfer::plan_offsets(bufs, ep);
      double pct = 100.0 * (double(exact.height) - double(best)) / double(best);
      exact_ok += exact.height <= best;
      std::printf(" %llu | %+.2f%% | %.2f | %.2f | %llu |", (unsigned long long)exact.height, pct,
                  exact.plan_us / 1e6, exact.best_found_us / 1e6,
                  (unsigned long long)exact.search_nodes);
      std::string err = minfer::check_offsets(bufs, exact.offsets, exact.height);
      if (!err.empty()) std::printf(" INVALID: %s", err.c_str());
      // MiniMalloc's own question: does it fit in the best known height? (Its 0.8-7.6 s
      // figures are for this.) The search then targets that height and stops when it fits.
      ep.capacity = best;
      minfer::OffsetPlan fit = minfer::plan_offsets(bufs, ep);
      fit_ok += fit.height <= best;
      std::printf(" %s %.2f |", fit.height <= best ? "fits" : "no", fit.plan_us / 1e6);
      err = minfer::check_offsets(bufs, fit.offsets, fit.height);
      if (!err.empty()) std::printf(" INVALID: %s", err.c_str());
    } else {
      std::printf(" - | - | - | - | - | - |");
    }
    std::string err = minfer::check_offsets(bufs, fast.offsets, fast.height);
    if (!err.empty()) std::printf(" INVALID fast: %s", err.c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("\nfast within 10%% of best known: %d/%d", fast_ok, n);
  if (!fast_only) {
    std::printf("; exact at best known within %.1f s: %d/%d; fits the best known height: %d/%d",
                limit, exact_ok, n, fit_ok, n);
  }
  std::printf("\n");
  return 0;
}
