// EagerSession: the eager engine (implements minfer::Engine, like graph mode's Session).
//
// One model description: eval() builds the graph builder's node list (Model::build_graph, the
// same call graph mode makes, for a contiguous KV cache) and GraphRunner (eager/graph_runner.h)
// executes it node by node in build order, every output a refcounted Tensor from the
// BufferPool, released when its last consumer has run. No liveness plan, no arena: that is
// the contrast with graph mode. There is no eager-specific model code, so every architecture
// the graph builder knows (Llama, Qwen2, Qwen3, Gemma 2 / 3, Phi-3) runs eager, and eager and
// graph logits agree bit for bit for the same fusion, threads and KV type (same kernels, same
// arguments, same order).
//
// Graphs are kept per (tokens, output rows) shape, a handful at most (kMaxGraphs, least
// recently used goes), with their use counts: a decode step reuses one and allocates nothing.
// A graph always has a logits output; a prefill micro-batch whose logits nobody asked for
// computes its last row's and drops them, as graph mode does.
//
// Memory: transients from the pool; the KV cache is session-lifetime (eager/kv_cache.h); the
// kernels' own scratch (quantized activations, attention tiles) lives in the CPU backend's
// grow-only cpu::Arena, which the session owns (the backend is used only as the node executor:
// its buffer pool stays empty) — the one allocation below the eager seam, as in the design doc.
// Logits are copied into a session-owned vector so no pool buffer outlives eval().
// After the first decode step every transient of a decode step is a pool hit (f32, f16 or q8_0
// KV cache): heap allocations after warm-up are 0, reported by mem_report().
//
// Ownership: the session borrows the Model, which must outlive it.
// Thread safety: one thread drives a session; kernels fan out over its thread pool.
// Failure: more tokens than the context holds throws Error(InvalidArgument) naming both
// numbers; an unsupported weight type throws Error(Unsupported) naming the weight (from the
// CPU executor); a failed eval leaves nothing outstanding and the cached prefix usable.
// Cost: eval is one forward pass, node by node (the kernels' arithmetic plus one pool acquire
// per non-view, non-in-place node); a new (tokens, rows) shape also builds its graph
// (O(n_layer) nodes).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "eager/buffer_pool.h"
#include "eager/graph_runner.h"
#include "eager/kv_cache.h"
#include "model/engine.h"
#include "model/graph_params.h"
#include "model/model.h"

namespace minfer::eager {

struct EagerParams {
  int64_t n_ctx = 4096;    // clamped by the caller to the model's training context
  int n_threads = 1;       // kernel threads (the caller is one of them)
  int64_t n_ubatch = 512;  // prefill micro-batch (tokens per forward)
  // As graph mode; fused QKV needs model.prepare_fused_qkv(), fused gate-up
  // model.prepare_fused_ffn(), and both model.make_fused_readable() for this level (or a graph
  // Session that packed them): else the graph keeps the projections apart.
  FusionToggles fusion;
  // F32, F16 (half the bytes; the default, as graph mode's SessionParams and llama.cpp) or
  // Q8_0 (34 bytes per 32 values; head_dim a multiple of 32, else Error(InvalidArgument));
  // bit-identical to graph mode with the same KV types. The CLI passes --cache-type-k, and
  // requires --cache-type-v to be the same.
  GgmlType kv_type = GgmlType::F16;
  BufferPoolParams pool;
};

// What `--mem-report` prints for eager mode.
struct EagerMemReport {
  size_t peak_transient_bytes = 0;  // most pool bytes handed out at once (since construction)
  // Same, counted from the end of warm-up only: the steady-state decode working set (0 before
  // warm-up).
  size_t decode_peak_transient_bytes = 0;
  // Peaks of the bytes the ops asked for (transient minus these = rounding + first-fit slack).
  size_t peak_requested_bytes = 0;
  size_t decode_peak_requested_bytes = 0;
  size_t cached_bytes = 0;  // bytes sitting in the pool's free lists now
  size_t cached_buffers = 0;
  int64_t outstanding = 0;        // pool buffers handed out now (0 between evals)
  uint64_t hits = 0, misses = 0;  // pool acquires
  uint64_t heap_allocations = 0;  // pool heap blocks ever allocated
  // Pool heap allocations since the end of the first decode step (warm-up); -1 when no decode
  // step has run yet.
  int64_t heap_allocations_after_warmup = -1;
  uint64_t kernel_scratch_bytes = 0;  // the kernels' arena capacity
  uint64_t kernel_scratch_grows_after_warmup = 0;
  uint64_t kv_bytes = 0;  // session-lifetime KV cache (outside the pool)
};

class EagerSession final : public Engine {
 public:
  EagerSession(const Model& model, const EagerParams& params);
  ~EagerSession() override;
  EagerSession(const EagerSession&) = delete;
  EagerSession& operator=(const EagerSession&) = delete;

