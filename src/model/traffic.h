// Bytes one forward pass moves, derived from its graph (`minfer bench`'s roofline columns):
//   weights      every weight a node reads: matmul / norm / bias weights whole, GetRows only
//                the rows it gathers (one per token). A tied output matrix counts twice
//                (one embedding row, then the whole logits projection), as it is read twice.
//   kv           what attention reads from the K/V cache: for each Attention node, n_kv
//                positions (at most the window on a sliding-window layer) x (K row + V row)
//                in the cache's element types, per token.
//   activations  every executing node's f32 output plus the non-weight, non-KV sources it
//                reads (K/V rows written count here). Mostly L1/L2 traffic at decode; listed
//                so the total is an upper bound of what the step touches.
// At decode (one token) weights dominate: the step is bound by streaming them from DRAM, so
// bytes x tokens/s against the machine's read bandwidth is the roofline fraction.
//
// Ownership: reads the graph only. Thread safety: const, reentrant. Failure: none (nodes it
// does not know count as activations). Cost: O(nodes + edges).
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace minfer {

struct StepTraffic {
  uint64_t weights = 0;
  uint64_t kv = 0;
  uint64_t activations = 0;
  uint64_t total() const { return weights + kv + activations; }
};

// `n_kv`: cached positions each token attends to (decode at depth d: d + 1). Per pass of `g`
// (all its tokens); divide by the tokens for a per-token figure.
StepTraffic step_traffic(const Graph& g, int64_t n_kv);

}  // namespace minfer
