// Eager execution of the graph builder's node list: one model description for both modes.
//
// The model is written once, as the node list Model::build_graph produces (graph mode plans it,
// eager mode runs it). GraphRunner walks that list in build order and runs each node NOW on the
// CPU executor (cpu::CpuBackend::execute: the same node-to-kernel translation and kernels as
// graph mode), with every output a refcounted Tensor acquired from the BufferPool at the moment
// its node runs:
//   * use counts come from the node list itself (each source occurrence is one use; a graph
//     output holds one more, dropped by release()); when a node's last consumer has run, its
//     handle is dropped and the buffer returns to the pool — unless a view still holds it;
//   * a View node is a Tensor view of its source's storage (same bytes, its own strides), so it
//     keeps the source's buffer alive for as long as the view is used;
//   * the in-place ops (op_is_inplace: Silu, Rope, SwiGlu, GeGlu, Scale, SoftCap, the fused QKV
//     epilogue) write over their first source when this node is its last consumer AND no other
//     handle shares its storage (refcount 1) AND it is contiguous with the node's shape;
//     otherwise they get a fresh buffer (same arithmetic either way);
//   * weights are the model's borrowed bytes; KvStore / Attention / the fused epilogue address
//     the session's contiguous KV regions (eager/kv_cache.h), as a graph with kv_block_size 0.
// No liveness plan, no arena, no interval: nothing is decided before a node runs.
//
// Ownership: an EagerGraph owns its Graph (weight bytes borrowed from the Model). A GraphRunner
// borrows the pool, the CPU backend (threads, kernel scratch, packed weights) and the KV cache,
// which must outlive it; it holds pool buffers only between run() and release().
// Thread safety: one thread drives a runner; kernels fan out over the backend's thread pool.
// Failure: a kernel's Error (e.g. a token id outside the vocabulary, a position past n_ctx)
// propagates after every handle of this run has been dropped (nothing stays outstanding); a
// graph that does not fit the KV cache (other n_ctx, types or paging), an input without host
// data and shape mismatches are internal errors (MINFER_ASSERT).
// Cost: per node one pool acquire (none for views, in-place ops, weights and KV nodes) and the
// kernel; run() allocates nothing once its per-node tables have grown to the largest graph seen.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "eager/buffer_pool.h"
#include "eager/kv_cache.h"
#include "eager/tensor.h"
#include "graph/graph.h"

namespace minfer::eager {

// A built graph plus what eager execution reads off its node list.
struct EagerGraph {
  explicit EagerGraph(Graph g);
  Graph graph;
  // Per node: consumers in the node list (every source occurrence counts) plus one per graph
  // output (held until the caller has read it). Not liveness: no intervals, no order analysis.
  std::vector<int32_t> uses;
};

// Host data of one I32 input node (token ids, positions, output rows).
struct HostInput {
  NodeId node = kNoNode;
  std::span<const int32_t> data;
};

class GraphRunner {
 public:
  GraphRunner(BufferPool& pool, cpu::CpuBackend& cpu, const KvCache& kv);
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  // Runs every node of g in build order (an Input node nobody reads is skipped). Afterwards
  // only the graph outputs hold pool buffers: output(id) until release().
  void run(const EagerGraph& g, std::span<const HostInput> inputs);
  const Tensor& output(NodeId id) const;
  // Drops every handle still held (the outputs after run()).
  void release();

 private:
  void run_node(const Graph& g, NodeId id, std::span<const HostInput> inputs);
  void make_input(const Node& n, NodeId id, std::span<const HostInput> inputs);
  void make_view(const Graph& g, const Node& n, NodeId id);
  void make_output(const Node& n, NodeId id);
  void execute(const Graph& g, const Node& n, NodeId id);
  void done_with_sources(const Node& n, NodeId id);

  BufferPool& pool_;
  cpu::CpuBackend& cpu_;
  const KvCache& kv_;
  // Per node of the graph being run (capacity kept across runs):
  std::vector<Tensor> val_;           // its pool tensor while a consumer still needs it
  std::vector<const uint8_t*> addr_;  // its bytes (weights, KV regions, tensors alike)
  std::vector<int32_t> left_;         // uses not yet run
};

}  // namespace minfer::eager
