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
//
// With --gen N it instead draws N perfect packings (planner/perfect_packing.h: optimum known by
// construction, 200-2,000 buffers, three kinds of cuts) from seeds --gen-seed S, S+1, ...
// (default: a fresh S from the clock, printed, so any draw can be replayed) and reports the
// fast mode's distribution over the optimum (median, p95, worst; wall and CPU time) and, on the
// first --exact K of them (default 0), whether exact mode proves the optimum within
// --time-limit. -v prints every instance; --write-dir D writes each as D/<seed>.<optimum>.csv
// (a solution file: the construction's offsets). --dives N and --fast-cap S override the fast
// mode's dive count and wall-clock budget (default 10 s: under heavy load it can cut the largest
// instances short, so a load-independent distribution needs --fast-cap 1e9).
//
//   build-plan/bench/bench_planner --gen 200 [--gen-seed S] [--exact K] [-v] [--write-dir D]
//                                  [--dives N] [--fast-cap S] [--sweep-nodes N]
//                                  [--decompose-steps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "alloc/allocator.h"
#include "alloc/arena.h"
#include "alloc/liveness.h"
#include "model/model.h"
#include "planner/intervals.h"
#include "planner/offset_planner.h"
#include "planner/perfect_packing.h"

namespace {

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

struct GenOptions {
  int count = 0;
  uint64_t seed = 0;
  bool seed_given = false;
  int exact = 0;
  double limit = 10.0;
  bool verbose = false;
  std::string write_dir;
  int dives = -1;            // --dives: PlanParams::search_dives (default: the planner's)
  double fast_cap_s = 0;     // --fast-cap: PlanParams::fast_time_limit_s (default: the planner's)
  int64_t sweep_nodes = -1;  // --sweep-nodes: PlanParams::sweep_nodes (default: the planner's)
  int64_t decompose_steps = -1;  // --decompose-steps: PlanParams::decompose_steps
};

int bench_generated(const GenOptions& o) {
  const uint64_t seed0 =
      o.seed_given
          ? o.seed
          : uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007;
  std::printf("perfect packings: %d from seed %llu (replay: --gen %d --gen-seed %llu)\n", o.count,
              (unsigned long long)seed0, o.count, (unsigned long long)seed0);
  std::vector<double> pct, wall, cpu, ex_wall;
  int within = 0, under_1s = 0, invalid = 0, ex_proven = 0, ex_optimal = 0;
  for (int i = 0; i < o.count; ++i) {
    const minfer::PerfectPacking pk =
        minfer::make_perfect_packing(minfer::draw_packing_params(seed0 + uint64_t(i)));
    if (!o.write_dir.empty()) {
      minfer::write_solution_csv(o.write_dir + "/" + std::to_string(seed0 + uint64_t(i)) + "." +
                                     std::to_string(pk.optimum) + ".csv",
                                 pk.buffers, pk.offsets);
    }
    const double c0 = cpu_s();
    minfer::PlanParams fp;
    if (o.dives >= 0) fp.search_dives = o.dives;
    if (o.fast_cap_s > 0) fp.fast_time_limit_s = o.fast_cap_s;
    if (o.sweep_nodes >= 0) fp.sweep_nodes = uint64_t(o.sweep_nodes);
    if (o.decompose_steps >= 0) fp.decompose_steps = uint64_t(o.decompose_steps);
    const minfer::OffsetPlan p = minfer::plan_offsets(pk.buffers, fp);
    const double c1 = cpu_s();
    const double over = 100.0 * (double(p.height) - double(pk.optimum)) / double(pk.optimum);
    pct.push_back(over);
    wall.push_back(p.plan_us / 1e6);
    cpu.push_back(c1 - c0);
    within += over <= 10.0;
    under_1s += p.plan_us < 1e6;
    const bool ok = minfer::check_offsets(pk.buffers, p.offsets, p.height).empty() &&
                    p.lower_bound == pk.optimum;
    invalid += !ok;
    std::string ex;
    if (i < o.exact) {
      minfer::PlanParams ep;
      ep.mode = minfer::PlanMode::Exact;
      ep.time_limit_s = o.limit;
      const minfer::OffsetPlan e = minfer::plan_offsets(pk.buffers, ep);
      ex_proven += e.proven_optimal;
      ex_optimal += e.height == pk.optimum;
      ex_wall.push_back(e.best_found_us / 1e6);
      invalid += !minfer::check_offsets(pk.buffers, e.offsets, e.height).empty();
      ex = fmt::format(" | exact {:+.2f}% {} at {:.2f} s, {} nodes",
                       100.0 * (double(e.height) - double(pk.optimum)) / double(pk.optimum),
                       e.proven_optimal ? "proven" : "unproven", e.best_found_us / 1e6,
                       e.search_nodes);
    }
    if (o.verbose) {
      std::printf("%s | fast %+.2f%% %.3f s (cpu %.3f) %s%s%s\n", pk.describe().c_str(), over,
                  p.plan_us / 1e6, c1 - c0, p.method.c_str(), ex.c_str(), ok ? "" : " INVALID");
      std::fflush(stdout);
    }
  }
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 0) load[0] = -1;
  std::printf(
      "fast: within 10%%: %d/%d; under 1 s wall: %d/%d; over optimum median %+.2f%% p95 %+.2f%% "
      "worst %+.2f%%; wall s median %.3f p95 %.3f worst %.3f; cpu s median %.3f p95 %.3f worst "
      "%.3f; invalid %d; load %.2f\n",
      within, o.count, under_1s, o.count, percentile(pct, 0.5), percentile(pct, 0.95),
      percentile(pct, 1.0), percentile(wall, 0.5), percentile(wall, 0.95), percentile(wall, 1.0),
      percentile(cpu, 0.5), percentile(cpu, 0.95), percentile(cpu, 1.0), invalid, load[0]);
  if (o.exact > 0) {
    const int k = std::min(o.exact, o.count);
    std::printf(
        "exact (%.0f s): proven optimal %d/%d, at the optimum %d/%d; found at s median %.2f p95 "
        "%.2f worst %.2f\n",
        o.limit, ex_proven, k, ex_optimal, k, percentile(ex_wall, 0.5), percentile(ex_wall, 0.95),
        percentile(ex_wall, 1.0));
  }
  return invalid == 0 ? 0 : 1;
}

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
  GenOptions gen;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--gen") && i + 1 < argc) {
      gen.count = std::atoi(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--gen-seed") && i + 1 < argc) {
      gen.seed = std::strtoull(argv[++i], nullptr, 10);
      gen.seed_given = true;
      continue;
    }
    if (!std::strcmp(argv[i], "--exact") && i + 1 < argc) {
      gen.exact = std::atoi(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--write-dir") && i + 1 < argc) {
      gen.write_dir = argv[++i];
      continue;
    }
    if (!std::strcmp(argv[i], "--dives") && i + 1 < argc) {
      gen.dives = std::atoi(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--decompose-steps") && i + 1 < argc) {
      gen.decompose_steps = std::atoll(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--sweep-nodes") && i + 1 < argc) {
      gen.sweep_nodes = std::atoll(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--fast-cap") && i + 1 < argc) {
      gen.fast_cap_s = std::atof(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "-v")) {
      gen.verbose = true;
      continue;
    }
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
      std::fprintf(
          stderr,
          "usage: %s [--dir DIR] [--time-limit S] [--fast-only] [--only A] | --model F "
          "[-c N] [--n-tokens N] [--reps R] | --gen N [--gen-seed S] [--exact K] [-v] "
          "[--write-dir D] [--dives N] [--fast-cap S] [--sweep-nodes N] [--decompose-steps N]\n",
          argv[0]);
      return 2;
    }
  }
  if (!model.empty()) return bench_model(model, n_ctx, n_tokens, reps);
  if (gen.count > 0) {
    gen.limit = limit;
    return bench_generated(gen);
  }
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
