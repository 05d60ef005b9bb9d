// GraphParams: what a model graph is built for (token/output/sequence counts, context and
// fusion settings). Produced by the engines (Session, plan_model) and consumed by the graph
// builder (Model::build_graph); GraphCache (alloc/graph_cache.h) only compares them as a key,
// so they live here with their owner, the model layer.
//
// The number of cached tokens (n_past) is deliberately NOT a param: positions are data, not
// structure (ARCHITECTURE.md invariant 1) — otherwise every decode step would rebuild.
// Plain values: no ownership, thread safety or failure modes; comparing is a few field compares.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "graph/graph.h"

namespace minfer {

enum class GraphType : uint8_t {
  Causal = 0,      // decoder forward producing logits
  Embeddings = 1,  // hidden states only (no output head)
};

// Fusion passes a model graph builder may apply; changing one changes the topology.
struct FusionToggles {
  bool qkv = true;  // fused QKV matmul + bias/rope/store epilogue
  bool ffn = true;  // SwiGLU(gate, up) as one node (off: Silu then Mul)
  // One matmul against the fused [W_gate | W_up] weight (Model::prepare_fused_ffn) and the GLU
  // over its output's halves; implies the one-node GLU whatever `ffn` says.
  bool gate_up = true;
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
  // Most positions one sequence may use (0 = n_ctx): picks Phi-3's LongRoPE long or short
  // factors as llama.cpp's n_ctx_seq does (model/weights.h rope_factors).
  int64_t n_ctx_seq = 0;
  FusionToggles fusion;
  // The Session's device (Sim with --device sim): its graphs go through the backend assignment
  // pass (sched/assign.h) after the build; the builder itself places every node on the CPU.
  BackendKind backend = BackendKind::Cpu;
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

}  // namespace minfer
