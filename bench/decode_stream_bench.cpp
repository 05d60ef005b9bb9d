// minfer-bench-libs: minfer_backend_cpu minfer_common
// Decode streaming against the read probe on a shared machine (issue #16): the real matmul()
// at m = 1 over a load-time packed weight (PackedWeights::reserve, huge pages, as a Model has
// it) alternated with a pass of the probe's read-only sum, every sample paired; prints the
// matmul's GB/s, the probe's, and the median / quartiles of their per-sample ratio.
//
// Why CPU time by default: on the 2-core dev VM, other sessions' jobs (even at nice 19: the
// kernel's autogroups make nice relative within a session only) preempt the measured threads,
// and wall-clock figures swing 3-5x. The process CPU time divided by the threads counts only the
// time this process ran (memory stalls included; spin waits of the pool included), and pairing
// each matmul sample with a probe sample taken right after cancels the slower swings of the
// machine's memory bandwidth. --wall: wall-clock instead (quiet machines).
//
//   build/bench/bench_decode_stream [-t 2] [--type q8_0|q4_0|q5_0|q4_K|q5_K|q6_K] [--n-in 4864]
//                                   [--n-out 32768] [-s 10] [--wall] [--step LAYERS] [--copies K]
//                                   [--gap-us G]
// MINFER_SIMD=avx2 measures the AVX2 kernels. Use a weight past the LLC's share of this VM (32
// MiB): the defaults are a 170 MB Q8_0 matrix of ffn_down's width.
//
// --copies K: K separate weights of --n-in x --n-out, one "call" = all K in turn. Many small
// matmuls against one large one of the same bytes (e.g. --n-out 896 --copies 170 against
// --n-out 151936) separates what each matmul's start and end cost (the job's fork / join, the
// first lines of each thread's share, the last claims) from the streaming itself; compare at
// -t 1 and -t 2 (docs/BENCHMARKS.md "Where the decode step loses against the probe").
//
// --gap-us G: after each matmul the calling thread spins G microseconds alone (the workers idle),
// as the decode step's small ops (norms, RoPE, residual adds, attention) sit between its
// matmuls; the GB/s then count the gaps' time too, so compare against G x the matmuls per call.
//
// --step LAYERS: instead of one matrix, a decode step's matmuls in graph order: LAYERS layers
// of Qwen2.5-0.5B's shapes (qkv 896x1152, o 896x896, gate and up 896x4864, down 4864x896)
// and the logits matrix (896x151936), each a separate packed weight (24 layers: ~500 MB in
// Q8_0, as the model file); one "call" is the whole step. Also prints the calling thread's
// waits for the workers per step (ThreadPool::set_wait_clock, wall clock: what `minfer bench
// --profile` shows as barriers / sync wait), the cost the driver's work split is about, and the
// share of the jobs the workers took part in (ThreadPool::run_elastic: a late worker is
// skipped). CPU time per thread assumes every thread busy: below 100% of jobs joined (a loaded
// machine, workers descheduled), the caller did more than its share and the CPU-time GB/s
// overstates what the threads together would do; compare such runs by wall clock.
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/membw.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/thread_pool.h"
#include "common/fp16.h"

