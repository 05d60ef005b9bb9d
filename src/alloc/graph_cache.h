// GraphCache: keeps built graphs while their GraphParams stay equal, and keeps ONE allocator
// across rebuilds so the KV regions (inside the allocator) survive (design doc §2.8).
//
// Usage per forward call:
//   if (!cache.try_reuse(params)) cache.replace_graph(build_graph(params), params);
//   fill inputs via cache.allocator(), then Scheduler::execute(*cache.graph()).
//
// Several graphs: when the allocator's plans hold no buffers of their own (Arena planner, no
// cross-backend staging: GraphAllocator::can_swap_plans), up to `capacity` graphs are kept,
// each with its saved plan; try_reuse of a cached one swaps its plan back in (no build, no
// planning, no allocation), so an engine whose batch shape moves between a few buckets (the
// multi-sequence decode) stops building graphs after warm-up. A plan made before the arena grew
// is planned again once (n_replans). Otherwise one graph is kept, as before.
//
// The number of cached tokens (n_past) is deliberately NOT a param: positions are data, not
// structure (ARCHITECTURE.md invariant 1) — otherwise every decode step would rebuild.
// Ownership: owns the graphs and the allocator (which borrows or owns the backends).
// Thread safety: none.
// Failure: replace_graph rethrows what alloc_graph throws (Error(InvalidArgument): a cycle, a KV
// region of another size or type); the failed graph is dropped, so the next try_reuse misses.
// Cost: try_reuse compares params with each cached entry (a few struct compares); a swap is
// O(1); replace_graph runs alloc_graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

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
  explicit GraphCache(size_t capacity = 1) : capacity_(capacity < 1 ? 1 : capacity) {}

  GraphAllocator& allocator() { return alloc_; }
  const GraphAllocator& allocator() const { return alloc_; }

  // True (and that graph becomes current) when a graph built for equal params is cached.
  bool try_reuse(const GraphParams& params);
  // Store a freshly built graph for `params` and plan it with the SAME allocator (KV kept).
  // Throws what alloc_graph throws; the cache is then empty (the next call rebuilds).
  const AllocPlan& replace_graph(Graph graph, const GraphParams& params);

  Graph* graph() { return cur_ ? cur_->graph.get() : nullptr; }
  const GraphParams* params() const { return cur_ ? &cur_->params : nullptr; }
  uint64_t n_builds() const { return n_builds_; }
  uint64_t n_reuses() const { return n_reuses_; }
  uint64_t n_replans() const { return n_replans_; }
  size_t n_cached() const { return entries_.size(); }

 private:
  struct Entry {
    GraphParams params;
    std::unique_ptr<Graph> graph;  // stable address: plans and the scheduler name it
    AllocPlan saved;               // its plan while another graph is current
    uint64_t last_use = 0;
  };
  void park_current();  // save the current graph's plan into its entry

  GraphAllocator alloc_;
  size_t capacity_;
  std::vector<std::unique_ptr<Entry>> entries_;
  Entry* cur_ = nullptr;
  uint64_t clock_ = 0;
  uint64_t n_builds_ = 0;
  uint64_t n_reuses_ = 0;
  uint64_t n_replans_ = 0;
};

}  // namespace minfer
