// Eager forward of the decoder models (Llama, Qwen2, Qwen3) and the session that drives it.
//
// Same model as graph mode — the Model's hyperparameters, weights and fused-QKV copies
// (src/model) — and the same CPU kernels (src/backend/cpu/kernels.h), executed op by op as the
// code below reads, with every transient acquired from a BufferPool and recycled as soon as its
// last handle dies. The residual stream is one carried tensor advanced with Tensor::replace, so
// the pool ping-pongs two buffers for it. Nothing is planned ahead; compare with graph mode's
// Session (src/model) through `minfer run --exec graph|eager --mem-report`.
//
// Op order mirrors the graph builder (src/model/graph_builder.cpp) exactly, including the
// fusion toggles (fused QKV + bias/RoPE/store epilogue, fused SwiGLU) and the last layer's
// restriction to the rows that need logits, so eager and graph logits agree bit for bit for
// the same fusion, threads and KV type.
//
// Memory: transients from the pool; the KV cache is session-lifetime (eager/kv_cache.h); the
// kernels' own scratch (quantized activations, attention tiles) lives in the kernels' grow-only
// cpu::Arena, which the session owns — the one allocation below the eager seam, as in the
// design doc. Logits are copied into a session-owned vector so no pool buffer outlives eval().
// After the first decode step every transient of a decode step is a pool hit (f32 or f16 KV
// cache): heap allocations after warm-up are 0, reported by mem_report().
//
// Ownership: the session borrows the Model, which must outlive it.
// Thread safety: one thread drives a session; kernels fan out over its ThreadPool.
// Failure: more tokens than the context holds throws Error(InvalidArgument) naming both
// numbers; an unsupported weight type throws Error(Unsupported) naming the weight.
// Cost: eval is one forward pass, op by op (the kernels' arithmetic plus one pool acquire per
// transient); allocations as under Memory above.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "eager/buffer_pool.h"
#include "eager/kv_cache.h"
#include "eager/ops.h"
#include "model/engine.h"
#include "model/model.h"

namespace minfer::eager {

struct EagerParams {
  int64_t n_ctx = 4096;    // clamped by the caller to the model's training context
  int n_threads = 1;       // kernel threads (the caller is one of them)
  int64_t n_ubatch = 512;  // prefill micro-batch (tokens per forward)
  FusionToggles fusion;    // as graph mode; fused QKV needs model.prepare_fused_qkv()
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
  // One micro-batch at positions [pos0, pos0 + n): logits of `rows` (indices into this
  // micro-batch) go to `logits`; with no rows the head is skipped.
  void forward(std::span<const int32_t> tokens, int64_t pos0, std::span<const int32_t> rows,
               float* logits);
  void layer(int l, Tensor& x, const Tensor& pos, int64_t n_kv, std::span<const int32_t> rows);
  // Gemma 2 / 3 (graph_builder.cpp's gemma_layer, op for op): post-norms, GeGLU.
  void gemma_layer(int l, Tensor& x, const Tensor& pos, int64_t n_kv,
                   std::span<const int32_t> rows);
  // The last layer's row selection (shared by layer and gemma_layer).
  void select_rows(Tensor& x, Tensor& o, std::span<const int32_t> rows);
  Tensor attention_block(int l, const Tensor& h, const Tensor& pos, int64_t n_kv);
  void note_step(int64_t n_tokens);

  const Model& model_;
  EagerParams params_;
  // Declared before anything holding pool buffers so it is destroyed last.
  BufferPool pool_;
  std::unique_ptr<cpu::ThreadPool> threads_;
  cpu::Arena arena_;
  OpContext ctx_;
  KvCache kv_;
  std::vector<float> logits_;     // grows only for a larger request than any before
  std::vector<int32_t> ub_rows_;  // out_rows of one micro-batch (reserved)
  // Warm-up bookkeeping: snapshot after the first single-token eval.
  bool warm_ = false;
  uint64_t allocs_at_warm_ = 0;
  size_t peak_before_warm_ = 0;  // the pool's peaks are restarted at warm-up
  size_t peak_requested_before_warm_ = 0;
  uint64_t arena_grows_at_warm_ = 0;
};

}  // namespace minfer::eager