  // Engine: runs `tokens` at positions [start_pos, start_pos + n) (prefill in micro-batches of
  // n_ubatch; cached positions >= start_pos are overwritten) and returns the logits of the
  // rows in `out_rows` (strictly increasing indices into tokens), n_vocab floats per row.
  // Valid until the next eval/reset.
  std::span<const float> eval(std::span<const int32_t> tokens, int64_t start_pos,
                              std::span<const int32_t> out_rows) override;
  int64_t n_ctx() const override { return params_.n_ctx; }
  int64_t n_vocab() const override { return model_.hparams().n_vocab; }
  MemReport mem_report() const override;  // the CLI's --mem-report (shared with graph mode)
  std::string name() const override { return "eager"; }

  // Forgets the context (KV length 0); buffers and the warm pool are kept.
  void reset();
  int64_t n_past() const { return kv_.len(); }
  const EagerParams& params() const { return params_; }
  const BufferPool& pool() const { return pool_; }
  EagerMemReport eager_mem_report() const;

 private:
  // At most this many graphs are kept (decode, the prompt's micro-batch shapes).
  static constexpr size_t kMaxGraphs = 8;
  struct CachedGraph {
    int64_t n_tokens = 0, n_outputs = 0;
    // Bit 0: the Model had fused QKV weights when it was built; bit 1: the fused gate-up
    // weights were used.
    unsigned fused = 0;
    uint64_t last_use = 0;
    std::unique_ptr<EagerGraph> graph;
    NodeId tokens = kNoNode, positions = kNoNode, out_ids = kNoNode;
  };

  // One micro-batch at positions [pos0, pos0 + n): logits of `rows` (indices into this
  // micro-batch) go to `logits`; with no rows they are computed for the last row and dropped.
  void forward(std::span<const int32_t> tokens, int64_t pos0, std::span<const int32_t> rows,
               float* logits);
  // The graph for n_tokens tokens and n_outputs logit rows (built on first use).
  const CachedGraph& graph_for(int64_t n_tokens, int64_t n_outputs);
  void note_step(int64_t n_tokens);

  const Model& model_;
  EagerParams params_;
  // Declared before anything holding pool buffers so it is destroyed last.
  BufferPool pool_;
  // The node executor (kernels, thread pool, kernel scratch); its own buffer pool is unused.
  std::unique_ptr<cpu::CpuBackend> cpu_;
  KvCache kv_;
  GraphRunner runner_;
  std::vector<CachedGraph> graphs_;
  uint64_t n_evals_ = 0;                      // clock of the graphs' last use
  std::vector<float> logits_;                 // grows only for a larger request than any before
  std::vector<int32_t> ub_rows_;              // out_rows of one micro-batch (reserved)
  std::vector<int32_t> positions_, out_ids_;  // one micro-batch's inputs (reserved)
  // Warm-up bookkeeping: snapshot after the first single-token eval.
  bool warm_ = false;
  uint64_t allocs_at_warm_ = 0;
  size_t peak_before_warm_ = 0;  // the pool's peaks are restarted at warm-up
  size_t peak_requested_before_warm_ = 0;
  uint64_t arena_grows_at_warm_ = 0;
};

}  // namespace minfer::eager
