// minfer-bench-libs: minfer_model
// A/B of a fusion toggle on a shared machine: two Models of one file, one engine each (A with
// the toggle on, B off), decode steps (and prefills) alternated A, B, B, A, ... in one process,
// every sample timed in process CPU time (getrusage: only the time this process ran, as
// bench_decode_stream; wall clock swings 3-5x when other sessions share the cores) and wall
// time. Prints the median per step of each and the median of the paired B/A ratios.
//
//   build/bench/bench_fusion_ab -m FILE [-t 2] [-n 64] [-p 512] [-r 3] [--toggle gate_up|qkv|ffn]
//
// Memory: two Models, so twice the file's packed weights. The default toggle is the fused FFN
// gate/up matmul (branch fuse, issue #16).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/session.h"

namespace {

using namespace minfer;

double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Side {
  std::unique_ptr<Model> model;
  std::unique_ptr<Session> sess;
  std::vector<double> cpu, wall;
};

}  // namespace

int main(int argc, char** argv) {
  std::string path, toggle = "gate_up";
  int threads = 2, n_gen = 64, n_prompt = 512, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-m")
      path = argv[i + 1];
    else if (a == "-t")
      threads = std::atoi(argv[i + 1]);
    else if (a == "-n")
      n_gen = std::atoi(argv[i + 1]);
    else if (a == "-p")
      n_prompt = std::atoi(argv[i + 1]);
    else if (a == "-r")
      reps = std::atoi(argv[i + 1]);
    else if (a == "--toggle")
      toggle = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s -m FILE [-t 2] [-n 64] [-p 512] [-r 3] [--toggle T]\n",
                 argv[0]);
    return 2;
  }
  Side side[2];
  for (int s = 0; s < 2; ++s) {
    SessionParams sp;
    sp.n_ctx = n_prompt + n_gen + 16;
    sp.n_threads = threads;
    const bool on = s == 0;
    if (toggle == "gate_up")
      sp.fusion.gate_up = on;
    else if (toggle == "qkv")
      sp.fusion.qkv = on;
    else
      sp.fusion.ffn = on;
    side[s].model = Model::load(path);
    side[s].sess = std::make_unique<Session>(*side[s].model, sp);
  }
  const int64_t V = side[0].model->hparams().n_vocab;
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int i = 0; i < n_prompt; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 13) % V);
  // Prefill: reps alternated pairs, each a fresh prompt at position 0 (the cache is rewritten).
  std::vector<double> pp_cpu[2], pp_wall[2];
  for (int r = 0; r < reps + 1; ++r) {
    for (int k = 0; k < 2; ++k) {
      const int s = (r % 2 == 0) ? k : 1 - k;
      const double c0 = cpu_s(), w0 = wall_s();
      (void)side[s].sess->eval_last(prompt, 0);
      if (r == 0) continue;  // warm-up
      pp_cpu[s].push_back(cpu_s() - c0);
      pp_wall[s].push_back(wall_s() - w0);
    }
  }
  // Decode after the prompt, greedy-free: a fixed token stream, A and B alternated per step.
  int32_t tok = 1;
  for (int i = 0; i < n_gen; ++i) {
    for (int k = 0; k < 2; ++k) {
      const int s = (i % 2 == 0) ? k : 1 - k;
      const double c0 = cpu_s(), w0 = wall_s();
      (void)side[s].sess->eval_last(std::span<const int32_t>(&tok, 1), n_prompt + i);
      if (i == 0) continue;
      side[s].cpu.push_back(cpu_s() - c0);
      side[s].wall.push_back(wall_s() - w0);
    }
    tok = static_cast<int32_t>((tok * 31 + 7) % V);
  }
  std::vector<double> ratio;
  for (size_t i = 0; i < side[0].cpu.size(); ++i)
    if (side[0].cpu[i] > 0) ratio.push_back(side[1].cpu[i] / side[0].cpu[i]);
  std::vector<double> pp_ratio;
  for (size_t i = 0; i < pp_cpu[0].size(); ++i) pp_ratio.push_back(pp_cpu[1][i] / pp_cpu[0][i]);
  double load[3] = {};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    std::fclose(f);
  }
  std::printf("%s, %d threads, toggle %s: A = on, B = off; load %.2f %.2f %.2f at end\n",
              path.c_str(), threads, toggle.c_str(), load[0], load[1], load[2]);
  std::printf(
      "decode: CPU ms/token (per thread) A %.2f  B %.2f  | wall ms A %.2f  B %.2f  | "
      "median B/A CPU %.3f (%zu pairs)\n",
      1e3 * median(side[0].cpu) / threads, 1e3 * median(side[1].cpu) / threads,
      1e3 * median(side[0].wall), 1e3 * median(side[1].wall), median(ratio), ratio.size());
  std::printf(
      "pp%d:  CPU s (per thread) A %.3f  B %.3f  | wall s A %.3f  B %.3f  | t/s by CPU "
      "A %.1f  B %.1f | median B/A CPU %.3f (%zu pairs)\n",
      n_prompt, median(pp_cpu[0]) / threads, median(pp_cpu[1]) / threads, median(pp_wall[0]),
      median(pp_wall[1]), n_prompt * threads / median(pp_cpu[0]),
      n_prompt * threads / median(pp_cpu[1]), median(pp_ratio), pp_ratio.size());
  return 0;
}
