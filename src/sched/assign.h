// Backend assignment: which backend runs each node of a built graph. Its own pass between the
// graph build and the allocator (design doc 06 -> 07): build_graph -> assign_backends ->
// apply_assignment -> GraphAllocator::alloc_graph -> Scheduler. Plain data in (the graph, the
// params, a support table), plain data out (an Assignment: per node a backend, per layer where
// its K/V live, the splits and the staging copies), printable.
//
// Rules, in order (docs/ARCHITECTURE.md "Backend assignment"):
//  1. Weights stay where they are loaded. Placement is per layer, like llama.cpp's -ngl N:
//     weights named "blk.L.*" with L < N are on the device; the output head ("output.weight",
//     "output_norm.weight") is on the device only when N > n_layer; the token embedding and
//     weights of no layer (rope_freqs) are on the CPU / anywhere.
//  2. A layer's K/V live with its layer: on the device for L < N when the device runs every KV
//     op of the layer (KvStore, Attention, QkvBiasRopeStore), else on the CPU. KV ops run where
//     their K/V live.
//  3. A node that reads a weight runs where that weight lives (its first weight source, through
//     views) when that backend supports it; otherwise on the CPU (a "fallback": the device
//     cannot run it, the CPU reads the weight's host bytes — the simulated device's weights are
//     host memory; a real device must stage them, see ARCHITECTURE.md).
//  4. Every other executing node may go to any backend that supports it. Among those choices the
//     pass picks the one with the FEWEST CUTS — backend changes between consecutive executing
//     nodes in build order, which is exactly how the scheduler forms splits — by dynamic
//     programming over the build order (exact, O(nodes x backends^2)); ties go to the preferred
//     backend (the device), so work is offloaded wherever it costs no extra cut.
//  5. Inputs are host-filled: they stay on the CPU. Views, weights and dead nodes do not execute:
//     a view takes its storage owner's backend (it is a window of that buffer), a weight its
//     placement, a dead node the CPU.
//  6. A source whose storage is on another backend than its consumer is staged: one fresh
//     buffer per (source, consuming backend), copied at the consuming split's start after the
//     producing split was synchronised (GraphAllocator::plan_staging, Scheduler::execute).
//     `staging` lists them with their bytes; paged K/V are not staged (rule 2 keeps them local).
//
// Ownership: returns values, keeps nothing. Thread safety: pure functions.
// Failure: Error(Unsupported) when a node has no backend able to run it (the CPU runs every op,
// so only a broken support table) or a KV op is unsupported by the CPU; Error(InvalidArgument)
// for a support table of another size than the graph or a negative n_gpu_layers.
// Cost: O(nodes + edges); support_table calls Backend::supports once per node and backend.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"

namespace minfer {

struct AssignParams {
  BackendKind device = BackendKind::Sim;  // the preferred (offload) backend
  int32_t n_gpu_layers = 0;               // -ngl: layers [0, N) on the device
  int32_t n_layer = 0;                    // the model's layers (N > n_layer: the head too)
};

// Per node, bit (1 << backend) set when that backend can run it. Plain data, so the pass is
// testable without backends and printable.
using SupportMask = uint8_t;
constexpr SupportMask support_bit(BackendKind b) {
  return static_cast<SupportMask>(1u << static_cast<unsigned>(b));
}
// The table for g from the registered backends (nullptr: not registered, supports nothing).
std::vector<SupportMask> support_table(const Graph& g,
                                       const std::array<const Backend*, kNumBackends>& be);

struct StagingEdge {
  NodeId src = kNoNode;  // the node whose window is copied
  BackendKind from = BackendKind::Cpu;
  BackendKind to = BackendKind::Cpu;
  uint64_t bytes = 0;  // the source window's bytes (per execute)
};

struct AssignSplit {
  BackendKind backend = BackendKind::Cpu;
  NodeId first = kNoNode, last = kNoNode;  // first and last executing node (build order)
  uint32_t n_nodes = 0;
};

struct Assignment {
  AssignParams params;
  std::vector<BackendKind> backend;     // per node
  std::vector<BackendKind> kv_backend;  // per layer: where its K/V live
  std::vector<AssignSplit> splits;      // runs of consecutive executing nodes on one backend
  std::vector<StagingEdge> staging;     // one per (source, consuming backend)
  uint32_t n_fallback = 0;              // weight on the device, node on the CPU (rule 3)
  uint32_t n_executing = 0;
  std::array<uint32_t, kNumBackends> n_nodes{};  // executing nodes per backend

  uint32_t n_cuts() const { return splits.empty() ? 0 : static_cast<uint32_t>(splits.size() - 1); }
  uint64_t staging_bytes() const;
  // One line per split (backend, node range, count) and per staging copy (name, bytes).
  std::string to_string(const Graph& g) const;
};

// Rule 1: the layer a weight belongs to ("blk.L.*" -> L, the output head -> n_layer, the
// token embedding -> -1), or -2 for a weight of no layer (rope_freqs: follows its reader).
int32_t weight_layer(std::string_view weight_name, int32_t n_layer);

// The pass. `support` is support_table(g, ...) (or hand-made in tests), one mask per node.
Assignment assign_backends(const Graph& g, const AssignParams& p,
                           std::span<const SupportMask> support);
// Writes a.backend into g's nodes (sizes must match; asserted).
void apply_assignment(Graph& g, const Assignment& a);

}  // namespace minfer
