// Session: the graph-mode Engine, single- and multi-sequence. Owns a CpuBackend, the
// GraphCache (graph + GraphAllocator: transient activations only), a Scheduler and the paged
// KV cache (kv::Cache, src/kv: every layer's K/V rows as blocks, per-sequence block tables,
// fork, prefix cache, lazy commit).
//
// With a device (SessionParams::device = Sim, -ngl N) it also owns a SimBackend that runs the
// CPU kernels queued, and every built graph goes through the backend assignment pass before the
// allocator; the scheduler runs the splits and stages tensors across. The device layers' K/V
// live in their own kv::Cache (the device's region; for the simulated device host memory, like
// its pool), the CPU layers' in another: two caches driven in lockstep by the same calls, so
// their slots and block tables are identical (asserted per batch) and one set of graph inputs
// serves both. Logits are bit-identical to CPU-only (the device runs the same kernels).
//
// decode(batch) places every token in the cache (kv::Cache::place: atomic, throws with the
// cache unchanged on a bad batch or too few blocks), then runs it in micro-batches of at most
// n_ubatch tokens through one graph each; on success the placement is applied, on failure
// rolled back. Per micro-batch the graph is keyed by BUCKETED shapes: tokens and logit rows
// rounded up to a power of two up to 64 (then a multiple of 32), sequences to a power of two.
// Padding rows write no K/V (slot -1) and their outputs are dropped, so sequences joining and
// leaving a steady decode reuse the same few graphs. Token ids, positions, slots, table rows
// and the block tables themselves are input DATA.
// eval() is the single-sequence Engine entry: sequence 0, a thin wrapper over decode().
// The logits decode() returns are, for a batch that fits one micro-batch with its logits on
// the CPU (every decode step), a view of the graph's output buffer itself (no copy of n_vocab
// floats per row); otherwise rows copied out of each micro-batch. Either way valid until the
// next decode()/eval().
//
// After warm-up (every bucket used once, the kernels' scratch grown), a decode step performs
// no heap allocation: inputs are filled from member buffers reserved up front.
//
// Ownership: borrows the Model (must outlive the Session); owns everything else.
// Thread safety: none; one thread drives a Session (the server's decode loop).
// Failure: Error(InvalidArgument) when positions would exceed the sequence's context, a batch
// is malformed, or params are inconsistent (a KV cache type other than f32 / f16 / q8_0, or
// q8_0 with a head_dim that is not a multiple of 32); Error(OutOfMemory) when the cache has
// no free block (the cache is then unchanged) or from the pools.
// Cost: construction starts the CPU thread pool, reserves the KV address space (committed a
// block at a time) and copies the fused QKV and gate-up weights once per Model, only where
// they are not packed (the QKV biases always). decode() is one forward
// pass per micro-batch plus a graph build and allocator plan when a bucket is first used.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "alloc/graph_cache.h"
#include "kv/cache.h"
#include "model/engine.h"
#include "model/graph_params.h"
#include "model/model.h"