namespace {

using namespace minfer;
using namespace minfer::cpu;

struct Options {
  int threads = 2;
  GgmlType type = GgmlType::Q8_0;
  int64_t n_in = 4864, n_out = 32768;
  int samples = 10;
  bool wall = false;
  int step_layers = 0;  // --step
  int copies = 1;       // --copies
  double gap_us = 0;    // --gap-us
};

struct Shape {
  int64_t n_in, n_out;
};

// One decode step's matmul shapes (Qwen2.5-0.5B), or the single --n-in x --n-out matrix.
std::vector<Shape> shapes_of(const Options& o) {
  if (o.step_layers == 0) return std::vector<Shape>(size_t(o.copies), Shape{o.n_in, o.n_out});
  std::vector<Shape> v;
  for (int l = 0; l < o.step_layers; ++l)
    for (Shape s :
         {Shape{896, 1152}, Shape{896, 896}, Shape{896, 4864}, Shape{896, 4864}, Shape{4864, 896}})
      v.push_back(s);
  v.push_back({896, 151936});
  return v;
}

double seconds(bool wall) {
  if (wall)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Random codes, every block scale 0.01 (speed does not depend on the values).
std::vector<uint8_t> make_weight(GgmlType t, int64_t n_in, int64_t n_out) {
  std::vector<uint8_t> w(row_size(t, n_in) * n_out);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= w.size(); i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    std::memcpy(&w[i], &s, 8);
  }
  const uint16_t d = f32_to_fp16(0.01f);
  const size_t bs = type_traits(t).type_size;
  const size_t d_at = t == GgmlType::Q6_K ? bs - 2 : 0;
  for (size_t o = 0; o < w.size(); o += bs) {
    std::memcpy(&w[o + d_at], &d, 2);
    if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) std::memcpy(&w[o + 2], &d, 2);
  }
  return w;
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--wall") {
      o->wall = true;
    } else if (a == "-t" && has) {
      o->threads = std::atoi(argv[++i]);
    } else if (a == "--step" && has) {
      o->step_layers = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--gap-us" && has) {
      o->gap_us = std::max(0.0, std::atof(argv[++i]));
    } else if (a == "--copies" && has) {
      o->copies = std::max(1, std::atoi(argv[++i]));
    } else if (a == "-s" && has) {
      o->samples = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--n-in" && has) {
      o->n_in = std::atol(argv[++i]);
    } else if (a == "--n-out" && has) {
      o->n_out = std::atol(argv[++i]);
    } else if (a == "--type" && has) {
      const std::string t = argv[++i];
      const std::pair<const char*, GgmlType> names[] = {
          {"q8_0", GgmlType::Q8_0}, {"q4_0", GgmlType::Q4_0}, {"q5_0", GgmlType::Q5_0},
          {"q4_K", GgmlType::Q4_K}, {"q5_K", GgmlType::Q5_K}, {"q6_K", GgmlType::Q6_K}};
      const auto* it = std::find_if(std::begin(names), std::end(names),
                                    [&](const auto& nt) { return t == nt.first; });
      if (it == std::end(names)) {
        std::fprintf(stderr, "bench_decode_stream: --type q8_0|q4_0|q5_0|q4_K|q5_K|q6_K\n");
        return false;
      }
      o->type = it->second;
    } else {
      std::fprintf(stderr, "bench_decode_stream: unknown or incomplete option %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  const GgmlType t = o.type;
  const std::vector<Shape> shapes = shapes_of(o);
  size_t reserve = 0;
  for (const Shape& sh : shapes)
    reserve += PackedWeights::packed_bytes(SimdLevel::kBest, t, sh.n_in, sh.n_out);
  PackedWeights pw(SimdLevel::kBest);
  pw.reserve(reserve);
  std::vector<const PackedWeight*> pks;
  std::vector<std::vector<uint8_t>> originals;  // alive until all are added: find() keys on them
  size_t step_bytes = 0;
  for (const Shape& sh : shapes) {
    originals.push_back(make_weight(t, sh.n_in, sh.n_out));
    if (!pw.add(t, originals.back().data(), sh.n_in, sh.n_out)) {
      std::fprintf(stderr, "bench_decode_stream: no load-time layout for this type here\n");
      return 1;
    }
    pks.push_back(pw.find(originals.back().data()));
    step_bytes += pks.back()->bytes;
  }
  std::vector<std::vector<uint8_t>>().swap(originals);  // a Model releases the originals too
  ThreadPool pool(o.threads);
  Arena arena;
  const Exec ex{&pool, &arena, SimdLevel::kBest};
  int64_t max_in = 0, max_out = 0;
  for (const Shape& sh : shapes) {
    max_in = std::max(max_in, sh.n_in);
    max_out = std::max(max_out, sh.n_out);
  }
  std::vector<float> x(max_in), y(max_out);
  for (int64_t i = 0; i < max_in; ++i) x[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
  std::vector<MatmulArgs> calls_of_step;
  for (size_t i = 0; i < shapes.size(); ++i) {
    MatmulArgs a{t, nullptr,  shapes[i].n_in, shapes[i].n_out, x.data(), shapes[i].n_in,
                 1, y.data(), shapes[i].n_out};
    a.packed = pks[i];  // the packed copy is all that is read
    calls_of_step.push_back(a);
  }
  auto gap = [&] {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::nanoseconds(static_cast<int64_t>(o.gap_us * 1e3));
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  auto run_step = [&] {
    for (const MatmulArgs& a : calls_of_step) {
      matmul(ex, a);
      if (o.gap_us > 0) gap();
    }
  };

  // The probe's buffer, first-touched by the thread that reads each slice (as membw.cpp).
  const size_t probe_bytes = size_t{256} << 20;
  void* mem =
      mmap(nullptr, probe_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  madvise(mem, probe_bytes, MADV_HUGEPAGE);
  auto* words = static_cast<uint64_t*>(mem);
  const int64_t n_lines = int64_t(probe_bytes / 64);
  std::vector<uint64_t> sink(size_t(o.threads) * 8);
  pool.run([&](int i, int n) {
    int64_t b, e;
    split_range(n_lines, i, n, &b, &e);
    std::memset(words + b * 8, i + 1, size_t(e - b) * 64);
  });
  auto probe = [&](int i, int n) {
    int64_t b, e;
    split_range(n_lines, i, n, &b, &e);
    sink[size_t(i) * 8] += probe_sum_words(words + b * 8, size_t(e - b) * 8);
  };

  // Enough calls per sample for getrusage's resolution; about as many probe bytes as matmul's.
  const int calls = int(std::max<size_t>(4, (size_t{512} << 20) / step_bytes));
  const int passes = int(std::max<size_t>(1, calls * step_bytes / probe_bytes));
  std::vector<double> mm_gbs, probe_gbs, ratio, wait_ms, n_waits, joined;
  const double div = o.wall ? 1.0 : double(o.threads);
  run_step();  // warm-up: arena, first touch of y
  for (int s = 0; s < o.samples; ++s) {
    ThreadPool::Waits waits;
    pool.set_wait_clock(&waits);
    const double t0 = seconds(o.wall);
    for (int c = 0; c < calls; ++c) run_step();
    const double t1 = seconds(o.wall);
    pool.set_wait_clock(nullptr);
    for (int c = 0; c < passes; ++c) pool.run(probe);
    const double t2 = seconds(o.wall);
    mm_gbs.push_back(double(calls) * double(step_bytes) / ((t1 - t0) / div) * 1e-9);
    probe_gbs.push_back(double(passes) * double(probe_bytes) / ((t2 - t1) / div) * 1e-9);
    ratio.push_back(mm_gbs.back() / probe_gbs.back());
    wait_ms.push_back(double(waits.total_ns()) * 1e-6 / calls);
    n_waits.push_back(double(waits.sync_waits + waits.tail_waits) / calls);
    joined.push_back(waits.slots ? 100.0 * double(waits.joins) / double(waits.slots) : 100.0);
  }
  const std::string what = o.step_layers
                               ? "decode step of " + std::to_string(shapes.size()) + " matmuls"
                               : (o.copies > 1 ? std::to_string(o.copies) + " x " : std::string()) +
                                     std::to_string(o.n_in) + "x" + std::to_string(o.n_out);
  char gaps[64] = "";
  if (o.gap_us > 0) std::snprintf(gaps, sizeof gaps, ", %.1f us gaps", o.gap_us);
  std::printf(
      "%s %s (%.1f MB packed), %d threads, %s%s: matmul %.2f GB/s, probe %.2f GB/s "
      "(medians); matmul / probe per sample: median %.1f%%, quartiles %.1f%% - %.1f%%; "
      "caller's sync wait per call: median %.3f ms in %.1f waits; workers took part in %.1f%% "
      "of the jobs\n",
      std::string(type_name(t)).c_str(), what.c_str(), double(step_bytes) * 1e-6, o.threads,
      o.wall ? "wall clock" : "CPU time", gaps, quantile(mm_gbs, 0.5), quantile(probe_gbs, 0.5),
      100 * quantile(ratio, 0.5), 100 * quantile(ratio, 0.25), 100 * quantile(ratio, 0.75),
      quantile(wait_ms, 0.5), quantile(n_waits, 0.5), quantile(joined, 0.5));
  uint64_t all = 0;
  for (uint64_t v : sink) all += v;
  float ys = 0;
  for (float f : y) ys += f;
  asm volatile("" : : "r"(all), "x"(ys) : "memory");
  munmap(mem, probe_bytes);
  return 0;
}
