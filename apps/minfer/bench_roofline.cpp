#include "bench_roofline.h"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "backend/cpu/profile.h"
#include "sample/sampler.h"

namespace minfer::app {
namespace {

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

// The pause between a decode chunk and a probe pass (both ways): the idle pool's workers spin
// and yield for about 1 ms after their last job (thread_pool.cpp) before they sleep; without
// the pause, the engine's worker would share a core with the probe's threads (the pass reads
// low, the ratio high) and the probe's worker with the next step's.
constexpr auto kInterleaveGap = std::chrono::milliseconds(2);

}  // namespace

InterleavedPass interleaved_decode(Session& s, cpu::ReadProbe& probe, int64_t n_gen, int64_t depth,
                                   int steps_per_pass) {
  InterleavedPass r;
  const int64_t n_vocab = s.n_vocab();
  int32_t tok = static_cast<int32_t>(n_vocab / 2);
  auto pass = [&] {
    std::this_thread::sleep_for(kInterleaveGap);
    r.pass_bytes_per_s.push_back(probe.single_pass().bytes_per_s);
    std::this_thread::sleep_for(kInterleaveGap);
  };
  pass();
  for (int64_t i = 0; i < n_gen; ++i) {
    const auto t0 = Clock::now();
    const auto lg = s.eval_last(std::span<const int32_t>(&tok, 1), depth + i);
    r.step_ns.push_back(ns_since(t0));
    // As the tg rows: the next id depends on the previous step, no sampling.
    tok = static_cast<int32_t>((tok + 7 + static_cast<int32_t>(lg.size() > 0)) % n_vocab);
    if ((i + 1) % steps_per_pass == 0 || i + 1 == n_gen) pass();
  }
  return r;
}

double average_kv(int64_t n_gen, int64_t depth) {
  return double(depth) + double(n_gen + 1) / 2.0;
}

DecodeProfile profile_decode(Session& s, int64_t n_gen, int64_t depth) {
  const int64_t n_vocab = s.n_vocab();
  SamplerParams sp;
  sp.seed = 1234;
  Sampler sampler(sp, static_cast<int32_t>(n_vocab));
  cpu::OpProfile prof;
  int32_t tok = static_cast<int32_t>(n_vocab / 2);
  // Warm-up outside the profile (graph and sampler buffers), as the timed tests do.
  (void)sampler.sample(s.eval_last(std::span<const int32_t>(&tok, 1), depth));
  s.set_profile(&prof);
  double sample_ns = 0;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n_gen; ++i) {
    const auto lg = s.eval_last(std::span<const int32_t>(&tok, 1), depth + i);
    const auto ts = Clock::now();
    tok = sampler.sample(lg);
    sampler.accept(tok);
    sample_ns += ns_since(ts);
  }
  const auto t1 = Clock::now();
  const double total_ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  s.set_profile(nullptr);

  DecodeProfile p;
  p.n_tokens = n_gen;
  const double n = double(n_gen);
  p.step_ns = total_ns / n;
  p.sampling_ns = sample_ns / n;
  p.t0_s = std::chrono::duration<double>(t0.time_since_epoch()).count();
  p.t1_s = std::chrono::duration<double>(t1.time_since_epoch()).count();
  double attributed = 0;
  auto add = [&](std::string kind, double ns, double calls) {
    attributed += ns / n;
    p.rows.push_back({std::move(kind), ns / n, calls / n});
  };
  for (size_t t = 0; t < cpu::kNumProfTypes; ++t) {
    if (prof.matmul_calls[t] == 0) continue;
    add(fmt::format("matmul {}", type_name(static_cast<GgmlType>(t))), double(prof.matmul_ns[t]),
        double(prof.matmul_calls[t]));
  }
  for (size_t k = 0; k < cpu::kNumOpKinds; ++k) {
    if (k == size_t(cpu::OpKind::MatMul) || prof.calls[k] == 0) continue;
    add(cpu::op_kind_name(static_cast<cpu::OpKind>(k)), double(prof.ns[k]), double(prof.calls[k]));
  }
  add("barriers / sync wait", double(prof.waits.sync_ns), double(prof.waits.sync_waits));
  add("imbalance wait (workers' last work)", double(prof.waits.tail_ns),
      double(prof.waits.tail_waits));
  add("sampling", sample_ns, n);
  p.pool_jobs_per_token = double(prof.waits.jobs) / n;
  p.worker_join_pct =
      prof.waits.slots > 0 ? 100.0 * double(prof.waits.joins) / double(prof.waits.slots) : 0.0;
  p.rows.push_back({"other (scheduler, inputs)", p.step_ns - attributed, 0});
  return p;
}

void print_profile_markdown(const DecodeProfile& p) {
  // The tg rows do not sample (as llama-bench); this pass does, and says so.
  fmt::print(
      "\nprofile: {} decode steps, {:.3f} ms per token (sampling included; the tg row "
      "does not sample)\n\n",
      p.n_tokens, p.step_ns / 1e6);
  fmt::print("| {:<40} | {:>10} | {:>7} | {:>8} |\n", "kind", "ms/token", "%", "calls/tok");
  fmt::print("| {:-<40} | {:->9}: | {:->6}: | {:->8}: |\n", "", "", "", "");
  for (const ProfileRow& r : p.rows)
    fmt::print("| {:<40} | {:>10.4f} | {:>7.2f} | {:>9.1f} |\n", r.kind, r.ns_per_token / 1e6,
               100.0 * r.ns_per_token / p.step_ns, r.calls_per_token);
  fmt::print("| {:<40} | {:>10.4f} | {:>7.2f} | {:>9} |\n", "step", p.step_ns / 1e6, 100.0, "");
  if (p.pool_jobs_per_token > 0)
    fmt::print("\npool: {:.1f} jobs per token; the workers took part in {:.1f}% of them\n",
               p.pool_jobs_per_token, p.worker_join_pct);
}

nlohmann::json profile_json(const DecodeProfile& p) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ProfileRow& r : p.rows)
    rows.push_back({{"kind", r.kind},
                    {"ns_per_token", r.ns_per_token},
                    {"pct", 100.0 * r.ns_per_token / p.step_ns},
                    {"calls_per_token", r.calls_per_token}});
  return {{"n_tokens", p.n_tokens},
          {"step_ns", p.step_ns},
          {"kinds", rows},
          {"pool_jobs_per_token", p.pool_jobs_per_token},
          {"worker_join_pct", p.worker_join_pct}};
}

}  // namespace minfer::app
