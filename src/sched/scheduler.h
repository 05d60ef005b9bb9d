// Scheduler: executes an allocated graph in BUILD ORDER through the allocator's buffers.
//
// prepare(g) (after GraphAllocator::alloc_graph(g)) turns the AllocPlan into a SchedPlan:
//   * splits: maximal runs of consecutive executing nodes on one backend. Input, Weight and
//     View nodes and bufferless (dead) nodes never execute and do not break a run;
//   * per node, fully resolved NodeArgs: output window, each source's memory (weights: the
//     WeightRef bytes; same-backend sources: their window; cross-backend sources: the fresh
//     staging buffer), and the layer's K/V regions for KvStore / Attention / QkvBiasRopeStore;
//   * per split, the staging copies it needs (source window -> staging buffer), each copy in
//     the first split on that backend that reads the source.
// Pointers are resolved once, at prepare: pool ids never move memory and every buffer lives
// until the next alloc_graph, which bumps the plan generation and triggers a new prepare.
//
// execute(g): for each split, sync the previous split's backend (so nothing it produced is
// still queued — design doc §3.4, the Phase-3 bug), then perform its staging copies (a host
// copy of memory whose producer has completed), then hand its nodes to its backend. At the
// end, sync every backend used. After the first execute of a prepared plan, execute() does
// no heap allocation (the engine's zero-allocations-per-decode-token rule).
//
// Ownership: borrows the allocator (and through it the backends); holds no buffers itself.
// Thread safety: none. Failure: Error(Unsupported) when a backend does not support a node;
// Error(InvalidArgument) when g was not the graph last planned by the allocator.
// Cost: prepare is O(nodes + edges) and allocates the plan's vectors (once per re-plan);
// execute is O(executing nodes + staging bytes) plus the kernels, with no heap allocation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "alloc/allocator.h"

namespace minfer {

struct StagingCopy {
  NodeId src = kNoNode;
  BackendKind dst = BackendKind::Cpu;
  BufRef from;  // the producer's window on its backend
  BufRef to;    // the staging buffer on `dst`
  size_t bytes = 0;
};

struct Split {
  BackendKind backend = BackendKind::Cpu;
  uint32_t node_begin = 0, node_end = 0;  // range in SchedPlan::args
  uint32_t copy_begin = 0, copy_end = 0;  // range in SchedPlan::copies
};

struct SchedPlan {
  uint64_t alloc_generation = 0;
  const Graph* graph = nullptr;
  std::vector<Split> splits;
  std::vector<NodeArgs> args;  // executing nodes in build order
  std::vector<StagingCopy> copies;
  uint32_t n_skipped = 0;  // nodes that do not execute (inputs, weights, views, dead)
  std::string to_string(const Graph& g) const;
};

class Scheduler {
 public:
  explicit Scheduler(GraphAllocator& alloc) : alloc_(alloc) {}

  const SchedPlan& prepare(const Graph& g);
  // Prepares first when the allocator re-planned (or g is another graph object) since, unless a
  // plan prepared earlier for this graph and allocator plan (generation) is kept: an engine
  // that moves between a few cached graphs (GraphCache) prepares each once.
  void execute(const Graph& g);
  const SchedPlan& plan() const { return plan_; }
  uint64_t n_executes() const { return n_executes_; }
  // TEST ONLY — reproduces bug G1 (design §3.4: a host copy of a device-pending buffer): skip
  // the split-boundary sync and copy staging tensors through the host views, so a queued
  // producer's result is not there yet and its consumer reads stale data. Both sides of every
  // copy must be host-addressable (asserted). The test that sets it proves the sync matters.
  void set_unsynced_staging_for_test(bool on) { unsynced_staging_ = on; }

 private:
  NodeArgs resolve(const Graph& g, NodeId id) const;
  const void* source_ptr(const Graph& g, NodeId src, BackendKind dst) const;

  GraphAllocator& alloc_;
  SchedPlan plan_;
  bool prepared_ = false;
  // Plans of other graphs, most recent last; at most kKeep (their args hold resolved pointers
  // that stay valid while their allocator plan's generation is current for that graph).
  static constexpr size_t kKeep = 32;
  std::vector<SchedPlan> kept_;
  uint64_t n_executes_ = 0;
  bool unsynced_staging_ = false;
};

}  // namespace minfer
