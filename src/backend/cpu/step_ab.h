// Per-step A/B inside one process (issue #16): two variants of the engine alternate decode
// step by step, so both see the same host bandwidth.
//
// Why: on the shared development VM the memory bandwidth moves 35-85 GB/s within minutes and
// differs between processes, so runs of two binaries (or of one binary with two settings),
// even alternated, differ by +-10-30% for reasons that have nothing to do with the change;
// step-level changes worth 1-5% drown in it. Alternating the variants every step inside one
// process and comparing each step with its neighbour cancels the host's slower swings: the
// null test (no code reads the variant) gives medians of 0.98-1.00 at load 10-18 (docs/
// BENCHMARKS.md, branch step).
//
// How: experimental code reads ab_variant() (0 = A, the shipped behaviour; 1 = B, the
// experiment) wherever it would branch; `minfer bench --ab` runs one more tgN pass in ABBA
// order (ab_variant_of_step), times each step and prints summarize_ab's figures. No code on
// main reads the variant: the pass then measures the method's noise.
//
// Ownership: a process-wide flag. Thread safety: ab_variant() may be read from any thread
// (relaxed atomic); set_ab_variant() between steps, from the thread that runs them. Failure:
// none. Cost: one relaxed load per read.
#pragma once

#include <cstdint>
#include <vector>

namespace minfer::cpu {

int ab_variant();
void set_ab_variant(int v);

// ABBA order: step i runs variant 0 1 1 0 0 1 1 0 ... (i = 0, 1, ...): every pair (2k, 2k + 1)
// holds one step of each, A first in even pairs and B first in odd ones, so a bias of the
// first or second step of a pair cancels too.
inline int ab_variant_of_step(int64_t i) {
  return static_cast<int>(((i + 1) / 2) % 2);
}

struct AbSummary {
  int64_t pairs = 0;
  // B's step time / A's, per pair: median and quartiles (linear interpolation).
  double ratio_median = 0, ratio_q1 = 0, ratio_q3 = 0;
  double a_median_ns = 0, b_median_ns = 0;  // each variant's median step time
};

// step_ns[i]: the wall time of step i, run as ab_variant_of_step(i). An odd last step is
// dropped; fewer than two steps give pairs == 0 and zeros.
AbSummary summarize_ab(const std::vector<double>& step_ns);

}  // namespace minfer::cpu
