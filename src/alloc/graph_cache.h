// GraphCache: keeps the built graph while its GraphParams stay equal, and keeps ONE allocator
// across rebuilds so the KV regions (inside the allocator) survive (design doc §2.8).
//
// Usage per forward call:
//   if (!cache.try_reuse(params)) cache.replace_graph(build_graph(params), params);
//   fill inputs via cache.allocator(), then Scheduler::execute(*cache.graph()).
//
// The number of cached tokens (n_past) is deliberately NOT a param: positions are data, not
// structure (ARCHITECTURE.md invariant 1) — otherwise every decode step would rebuild.
// Ownership: owns the graph and the allocator (which borrows or owns the backends).
// Thread safety: none.
// Failure: replace_graph rethrows what alloc_graph throws (Error(InvalidArgument): a cycle, a KV
// region of another size or type); the cache then holds no graph, so the next try_reuse misses.
// Cost: try_reuse is a struct compare; replace_graph runs alloc_graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "alloc/allocator.h"

namespace minfer {

enum class GraphType : uint8_t {
  Causal = 0,      // decoder forward producing logits
  Embeddings = 1,  // hidden states only (no output head)
};

// Fusion passes a model graph builder may apply; changing one changes the topology.
struct FusionToggles {
  bool qkv = true;  // fused QKV matmul + bias/rope/store epilogue
  bool ffn = true;  // fused gate/up + SwiGLU
  friend bool operator==(const FusionToggles&, const FusionToggles&) = default;
};

struct ContextParams {
  int64_t n_ctx = 4096;  // sizes the KV regions; must stay the same for an allocator's life
  // KV cache element types (f32 or f16; llama.cpp's default is f16). Like n_ctx they size the
  // persistent regions, so they must stay the same for an allocator's life.
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  int32_t n_ubatch = 512;
  // Paged KV cache (kv/cache.h): tokens per block, 0 = one contiguous region per layer owned by
  // the allocator (n_ctx rows). Paged: n_ctx counts the cache's slots and kv_table_stride is a
  // block table's length (the most blocks one sequence may hold).
  int32_t kv_block_size = 0;
  int64_t kv_table_stride = 0;
  FusionToggles fusion;
  BackendKind backend = BackendKind::Cpu;  // where the builder places the layers
  friend bool operator==(const ContextParams&, const ContextParams&) = default;
};

struct GraphParams {
  int64_t n_tokens = 0;   // tokens in this forward call
  int64_t n_outputs = 0;  // logit rows requested
  int64_t n_seqs = 1;     // paged: block-table rows (sequences) in this forward call
  GraphType type = GraphType::Causal;
  ContextParams cparams;
  uint64_t weights_version = 0;  // bumps when the weight set changes
  friend bool operator==(const GraphParams&, const GraphParams&) = default;
};

class GraphCache {
 public:
  GraphCache() = default;

  GraphAllocator& allocator() { return alloc_; }
  const GraphAllocator& allocator() const { return alloc_; }

  // True (and the cached graph stays current) when a graph built for equal params is cached.
  bool try_reuse(const GraphParams& params);
  // Store a freshly built graph for `params` and plan it with the SAME allocator (KV kept).
  // Throws what alloc_graph throws; the cache is then empty (the next call rebuilds).
  const AllocPlan& replace_graph(Graph graph, const GraphParams& params);

  Graph* graph() { return graph_ ? &*graph_ : nullptr; }
  const GraphParams* params() const { return params_ ? &*params_ : nullptr; }
  uint64_t n_builds() const { return n_builds_; }
  uint64_t n_reuses() const { return n_reuses_; }

 private:
  GraphAllocator alloc_;
  std::optional<Graph> graph_;
  std::optional<GraphParams> params_;
  uint64_t n_builds_ = 0;
  uint64_t n_reuses_ = 0;
};

}  // namespace minfer
