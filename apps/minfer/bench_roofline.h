// `minfer bench`'s roofline columns and `--profile` table.
//
// Roofline: the machine's read bandwidth (cpu/membw.h, a short STREAM-like probe with the
// run's thread count, in bursts between the repetitions: cmd_bench.cpp) against the bytes one
// decode step reads (model/traffic.h, from the graph the step ran: weights touched + K/V read
// at the test's average depth + activations). Each repetition's roofline = bytes/token x its
// t/s / the best probe pass adjacent to it (cpu::pair_runs_with_probe); the row's, their mean.
// Interleaved (interleaved_decode below): one more pass whose steps alternate with single probe
// passes, each chunk against the passes either side; the median (cpu::summarize_interleaved).
// Profile: one more tgN pass with per-op-kind timing (cpu/profile.h) and a sampler drawing each
// token (llama.cpp's default chain), reported per token as a table that sums to the step time;
// "other" is the step's time outside the executor and the sampler (scheduler loop, inputs,
// the logits span; a decode step copies no logits) and may come out slightly negative from
// clock granularity.
//
// Ownership: plain values; profile_decode borrows the Session. Thread safety: none (CLI).
// Failure: Error(OutOfMemory) from the probe's buffer. Cost: mapping the probe's buffer once,
// ~0.17 s of probe bursts per tg repetition plus one, the profile one extra tg pass and a burst,
// the interleaved pass about twice a tg pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/membw.h"
#include "model/session.h"
#include "model/traffic.h"

namespace minfer::app {

struct ProfileRow {
  std::string kind;
  double ns_per_token = 0;
  double calls_per_token = 0;
};

struct DecodeProfile {
  int64_t n_tokens = 0;
  double step_ns = 0;  // wall time per token of the profiled pass (sampling included)
  double sampling_ns = 0;     // of which the sampler's
  double t0_s = 0, t1_s = 0;  // the timed loop on steady_clock, in seconds (probe pairing)
  double decode_ns() const { return step_ns - sampling_ns; }
  std::vector<ProfileRow> rows;  // kinds, sync, sampling, then "other"
  // The CPU pool: jobs per token and the share of (jobs x workers) the workers took part in
  // (below 100%: matmuls the caller finished before a worker woke, ThreadPool::run_elastic).
  double pool_jobs_per_token = 0;
  double worker_join_pct = 0;
};

// n_gen tokens one by one after `depth` cached positions, as tgN, with the profile attached.
DecodeProfile profile_decode(Session& s, int64_t n_gen, int64_t depth);

void print_profile_markdown(const DecodeProfile& p);
nlohmann::json profile_json(const DecodeProfile& p);

// The step-interleaved probe (`--probe-every K`, cpu::InterleavedRoofline): one more tgN pass,
// after the row's repetitions, whose decode steps alternate with single probe passes (P, K
// steps, P, K steps, ..., P), every step and every pass timed. The row's t/s stays that of the
// undisturbed repetitions; this pass's own decode-only rate is reported beside it (each pass
// evicts the last-level cache, so the step after it starts cold: the pass's figure is the
// conservative one). Cost: n_gen steps plus n_gen / K + 1 passes and two ~2 ms pauses per pass.
struct InterleavedPass {
  std::vector<double> step_ns;           // per decode step
  std::vector<double> pass_bytes_per_s;  // per pass: one before each chunk, one after the last
};
InterleavedPass interleaved_decode(Session& s, cpu::ReadProbe& probe, int64_t n_gen, int64_t depth,
                                   int steps_per_pass);

// Average positions a token of tgN @ dD attends to: d + (N + 1) / 2.
double average_kv(int64_t n_gen, int64_t depth);

}  // namespace minfer::app