namespace minfer {
class Scheduler;
namespace cpu {
class CpuBackend;
struct OpProfile;
}  // namespace cpu

struct SessionParams {
  // KV capacity in tokens, all sequences together (callers clamp to the training context).
  int64_t n_ctx = 4096;
  int32_t n_seq_max = 1;       // sequence ids [0, n_seq_max) (-np)
  int64_t n_ctx_seq = 0;       // most tokens one sequence holds; 0 = n_ctx
  int32_t kv_block_size = 16;  // tokens per KV block (--kv-block)
  bool prefix_cache = true;    // keep full blocks for reuse by later sequences
  // KV cache element types: f32, f16 (llama.cpp's default, half the bytes of f32) or q8_0 (34
  // bytes per 32 values; head_dim must be a multiple of 32). Attention reads them directly;
  // writes convert (or quantize) the f32 K/V rows.
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  int32_t n_batch = 2048;  // logical batch (callers feed at most this many per eval)
  int32_t n_ubatch = 512;  // micro-batch: the most tokens one graph evaluates
  int n_threads = 1;
  // The CPU kernels' instruction-set cap (kBest: what the CPU and build offer; MINFER_SIMD caps
  // that too). The packed layout follows the level, so with repack_weights every Session of a
  // Model must use the same level (another one is refused with Error(InvalidArgument)).
  cpu::SimdLevel simd = cpu::SimdLevel::kBest;
  FusionToggles fusion;
  // Pack the projections once at load into the kernels' panel layout (Model::prepare_packed)
  // when the CPU has a layout for their type; false keeps reading the GGUF layout.
  bool repack_weights = true;
  // Called as the repack pass goes (source bytes done, total); the CLI draws it on a terminal.
  std::function<void(uint64_t, uint64_t)> repack_progress;
  // Where the allocator places activations (alloc/allocator.h): size-class pool buffers or
  // offsets in one arena per backend planned by the offset planner.
  PlannerKind planner = PlannerKind::Arena;
  // --device sim -ngl N: the first N layers' weights, ops and K/V on the simulated queued device
  // (backend/sim; the output head too when N > n_layer), the rest on the CPU, as the backend
  // assignment pass (sched/assign.h) places them. Cpu: no device, every node on the CPU.
  BackendKind device = BackendKind::Cpu;
  int32_t n_gpu_layers = 0;
  // Embeddings (`minfer embed`, `serve --embeddings`): graphs are GraphType::Embeddings and
  // decode() returns, per flagged token, its final-norm hidden state (n_embd floats) instead
  // of its logits; the output matrix is never read. Pooling is the caller's (model/pooling.h).
  // The initial mode: set_embeddings() switches between decodes.
  bool embeddings = false;
};

// What a Session with these params will hold at full use, before any of it exists: the KV
// cache's reserved bytes (every block committed; with a device both caches), the compute arenas
// of the largest micro-batch graph (planned, not allocated; with a device every backend's, the
// staging windows not counted) and the fused QKV and gate-up copies where unpacked (and the
// QKV biases).
// For the RAM guard (kv::check_ram).
// Cost: one graph build and arena plan. Failure: as the Session constructor's params checks.
struct SessionFootprint {
  uint64_t kv = 0;
  uint64_t compute = 0;
  uint64_t fused_weights = 0;
};
SessionFootprint session_footprint(const Model& model, const SessionParams& params);

class Session final : public Engine, public SeqEngine, private KvSource {
 public:
  Session(Model& model, const SessionParams& params);
  ~Session() override;

  // ---- Engine (sequence 0) ----
  std::span<const float> eval(std::span<const int32_t> tokens, int64_t start_pos,
                              std::span<const int32_t> out_rows) override;
  int64_t n_ctx() const override { return n_ctx_seq_; }  // one sequence's context
  int64_t n_vocab() const override { return model_.hparams().n_vocab; }
  // Floats per row decode() returns: n_embd with SessionParams::embeddings, else n_vocab.
  int64_t n_out_row() const override;
  void set_embeddings(bool on) override { embeddings_ = on; }
  MemReport mem_report() const override;
  std::string name() const override { return "graph"; }

  // ---- SeqEngine ----
  std::span<const float> decode(const Batch& batch) override;
  int64_t seq_len(int32_t seq) const override;
  void seq_rm(int32_t seq, int64_t p0, int64_t p1) override;
  void seq_cp(int32_t src, int32_t dst) override;
  void seq_keep(int32_t seq) override;
  void seq_shift(int32_t seq, int64_t n_keep, int64_t n_discard) override;
  void clear() override;
  int64_t reuse_prefix(int32_t seq, std::span<const int32_t> tokens, int64_t max_tokens) override;
  int64_t cached_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const override;
  int32_t n_seq_max() const override { return params_.n_seq_max; }
  int64_t kv_capacity() const override { return params_.n_ctx; }
  int64_t n_ctx_seq() const override { return n_ctx_seq_; }
  KvReport kv_report() const override;
  // The cache holding layer 0's K/V (the device's with -ngl > 0); both parts have the same
  // tables, slots and block counts.
  const kv::Cache& kv_cache() const { return kv(); }
  // Where layer l's K/V live (the device for l < -ngl when a device is used).
  BackendKind kv_backend(int32_t layer) const {
    return layer < n_dev_layers_ ? params_.device : BackendKind::Cpu;
  }

