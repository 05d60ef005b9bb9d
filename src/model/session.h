// Session: the graph-mode Engine. Owns a CpuBackend, the GraphCache (graph + GraphAllocator,
// which owns the persistent KV regions) and a Scheduler.
//
// eval() splits the tokens into micro-batches of n_ubatch; each micro-batch runs the cached
// graph for GraphParams{n_tokens, n_outputs, cparams} — positions, token ids and output rows are
// input DATA, so decode reuses one graph for every step (no n_past in the params). A micro-batch
// that needs no logits still asks for its last row (one lm-head row, negligible) so every graph
// has an output.
//
// After warm-up (the first decode step built the 1-token graph and grew the kernels' scratch),
// a decode step performs no heap allocation: inputs are filled from member buffers, the
// scheduler's plan is prepared once, logits are copied into a reserved buffer.
//
// Ownership: borrows the Model (must outlive the Session); owns everything else.
// Thread safety: none; one Session per conversation.
// Failure: Error(InvalidArgument) when positions would exceed n_ctx or arguments are
// inconsistent (including a KV cache type other than f32 / f16 / q8_0, or q8_0 with a head_dim
// that is not a multiple of 32); Error(OutOfMemory) from the pools.
// Cost: construction starts the CPU thread pool (and copies the fused QKV weights once per
// Model); the KV regions and activation buffers are allocated by the first eval. eval() is one
// forward pass per micro-batch, plus a graph build and allocator plan whenever the micro-batch
// shape (n_tokens, n_outputs) changes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "alloc/graph_cache.h"
#include "model/engine.h"
#include "model/model.h"

namespace minfer {
class Scheduler;
namespace cpu {
class CpuBackend;
}

struct SessionParams {
  int64_t n_ctx = 4096;  // KV capacity in tokens (callers clamp to the training context)
  // KV cache element types: f32, f16 (llama.cpp's default, half the bytes of f32) or q8_0 (34
  // bytes per 32 values; head_dim must be a multiple of 32). Attention reads them directly;
  // writes convert (or quantize) the f32 K/V rows.
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  int32_t n_batch = 2048;  // logical batch (callers feed at most this many per eval)
  int32_t n_ubatch = 512;  // micro-batch: the most tokens one graph evaluates
  int n_threads = 1;
  FusionToggles fusion;
  // Where the allocator places activations (alloc/allocator.h): size-class pool buffers or
  // offsets in one arena per backend planned by the offset planner.
  PlannerKind planner = PlannerKind::Arena;
};

class Session final : public Engine {
 public:
  Session(Model& model, const SessionParams& params);
  ~Session() override;

  std::span<const float> eval(std::span<const int32_t> tokens, int64_t start_pos,
                              std::span<const int32_t> out_rows) override;
  int64_t n_ctx() const override { return params_.n_ctx; }
  int64_t n_vocab() const override { return model_.hparams().n_vocab; }
  MemReport mem_report() const override;
  std::string name() const override { return "graph"; }

  const SessionParams& params() const { return params_; }
  uint64_t kv_bytes() const;
  // Pool bytes of the CPU backend minus the persistent KV regions: the activations' memory.
  uint64_t compute_bytes() const;
  uint64_t n_graph_builds() const;
  uint64_t n_graph_reuses() const;
  const GraphCache& cache() const { return *cache_; }

 private:
  void run_ubatch(std::span<const int32_t> tokens, int64_t start_pos,
                  std::span<const int32_t> rows);

  Model& model_;
  SessionParams params_;
  std::unique_ptr<cpu::CpuBackend> backend_;
  std::unique_ptr<GraphCache> cache_;
  std::unique_ptr<Scheduler> sched_;
  // Reused per call (capacity reserved up front; no growth in steady-state decode).
  std::vector<int32_t> positions_;
  std::vector<int32_t> ub_rows_;
  std::vector<float> logits_;
  size_t n_logit_rows_ = 0;
};

}  // namespace minfer
