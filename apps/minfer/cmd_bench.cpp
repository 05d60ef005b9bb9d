// minfer bench: llama-bench's tests on minfer.
//   ppN: prompt processing of N random tokens from an empty context (logits of the last one),
//   tgN: generation of N tokens one by one from an empty context.
// With -d D (llama-bench's depth) both run after D random tokens were prefilled once (untimed),
// named "ppN @ dD" / "tgN @ dD": attention then reads D cached positions per token.
// Each test runs once as warm-up, then -r timed repetitions; t/s = tokens / seconds per rep,
// reported as mean ± sample standard deviation. `-p 0` / `-n 0` skips that test. -p, -n and -d
// take comma-separated lists as llama-bench's (`-p 128,512 -d 0,1024`): each depth runs every
// ppN, then every tgN, on one engine whose context fits the largest combination.
// Output: a markdown table like llama-bench's, or a JSON array with llama-bench's field names.
// Roofline (graph engine; bench_roofline.h): beside each tgN row the bytes one decode step reads
// (weights + K/V at the test's average depth + activations, from the step's graph) and the
// roofline fraction bytes/token x t/s / bandwidth, each repetition against the best pass of the
// read-bandwidth probe bursts taken just before and just after it (the probe runs between the
// repetitions, with the run's thread count), the row's figure the mean of those fractions.
// `--probe-every K` (default 1; 0: off): one more tgN pass whose steps alternate with single
// probe passes, K steps between two passes, each chunk against the passes either side; the
// median and quartiles of those ratios are the "interleaved" column (json: the tg row's
// "roofline_interleaved"); the row's t/s stays that of the repetitions, without passes.
// `--no-roofline` skips the probe. `--profile`: one more tgN pass with per-op-kind timing,
// printed after the table (json: the tg row's "profile"), paired with the probe the same way.
// `--ab`: one more tgN pass whose steps alternate the two variants of cpu/step_ab.h in ABBA
// order, each step timed; prints B / A per adjacent pair (json: the tg row's "ab"). Only code
// that reads cpu::ab_variant() differs between them (none on main: a null test of the method).
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/step_ab.h"
#include "bench_roofline.h"
#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"