  const SessionParams& params() const { return params_; }
  // K/V row bytes of the whole pool (n_ctx rounded up to whole blocks), committed lazily;
  // kv_report() has the reserved and committed bytes.
  uint64_t kv_bytes() const;
  // Pool bytes of the CPU backend minus the persistent KV regions: the activations' memory.
  uint64_t compute_bytes() const;
  uint64_t n_graph_builds() const;
  uint64_t n_graph_reuses() const;
  const GraphCache<GraphParams>& cache() const { return *cache_; }
  // The graph of the latest micro-batch (after a decode step: the one-token graph); nullptr
  // before the first decode. Valid until the next decode.
  const Graph* last_graph() const;
  // `minfer bench --profile`: per-op-kind timing of the CPU backend (backend/cpu/profile.h),
  // borrowed until set_profile(nullptr); nullptr (the default) = off.
  void set_profile(cpu::OpProfile* p);

 private:
  KvLayerRef kv_layer(int32_t layer) const override;
  void run_ubatch(const Batch& b, size_t begin, size_t end);
  GraphParams ubatch_params(int64_t n_tok, int64_t n_out, int64_t n_seq) const;
  void fill_tables();
  void rerotate(int32_t layer, uint8_t* k, int64_t n_rows, int32_t delta);
  Graph build_assigned(const GraphParams& gp) const;
  // The KV parts: kv_dev_ (layers [0, n_dev_layers_)) and kv_ (the rest); either may be absent.
  const kv::Cache& kv() const { return kv_dev_ ? *kv_dev_ : *kv_; }
  kv::Cache& kv() { return kv_dev_ ? *kv_dev_ : *kv_; }
  template <class F>
  void each_kv(F&& f) {
    if (kv_dev_) f(*kv_dev_, 0);
    if (kv_) f(*kv_, n_dev_layers_);
  }
  void place_all(const Batch& b);

  Model& model_;
  SessionParams params_;
  int64_t n_ctx_seq_ = 0;
  int32_t n_dev_layers_ = 0;  // layers whose weights, ops and K/V are on the device
  std::unique_ptr<cpu::CpuBackend> backend_;
  std::unique_ptr<Backend> device_;    // the SimBackend, or null
  std::unique_ptr<kv::Cache> kv_;      // CPU layers [n_dev_layers_, n_layer), or null
  std::unique_ptr<kv::Cache> kv_dev_;  // device layers [0, n_dev_layers_), or null
  kv::Placement placement_cpu_;        // kv_'s placement when both parts exist (placement_: kv()'s)
  std::unique_ptr<GraphCache<GraphParams>> cache_;
  std::unique_ptr<Scheduler> sched_;
  // Reused per call (capacity reserved up front; no growth in steady-state decode).
  Batch eval_batch_;
  kv::Placement placement_;  // the batch in flight
  std::vector<int32_t> tokens_, positions_, slots_, seq_rows_, out_ids_, tables_;
  std::vector<int32_t> row_of_seq_;  // per seq id: its table row in this micro-batch, or -1
  std::vector<int32_t> ub_seqs_;     // seq ids of this micro-batch's table rows
  std::vector<float> logits_;  // rows (logits or embeddings) copied out of several micro-batches
  std::span<const float> logits_view_;  // one CPU micro-batch: the graph's output itself
  size_t n_logit_rows_ = 0;
  bool embeddings_ = false;  // this decode's output: hidden states (true) or logits
};

}  // namespace minfer
