// minfer bench: llama-bench's tests on minfer.
//   ppN: prompt processing of N random tokens from an empty context (logits of the last one),
//   tgN: generation of N tokens one by one from an empty context.
// With -d D (llama-bench's depth) both run after D random tokens were prefilled once (untimed),
// named "ppN @ dD" / "tgN @ dD": attention then reads D cached positions per token.
// Each test runs once as warm-up, then -r timed repetitions; t/s = tokens / seconds per rep,
// reported as mean ± sample standard deviation. `-p 0` / `-n 0` skips that test.
// Output: a markdown table like llama-bench's, or a JSON array with llama-bench's field names.
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"

namespace minfer::app {

namespace {

using Clock = std::chrono::steady_clock;

struct TestResult {
  std::string name;
  int64_t n_prompt = 0, n_gen = 0;
  std::vector<double> ns{};  // per repetition
  std::vector<double> ts{};  // tokens per second per repetition
  double avg(const std::vector<double>& v) const {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / double(v.size());
  }
  double stddev(const std::vector<double>& v) const {
    if (v.size() < 2) return 0;
    const double m = avg(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / double(v.size() - 1));
  }
};

// Random tokens, as llama-bench (the content does not change the work done).
std::vector<int32_t> random_tokens(int64_t n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// Prompt processing at positions start, start + 1, ... (start = the depth already cached).
double run_pp(Engine& e, const std::vector<int32_t>& toks, int32_t n_batch, int64_t start) {
  const auto t0 = Clock::now();
  const int64_t n = static_cast<int64_t>(toks.size());
  for (int64_t b = 0; b < n; b += n_batch) {
    const int64_t end = std::min<int64_t>(n, b + n_batch);
    std::span<const int32_t> chunk(toks.data() + b, static_cast<size_t>(end - b));
    // Position 0 again each repetition: the cache's later positions are simply overwritten,
    // which is what a fresh KV cache gives.
    if (end == n) {
      e.eval_last(chunk, start + b);
    } else {
      e.eval(chunk, start + b, {});
    }
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

double run_tg(Engine& e, int64_t n_gen, int64_t n_vocab, int64_t start) {
  const auto t0 = Clock::now();
  int32_t tok = static_cast<int32_t>(n_vocab / 2);
  for (int64_t i = 0; i < n_gen; ++i) {
    auto lg = e.eval_last(std::span<const int32_t>(&tok, 1), start + i);
    tok = static_cast<int32_t>((tok + 7 + static_cast<int32_t>(lg.size() > 0)) % n_vocab);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app("minfer bench: prompt processing (ppN) and generation (tgN) speed", "minfer bench");
  EngineOptions eo;
  add_engine_options(app, eo, /*with_ctx=*/false);
  int64_t n_prompt = 512, n_gen = 128, n_depth = 0;
  int reps = 3;
  std::string fmt_out = "md";
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens for ppN (0: skip; default 512)");
  app.add_option("-n,--n-gen", n_gen, "generated tokens for tgN (0: skip; default 128)");
  app.add_option("-d,--n-depth", n_depth,
                 "tokens already in the KV cache before each test (prefilled once, untimed; "
                 "default 0), as llama-bench -d");
  app.add_option("-r,--repetitions", reps, "timed repetitions per test (default 3)");
  app.add_option("-o,--output", fmt_out, "md or json")->check(CLI::IsMember({"md", "json"}));
  rewrite_llama_style_flags(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (n_prompt < 0 || n_gen < 0 || n_depth < 0)
    fail(ErrorKind::InvalidArgument, "-p / -n / -d must be >= 0");
  if (reps < 1) fail(ErrorKind::InvalidArgument, "-r {} must be >= 1", reps);

  // Context just large enough for the tests (llama-bench sizes it to n_prompt + n_gen).
  const int64_t need = n_depth + std::max(n_prompt, n_gen);
  eo.n_ctx = std::max<int64_t>(1, need);
  LoadedEngine le = load_engine(eo, false);
  Engine& eng = *le.engine;
  if (eng.n_ctx() < need)
    fail(ErrorKind::InvalidArgument, "the model's training context {} is smaller than the test",
         eng.n_ctx());
  const int threads = eo.n_threads > 0 ? eo.n_threads : default_threads();
  const int64_t n_vocab = eng.n_vocab();

  // Tests at a depth read the cached positions [0, n_depth) and overwrite only those after.
  if (n_depth > 0) run_pp(eng, random_tokens(n_depth, n_vocab, 7), eo.n_batch, 0);
  const std::string at = n_depth > 0 ? fmt::format(" @ d{}", n_depth) : "";

  std::vector<TestResult> results;
  if (n_prompt > 0) {
    TestResult r{.name = fmt::format("pp{}{}", n_prompt, at), .n_prompt = n_prompt};
    const auto toks = random_tokens(n_prompt, n_vocab, 42);
    run_pp(eng, toks, eo.n_batch, n_depth);  // warm-up
    for (int i = 0; i < reps; ++i) {
      const double ns = run_pp(eng, toks, eo.n_batch, n_depth);
      r.ns.push_back(ns);
      r.ts.push_back(1e9 * double(n_prompt) / ns);
    }
    results.push_back(std::move(r));
  }
  if (n_gen > 0) {
    TestResult r{.name = fmt::format("tg{}{}", n_gen, at), .n_gen = n_gen};
    run_tg(eng, n_gen, n_vocab, n_depth);  // warm-up
    for (int i = 0; i < reps; ++i) {
      const double ns = run_tg(eng, n_gen, n_vocab, n_depth);
      r.ns.push_back(ns);
      r.ts.push_back(1e9 * double(n_gen) / ns);
    }
    results.push_back(std::move(r));
  }

  const ModelWeights& w = le.model->weights();
  const std::string type = le.model->type_description();
  const KvTypes kv = kv_types(eo);
  const std::string type_k(type_name(kv.k)), type_v(type_name(kv.v));
  if (fmt_out == "json") {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : results) {
      arr.push_back({{"model_filename", eo.model},
                     {"model_type", type},
                     {"model_size", w.total_bytes()},
                     {"model_n_params", w.n_params()},
                     {"n_params", w.n_params()},
                     {"backends", "CPU"},
                     {"exec", eng.name()},
                     {"n_threads", threads},
                     {"threads", threads},
                     {"n_batch", eo.n_batch},
                     {"n_ubatch", eo.n_ubatch},
                     {"type_k", type_k},
                     {"type_v", type_v},
                     {"test", r.name},
                     {"n_prompt", r.n_prompt},
                     {"n_gen", r.n_gen},
                     {"n_depth", n_depth},
                     {"avg_ns", static_cast<uint64_t>(r.avg(r.ns))},
                     {"stddev_ns", static_cast<uint64_t>(r.stddev(r.ns))},
                     {"avg_ts", r.avg(r.ts)},
                     {"stddev_ts", r.stddev(r.ts)},
                     {"samples_ns", r.ns},
                     {"samples_ts", r.ts}});
    }
    fmt::print("{}\n", arr.dump(2));
    return 0;
  }
  // As llama-bench, the KV type columns appear only when they differ from the default (f16).
  const bool kv_cols = kv.k != GgmlType::F16 || kv.v != GgmlType::F16;
  const std::string kv_head = kv_cols ? fmt::format(" {:<6} | {:<6} |", "type_k", "type_v") : "";
  const std::string kv_sep = kv_cols ? fmt::format(" {:-<6} | {:-<6} |", "", "") : "";
  const std::string kv_row = kv_cols ? fmt::format(" {:<6} | {:<6} |", type_k, type_v) : "";
  fmt::print("| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |{} {:>15} | {:>20} |\n", "model", "size",
             "params", "backend", "threads", kv_head, "test", "t/s");
  // Right-aligned columns end their separator with ':' (markdown alignment), as llama-bench.
  fmt::print("| {:-<30} | {:->9}: | {:->9}: | {:-<10} | {:->6}: |{} {:->14}: | {:->19}: |\n", "",
             "", "", "", "", kv_sep, "", "");
  for (const auto& r : results) {
    const double np = double(w.n_params());
    const std::string params =
        np >= 1e9 ? fmt::format("{:.2f} B", np / 1e9) : fmt::format("{:.2f} M", np / 1e6);
    fmt::print("| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |{} {:>15} | {:>20} |\n", type,
               human_bytes(w.total_bytes()), params, eng.name() == "graph" ? "CPU" : "CPU (eager)",
               threads, kv_row, r.name,
               fmt::format("{:.2f} ± {:.2f}", r.avg(r.ts), r.stddev(r.ts)));
  }
  return 0;
}

}  // namespace minfer::app