namespace minfer::app {

namespace {

using Clock = std::chrono::steady_clock;

struct TestResult {
  std::string name;
  int64_t n_prompt = 0, n_gen = 0, n_depth = 0;
  std::vector<double> ns{};  // per repetition
  std::vector<double> ts{};  // tokens per second per repetition
  // tg rows with the roofline: bytes one decode step reads (0: not derived), each repetition's
  // span on the probe's clock, the probe passes taken around them, and the pairs.
  StepTraffic traffic{};
  std::vector<cpu::TimedRun> spans{};
  std::vector<cpu::ProbePass> passes{};
  std::vector<cpu::PairedRun> paired{};
  std::optional<DecodeProfile> profile{};
  std::optional<cpu::PairedRun> profile_paired{};
  std::optional<cpu::InterleavedRoofline> interleaved{};
  InterleavedPass interleaved_raw{};  // its step times and pass rates (json)
  std::optional<cpu::AbSummary> ab{};
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
// Each repetition writes the same positions again: the cache's later positions are simply
// overwritten, which is what a fresh KV cache gives.
double run_pp(Engine& e, const std::vector<int32_t>& toks, int32_t n_batch, int64_t start) {
  const auto t0 = Clock::now();
  prefill(e, toks, start, n_batch);
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

// --ab: tgN again, step i as variant ab_variant_of_step(i), each step's wall time kept. The
// variant is back to 0 (A) afterwards.
cpu::AbSummary run_tg_ab(Engine& e, int64_t n_gen, int64_t n_vocab, int64_t start) {
  std::vector<double> step_ns;
  step_ns.reserve(static_cast<size_t>(n_gen));
  int32_t tok = static_cast<int32_t>(n_vocab / 2);
  for (int64_t i = 0; i < n_gen; ++i) {
    cpu::set_ab_variant(cpu::ab_variant_of_step(i));
    const auto t0 = Clock::now();
    auto lg = e.eval_last(std::span<const int32_t>(&tok, 1), start + i);
    step_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
    tok = static_cast<int32_t>((tok + 7 + static_cast<int32_t>(lg.size() > 0)) % n_vocab);
  }
  cpu::set_ab_variant(0);
  return cpu::summarize_ab(step_ns);
}

struct BenchOptions {
  EngineOptions engine;
  // Lists, as llama-bench: every value is a test (ppN for each -p, tgN for each -n), and every
  // test runs at each depth.
  std::vector<int64_t> n_prompt{512};  // ppN (0: skip)
  std::vector<int64_t> n_gen{128};     // tgN (0: skip)
  std::vector<int64_t> n_depth{0};     // tokens cached before each test (llama-bench -d)
  int reps = 3;
  std::string format = "md";  // md | json
  bool roofline = true;       // bandwidth probe + bytes/token (graph engine)
  bool profile = false;       // per-op-kind timing of one more tg pass
  bool ab = false;            // one more tg pass, variants A / B alternating (cpu/step_ab.h)
  int64_t bw_mib = 0;         // probe buffer (0: from the LLC size, cpu/membw.h)
  int probe_every = 1;        // decode steps between passes of the interleaved pass (0: none)
};

std::optional<int> parse_bench_options(int argc, char** argv, BenchOptions& o) {
  CLI::App app("minfer bench: prompt processing (ppN) and generation (tgN) speed", "minfer bench");
  add_engine_options(app, o.engine, /*with_ctx=*/false);
  auto* p = app.add_option("-p,--n-prompt", o.n_prompt,
                           "prompt tokens for ppN, n0,n1,... (0: skip; default 512)");
  auto* n = app.add_option("-n,--n-gen", o.n_gen,
                           "generated tokens for tgN, n0,n1,... (0: skip; default 128)");
  auto* d = app.add_option("-d,--n-depth", o.n_depth,
                           "tokens already in the KV cache before each test, n0,n1,... "
                           "(prefilled, untimed; default 0), as llama-bench -d");
  for (auto* opt : {p, n, d}) opt->delimiter(',')->expected(1, 1 << 20)->type_name("INT");
  app.add_option("-r,--repetitions", o.reps, "timed repetitions per test (default 3)");
  app.add_option("-o,--output", o.format, "md or json")->check(CLI::IsMember({"md", "json"}));
  app.add_flag("!--no-roofline", o.roofline,
               "skip the read-bandwidth probe and the bytes/token and roofline columns");
  app.add_option("--bw-mib", o.bw_mib,
                 "read-bandwidth probe buffer in MiB (default 0: 4 x the LLC, 256..512)");
  auto* every = app.add_option(
      "--probe-every", o.probe_every,
      "one more tgN pass with a probe pass after every K decode steps, each chunk against the "
      "passes either side (median and quartiles: the 'interleaved' column; default 1, 0: off)");
  every->type_name("K");
  app.add_flag("--profile", o.profile,
               "time one more tgN pass per op kind (matmul by type, attention, norms, rope, "
               "sync, logits, sampling) and print the table");
  app.add_flag("--ab", o.ab,
               "run one more tgN pass alternating variants A and B step by step (ABBA) and "
               "print B / A per adjacent pair of steps (only code reading cpu::ab_variant() "
               "differs: a developer's A/B; without such code, the method's noise)");
  if (auto status = parse_command_line(app, argc, argv)) return status;
  if (o.profile && o.engine.exec != "graph")
    fail(ErrorKind::InvalidArgument, "--profile needs --exec graph, got --exec {}", o.engine.exec);
  for (const auto& [flag, v] : {std::pair{"-p", &o.n_prompt}, {"-n", &o.n_gen}, {"-d", &o.n_depth}})
    for (int64_t x : *v)
      if (x < 0) fail(ErrorKind::InvalidArgument, "{} {} must be >= 0", flag, x);
  if (o.reps < 1) fail(ErrorKind::InvalidArgument, "-r {} must be >= 1", o.reps);
  if (o.probe_every < 0 || o.probe_every > (1 << 20))
    fail(ErrorKind::InvalidArgument,
         "--probe-every {} must be in [0, 1048576] (decode steps per probe pass; 0: off)",
         o.probe_every);
  if (every->count() > 0 && o.probe_every > 0 && !o.roofline)
    fail(ErrorKind::InvalidArgument,
         "--probe-every {} needs the probe: drop --no-roofline (or pass --probe-every 0)",
         o.probe_every);
  if (o.bw_mib < 0 || o.bw_mib > (int64_t{1} << 20))
    fail(ErrorKind::InvalidArgument, "--bw-mib {} must be in [0, 1048576]", o.bw_mib);
  return std::nullopt;
}

double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Seconds of probe passes per burst: short, so that the passes stay next to the run they pair with.
constexpr double kBurstSeconds = 0.15;

// A probe burst between runs, the passes it took appended to *passes. The pause before lets the
// engine's pool workers finish their idle spin (a few ms, thread_pool.cpp) and go to sleep, so
// that they do not share the cores with the probe; the pause after, the probe's own workers.
void probe_burst(cpu::ReadProbe& probe, std::vector<cpu::ProbePass>* passes) {
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const size_t first = probe.passes().size();
  probe.burst(kBurstSeconds);
  passes->insert(passes->end(), probe.passes().begin() + std::ptrdiff_t(first),
                 probe.passes().end());
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// One warm-up run of `once`, then -r timed ones; `n_tokens` per run gives t/s. With a probe, a
// burst of probe passes before the first timed run and after each (TestResult::spans, passes).
template <typename F>
TestResult repeat_test(std::string name, int64_t n_prompt, int64_t n_gen, int64_t n_depth, int reps,
                       cpu::ReadProbe* probe, F&& once) {
  TestResult r{.name = std::move(name), .n_prompt = n_prompt, .n_gen = n_gen, .n_depth = n_depth};
  once();  // warm-up
  if (probe != nullptr) probe_burst(*probe, &r.passes);
  const double n_tokens = double(n_prompt + n_gen);
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_s();
    const double ns = once();
    r.spans.push_back({t0, now_s(), 0});
    if (probe != nullptr) probe_burst(*probe, &r.passes);
    r.ns.push_back(ns);
    r.ts.push_back(1e9 * n_tokens / ns);
  }
  return r;
}

// The row's repetitions, and its profile pass, against the probe passes next to each.
void pair_with_probe(TestResult& r) {
  if (r.traffic.total() == 0 || r.passes.empty()) return;
  const double bytes = double(r.traffic.total());
  for (size_t i = 0; i < r.spans.size(); ++i) r.spans[i].bytes_per_s = bytes * r.ts[i];
  r.paired = cpu::pair_runs_with_probe(r.spans, r.passes);
}

// The tests at one depth: ppN for each -p, then tgN for each -n (llama-bench's order).
void run_tests_at(Engine& eng, const BenchOptions& o, int64_t depth, cpu::ReadProbe* probe,
                  std::vector<TestResult>& results) {
  const int64_t n_vocab = eng.n_vocab();
  // Tests at a depth read the cached positions [0, depth) and overwrite only those after.
  if (depth > 0) run_pp(eng, random_tokens(depth, n_vocab, 7), o.engine.n_batch, 0);
  const std::string at = depth > 0 ? fmt::format(" @ d{}", depth) : "";
  for (const int64_t n_prompt : o.n_prompt) {
    if (n_prompt == 0) continue;
    const auto toks = random_tokens(n_prompt, n_vocab, 42);
    results.push_back(repeat_test(fmt::format("pp{}{}", n_prompt, at), n_prompt, 0, depth, o.reps,
                                  nullptr,
                                  [&] { return run_pp(eng, toks, o.engine.n_batch, depth); }));
  }
  for (const int64_t n_gen : o.n_gen) {
    if (n_gen == 0) continue;
    results.push_back(repeat_test(fmt::format("tg{}{}", n_gen, at), 0, n_gen, depth, o.reps, probe,
                                  [&] { return run_tg(eng, n_gen, n_vocab, depth); }));
    TestResult& r = results.back();
    // The graph engine's last graph is now the one-token decode graph the row timed.
    if (auto* s = dynamic_cast<Session*>(&eng)) {
      if (probe != nullptr && s->last_graph() != nullptr) {
        const double n_kv = average_kv(n_gen, depth);
        r.traffic = step_traffic(*s->last_graph(), static_cast<int64_t>(n_kv));
        pair_with_probe(r);
      }
      if (o.profile) {
        r.profile = profile_decode(*s, n_gen, depth);
        if (probe != nullptr && r.traffic.total() > 0) {
          // Its own pair: the burst after the row's last repetition, and one after the pass.
          std::vector<cpu::ProbePass> around;
          for (const cpu::ProbePass& p : r.passes)
            if (p.t_s > r.spans.back().t1_s) around.push_back(p);
          probe_burst(*probe, &around);
          const cpu::TimedRun run{r.profile->t0_s, r.profile->t1_s,
                                  double(r.traffic.total()) * 1e9 / r.profile->decode_ns()};
          r.profile_paired = cpu::pair_runs_with_probe({run}, around).front();
        }
      }
    }
    // After the profile pass, which pairs with the probe burst right after the repetitions.
    auto* s = dynamic_cast<Session*>(&eng);
    if (probe != nullptr && s != nullptr && o.probe_every > 0 && r.traffic.total() > 0) {
      const int k = static_cast<int>(std::min<int64_t>(o.probe_every, n_gen));
      r.interleaved_raw = interleaved_decode(*s, *probe, n_gen, depth, k);
      r.interleaved =
          cpu::summarize_interleaved(r.interleaved_raw.step_ns, k,
                                     r.interleaved_raw.pass_bytes_per_s, double(r.traffic.total()));
    }
    if (o.ab) r.ab = run_tg_ab(eng, n_gen, n_vocab, depth);
  }
}

// The probe (roofline on, graph engine, a tg test): opened before the tests, so that its bursts
// can run between the repetitions.
std::unique_ptr<cpu::ReadProbe> open_probe(Engine& eng, const BenchOptions& o, int threads) {
  const bool any_tg = std::any_of(o.n_gen.begin(), o.n_gen.end(), [](int64_t n) { return n > 0; });
  if (!o.roofline || !any_tg || dynamic_cast<Session*>(&eng) == nullptr) return nullptr;
  return std::make_unique<cpu::ReadProbe>(threads, size_t(o.bw_mib) << 20);
}

std::vector<TestResult> run_tests(Engine& eng, const BenchOptions& o, cpu::ReadProbe* probe) {
  std::vector<TestResult> results;
  for (const int64_t depth : o.n_depth) run_tests_at(eng, o, depth, probe, results);
  return results;
}

// What every output row repeats: the model, engine and settings.
struct BenchSetup {
  const LoadedEngine& le;
  const BenchOptions& o;
  int threads;
  std::string type_k, type_v;
  std::optional<cpu::ReadBandwidth> bw;  // every probe pass of the run (roofline on)
  // 1-minute load average before and after the tests (-1: unknown). Above the CPU count the
  // probe's threads wait for cores as the decode's do, and the pair reads high.
  double load_before = -1, load_after = -1;
};

double load_1m() {
  double l[1];
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// Roofline fraction of a tg row, in percent (0 when not derived): the mean over its
// repetitions of each one's fraction of the best probe pass adjacent to it.
double roofline_pct(const TestResult& r) {
  std::vector<double> pct;
  for (const cpu::PairedRun& p : r.paired) pct.push_back(100.0 * p.fraction);
  return r.avg(pct);
}

// The same t/s against the best pass of the whole run (every burst): what a probe taken apart
// from the runs would give; for comparison only.
double roofline_pct_unpaired(const BenchSetup& s, const TestResult& r) {
  if (!s.bw || r.traffic.total() == 0 || s.bw->bytes_per_s <= 0) return 0;
  return 100.0 * double(r.traffic.total()) * r.avg(r.ts) / s.bw->bytes_per_s;
}

// Mean over the repetitions of the best adjacent pass (the row's roofline denominators).
double paired_bw(const TestResult& r) {
  std::vector<double> bw;
  for (const cpu::PairedRun& p : r.paired) bw.push_back(p.probe_bytes_per_s);
  return r.avg(bw);
}

void print_json(const BenchSetup& s, const std::vector<TestResult>& results) {
  const ModelWeights& w = s.le.model->weights();
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : results) {
    arr.push_back({{"model_filename", s.o.engine.model},
                   {"model_type", s.le.model->type_description()},
                   {"model_size", w.total_bytes()},
                   {"model_n_params", w.n_params()},
                   {"n_params", w.n_params()},
                   {"backends", s.o.engine.device == "sim" ? "CPU,sim" : "CPU"},
                   {"exec", s.le.engine->name()},
                   {"n_threads", s.threads},
                   {"threads", s.threads},
                   {"n_batch", s.o.engine.n_batch},
                   {"n_ubatch", s.o.engine.n_ubatch},
                   {"type_k", s.type_k},
                   {"type_v", s.type_v},
                   {"test", r.name},
                   {"n_prompt", r.n_prompt},
                   {"n_gen", r.n_gen},
                   {"n_depth", r.n_depth},
                   {"avg_ns", static_cast<uint64_t>(r.avg(r.ns))},
                   {"stddev_ns", static_cast<uint64_t>(r.stddev(r.ns))},
                   {"avg_ts", r.avg(r.ts)},
                   {"stddev_ts", r.stddev(r.ts)},
                   {"samples_ns", r.ns},
                   {"samples_ts", r.ts}});
    nlohmann::json& row = arr.back();
    if (s.bw) {
      row["load_avg_before"] = s.load_before;
      row["load_avg_after"] = s.load_after;
      row["read_bw_gbs"] = s.bw->bytes_per_s / 1e9;
      row["read_bw_median_gbs"] = s.bw->median_bytes_per_s / 1e9;
      row["read_bw_buffer_bytes"] = s.bw->buffer_bytes;
    }
    if (r.traffic.total() > 0) {
      row["bytes_per_token"] = r.traffic.total();
      row["bytes_per_token_weights"] = r.traffic.weights;
      row["bytes_per_token_kv"] = r.traffic.kv;
      row["bytes_per_token_activations"] = r.traffic.activations;
      row["roofline_pct"] = roofline_pct(r);
      row["roofline_pct_unpaired"] = roofline_pct_unpaired(s, r);
      row["read_bw_paired_gbs"] = paired_bw(r) / 1e9;
      nlohmann::json bw = nlohmann::json::array(), pct = nlohmann::json::array();
      for (const cpu::PairedRun& p : r.paired) {
        bw.push_back(p.probe_bytes_per_s / 1e9);
        pct.push_back(100.0 * p.fraction);
      }
      row["samples_read_bw_gbs"] = bw;
      row["samples_roofline_pct"] = pct;
      row["read_bw_row_passes"] = r.passes.size();
    }
    if (r.interleaved) {
      const cpu::InterleavedRoofline& v = *r.interleaved;
      nlohmann::json pct = nlohmann::json::array(), pass_gbs = nlohmann::json::array();
      for (double x : v.ratios) pct.push_back(100.0 * x);
      for (double x : r.interleaved_raw.pass_bytes_per_s) pass_gbs.push_back(x / 1e9);
      row["roofline_interleaved"] = {{"steps_per_pass", v.steps_per_pass},
                                     {"pairs", v.pairs},
                                     {"pct_median", 100.0 * v.ratio_median},
                                     {"pct_q1", 100.0 * v.ratio_q1},
                                     {"pct_q3", 100.0 * v.ratio_q3},
                                     {"samples_pct", pct},
                                     {"probe_median_gbs", v.probe_median_bytes_per_s / 1e9},
                                     {"decode_ts", v.steps_per_s},
                                     {"first_step_ratio", v.first_step_ratio_median},
                                     {"samples_step_ns", r.interleaved_raw.step_ns},
                                     {"samples_probe_gbs", pass_gbs}};
    }
    if (r.ab)
      row["ab"] = {{"pairs", r.ab->pairs},
                   {"ratio_median", r.ab->ratio_median},
                   {"ratio_q1", r.ab->ratio_q1},
                   {"ratio_q3", r.ab->ratio_q3},
                   {"a_median_ns", r.ab->a_median_ns},
                   {"b_median_ns", r.ab->b_median_ns}};
    if (r.profile) {
      row["profile"] = profile_json(*r.profile);
      if (r.profile_paired) {
        row["profile"]["read_bw_gbs"] = r.profile_paired->probe_bytes_per_s / 1e9;
        row["profile"]["roofline_pct"] = 100.0 * r.profile_paired->fraction;
      }
    }
  }
  fmt::print("{}\n", arr.dump(2));
}

// The step-interleaved pass's line under the row's roofline line.
void print_interleaved_line(const TestResult& r) {
  const cpu::InterleavedRoofline& v = *r.interleaved;
  fmt::print(
      "{}: interleaved roofline {:.1f}% (quartiles {:.1f}% - {:.1f}%) = median over {} chunks "
      "of {} decode step(s) of their GB/s / the mean of the probe passes just before and after "
      "the chunk (passes' median {:.1f} GB/s); between the passes the steps ran at {:.2f} t/s "
      "(the row, without passes: {:.2f} t/s){}\n",
      r.name, 100.0 * v.ratio_median, 100.0 * v.ratio_q1, 100.0 * v.ratio_q3, v.pairs,
      v.steps_per_pass, v.probe_median_bytes_per_s / 1e9, v.steps_per_s, r.avg(r.ts),
      v.steps_per_pass > 1 ? fmt::format("; the first step after a pass / the others of its "
                                         "chunk: median {:.3f}",
                                         v.first_step_ratio_median)
                           : "");
}

void print_markdown(const BenchSetup& s, bool kv_cols, const std::vector<TestResult>& results) {
  const ModelWeights& w = s.le.model->weights();
  const std::string kv_head = kv_cols ? fmt::format(" {:<6} | {:<6} |", "type_k", "type_v") : "";
  const std::string kv_sep = kv_cols ? fmt::format(" {:-<6} | {:-<6} |", "", "") : "";
  const std::string kv_row = kv_cols ? fmt::format(" {:<6} | {:<6} |", s.type_k, s.type_v) : "";
  const bool roof = s.bw.has_value();
  const bool inter = std::any_of(results.begin(), results.end(),
                                 [](const TestResult& r) { return r.interleaved.has_value(); });
  fmt::print("| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |{} {:>15} | {:>20} |{}{}\n", "model",
             "size", "params", "backend", "threads", kv_head, "test", "t/s",
             roof ? fmt::format(" {:>9} | {:>8} |", "MiB/token", "roofline") : "",
             inter ? fmt::format(" {:>11} |", "interleaved") : "");
  // Right-aligned columns end their separator with ':' (markdown alignment), as llama-bench.
  fmt::print("| {:-<30} | {:->9}: | {:->9}: | {:-<10} | {:->6}: |{} {:->14}: | {:->19}: |{}{}\n",
             "", "", "", "", "", kv_sep, "", "",
             roof ? fmt::format(" {:->8}: | {:->7}: |", "", "") : "",
             inter ? fmt::format(" {:->10}: |", "") : "");
  const double np = double(w.n_params());
  const std::string params =
      np >= 1e9 ? fmt::format("{:.2f} B", np / 1e9) : fmt::format("{:.2f} M", np / 1e6);
  const std::string backend = s.le.engine->name() != "graph" ? "CPU (eager)"
                              : s.o.engine.device == "sim"   ? "CPU+sim"
                                                             : "CPU";
  for (const auto& r : results) {
    std::string roof_cols;
    if (roof && r.traffic.total() > 0)
      roof_cols = fmt::format(" {:>9.1f} | {:>7.1f}% |", double(r.traffic.total()) / 1048576.0,
                              roofline_pct(r));
    else if (roof)
      roof_cols = fmt::format(" {:>9} | {:>8} |", "", "");
    if (inter)
      roof_cols += r.interleaved ? fmt::format(" {:>10.1f}% |", 100.0 * r.interleaved->ratio_median)
                                 : fmt::format(" {:>11} |", "");
    fmt::print("| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |{} {:>15} | {:>20} |{}\n",
               s.le.model->type_description(), human_bytes(w.total_bytes()), params, backend,
               s.threads, kv_row, r.name,
               fmt::format("{:.2f} ± {:.2f}", r.avg(r.ts), r.stddev(r.ts)), roof_cols);
  }
  if (roof) {
    for (const auto& r : results) {
      if (r.traffic.total() == 0) continue;
      fmt::print(
          "\n{}: {:.1f} MiB/token read = {:.1f} weights + {:.2f} K/V (average depth {:.1f}) "
          "+ {:.2f} activations; {:.2f} t/s x that = {:.1f} GB/s\n",
          r.name, double(r.traffic.total()) / 1048576.0, double(r.traffic.weights) / 1048576.0,
          double(r.traffic.kv) / 1048576.0, average_kv(r.n_gen, r.n_depth),
          double(r.traffic.activations) / 1048576.0, r.avg(r.ts),
          double(r.traffic.total()) * r.avg(r.ts) / 1e9);
      std::string pairs;
      for (size_t i = 0; i < r.paired.size(); ++i)
        pairs += fmt::format("{}{:.1f} / {:.1f} = {:.1f}%", i > 0 ? "; " : "",
                             r.spans[i].bytes_per_s / 1e9, r.paired[i].probe_bytes_per_s / 1e9,
                             100.0 * r.paired[i].fraction);
      fmt::print(
          "{}: roofline {:.1f}% = mean over the repetitions of decode GB/s / the best probe pass "
          "just before or after it: {} ({:.1f}% against the run's best pass)\n",
          r.name, roofline_pct(r), pairs, roofline_pct_unpaired(s, r));
      if (r.interleaved) print_interleaved_line(r);
    }
    fmt::print(
        "read bandwidth: {:.1f} GB/s ({} threads, read-only sum over {} MiB, LLC {} MiB, "
        "best of {} passes in bursts between the repetitions; median pass {:.1f} GB/s)\n",
        s.bw->bytes_per_s / 1e9, s.bw->threads, s.bw->buffer_bytes >> 20, s.bw->llc_bytes >> 20,
        s.bw->passes, s.bw->median_bytes_per_s / 1e9);
    fmt::print("load average: {:.2f} before the tests, {:.2f} after ({} CPUs online){}\n",
               s.load_before, s.load_after, std::thread::hardware_concurrency(),
               s.load_after > double(std::thread::hardware_concurrency())
                   ? ": above the CPU count, the probe waits for cores too (not a roofline figure)"
                   : "");
  }
  for (const auto& r : results) {
    if (!r.ab) continue;
    fmt::print(
        "\n{} A/B: {} pairs of steps in ABBA order, B / A per pair median {:.4f} (quartiles "
        "{:.4f} - {:.4f}); median step A {:.3f} ms, B {:.3f} ms (only code reading "
        "cpu::ab_variant() differs)\n",
        r.name, r.ab->pairs, r.ab->ratio_median, r.ab->ratio_q1, r.ab->ratio_q3,
        r.ab->a_median_ns / 1e6, r.ab->b_median_ns / 1e6);
  }
  for (const auto& r : results) {
    if (!r.profile) continue;
    print_profile_markdown(*r.profile);
    if (r.profile_paired)
      fmt::print(
          "profile pass: {:.3f} ms per token without sampling = {:.1f} GB/s = {:.1f}% of the "
          "best probe pass just before or after it ({:.1f} GB/s)\n",
          r.profile->decode_ns() / 1e6, double(r.traffic.total()) / r.profile->decode_ns(),
          100.0 * r.profile_paired->fraction, r.profile_paired->probe_bytes_per_s / 1e9);
  }
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  BenchOptions o;
  if (auto status = parse_bench_options(argc, argv, o)) return *status;

  // Context just large enough for the tests (llama-bench sizes it to n_prompt + n_gen).
  const auto max_of = [](const std::vector<int64_t>& v) {
    return *std::max_element(v.begin(), v.end());
  };
  const int64_t need = max_of(o.n_depth) + std::max(max_of(o.n_prompt), max_of(o.n_gen));
  o.engine.n_ctx = std::max<int64_t>(1, need);
  LoadedEngine le = load_engine(o.engine, false);
  if (le.engine->n_ctx() < need)
    fail(ErrorKind::InvalidArgument,
         "the tests need {} tokens of context (largest -d {} + the larger of -p {} and -n {}) "
         "but the model was trained with {}",
         need, max_of(o.n_depth), max_of(o.n_prompt), max_of(o.n_gen), le.engine->n_ctx());
  const int threads = o.engine.n_threads > 0 ? o.engine.n_threads : default_threads();
  const std::unique_ptr<cpu::ReadProbe> probe = open_probe(*le.engine, o, threads);
  const double load_before = load_1m();
  const std::vector<TestResult> results = run_tests(*le.engine, o, probe.get());
  const double load_after = load_1m();

  const KvTypes kv = kv_types(o.engine);
  BenchSetup setup{
      le, o, threads, std::string(type_name(kv.k)), std::string(type_name(kv.v)), std::nullopt};
  const bool any_tg = std::any_of(results.begin(), results.end(),
                                  [](const TestResult& r) { return r.traffic.total() > 0; });
  if (probe && any_tg) setup.bw = probe->summary();
  setup.load_before = load_before;
  setup.load_after = load_after;
  if (o.format == "json") {
    print_json(setup, results);
  } else {
    // As llama-bench, the KV type columns appear only when they differ from the default (f16).
    print_markdown(setup, kv.k != GgmlType::F16 || kv.v != GgmlType::F16, results);
  }
  return 0;
}

}  // namespace minfer::app
