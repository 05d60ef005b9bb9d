// A loaded model (GGUF file + hyperparameters + weights) and the decoder graph builder.
//
// Graph contract (what the session and the allocator rely on):
//   inputs   "token_ids" [n_tokens] I32, "positions" [n_tokens] I32, "out_ids" [n_out] I32
//            (rows of the batch that need logits, indices into [0, n_tokens));
//   output   "logits" [n_vocab, n_out] F32;
//   per layer a KvStore + Attention pair (or the fused QkvBiasRopeStore) over the layer's
//   persistent K/V regions of n_kv_embd x n_ctx.
// Positions are data, so a graph built for one GraphParams (n_tokens, n_outputs, n_ctx,
// fusion) serves every decode step; GraphParams deliberately has no n_past.
// Fusion (GraphParams::cparams.fusion): qkv = one matmul against [Wq | Wk | Wv] followed by
// QkvBiasRopeStore (bias, RoPE of q and k, K/V store in one pass) — not applied to layers whose
// Q/K/V types differ, nor to qwen3, whose per-head Q/K norms sit between projection and RoPE;
// ffn = SwiGLU(gate, up) in one node instead of Silu(gate) then Mul; gate_up = one matmul
// against [W_gate | W_up] (prepare_fused_ffn) and the GLU over each output row's halves — the
// same logits as separate gate and up matmuls to the bit. Fused and unfused graphs compute
// the same logits (within 1e-5).
//
// Ownership: Model owns the gguf::File (mmap), the fused QKV and gate-up raw bytes (when
// copied: make_fused_readable), the fused QKV biases and the load-time packed weights;
// graphs borrow weight bytes from the Model, which must outlive them.
// Thread safety: build_graph is const and may run concurrently once prepare_fused_qkv() /
// prepare_fused_ffn() / prepare_packed() / make_fused_readable() are done; those must not race
// with anything.
// prepare_packed(simd) packs every projection (fused QKV, O, FFN, output) whose type has a
// load-time layout at that SIMD level into cpu::PackedWeights and releases the mapped pages of
// the originals it packed (they come back from the page cache if anything reads them again,
// e.g. get_rows on a tied token_embd), so RSS holds one copy of each weight.
// Failure: load throws Error (InvalidFile / Unsupported / Io) naming the file and key or tensor.
// Cost: load maps the file and validates metadata and tensor shapes (no weight bytes read);
// prepare_fused_qkv and prepare_fused_ffn copy no weight bytes (only the QKV biases);
// make_fused_readable copies the fused weights no packed copy serves (replacing their parts'
// pages); build_graph is O(n_layer) nodes and allocates the Graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/packed_weights.h"
#include "gguf/gguf.h"
#include "graph/graph.h"
#include "model/graph_params.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace minfer {

class Model {
 public:
  // `params`: mmap or read the file, mlock it (gguf::OpenParams; --no-mmap, --mlock).
  static std::unique_ptr<Model> load(const std::string& path, const gguf::OpenParams& params = {});
  static std::unique_ptr<Model> from_file(gguf::File f);  // e.g. File::from_memory (tests)

  const gguf::File& file() const { return file_; }
  const HParams& hparams() const { return hp_; }
  const ModelWeights& weights() const { return w_; }
  const std::string& path() const { return file_.path(); }
  // "llama 260K F32"-style description: arch, parameter count, dominant weight type.
  std::string type_description() const;
  GgmlType dominant_type() const;

  // Describes every layer's fused [Wq | Wk | Wv] weight (FusedQkv) without copying its bytes
  // (it copies the biases): as prepare_fused_ffn, it reserves an address range without access
  // for the raw bytes, prepare_packed packs each from its three parts, and make_fused_readable
  // copies the raw bytes of those an engine would otherwise read unpacked. Call before
  // building a graph with fusion.qkv; without it the builder uses the unfused path.
  void prepare_fused_qkv();
  // nullptr when the layer has no fused weight (not prepared, mixed types, or qwen3).
  const FusedQkv* fused_qkv(int layer) const;
  // Describes every layer's fused [W_gate | W_up] weight (FusedGateUp) without copying any
  // bytes: it reserves an address range without access for their raw bytes. prepare_packed
  // then packs each from its two parts, and make_fused_readable copies the raw bytes of those
  // an engine would otherwise read unpacked. Call before building a graph with
  // fusion.gate_up; without it the builder uses separate gate and up matmuls.
  void prepare_fused_ffn();
  // nullptr when the layer has no fused gate-up weight (not prepared, or mixed types).
  const FusedGateUp* fused_gate_up(int layer) const;
  // Makes every fused QKV and gate-up weight readable by a CPU backend at `simd` that reads the
  // packed weights `reader` (nullptr: none): copies the raw bytes (and releases the parts'
  // mapped pages) of those that `reader` holds no copy of for that level. Idempotent; must not
  // race with anything (as the prepare calls).
  void make_fused_readable(const cpu::PackedWeights* reader, cpu::SimdLevel simd);
  // Whether such a backend could run the fused graph now (make_fused_readable would copy
  // nothing).
  bool fused_readable(const cpu::PackedWeights* reader, cpu::SimdLevel simd) const;
  // Packs the projections once for kernels at `simd` (after prepare_fused_qkv when the graph
  // fuses QKV, after prepare_fused_ffn when it fuses gate and up: a fused weight is packed
  // from its parts, never copied raw); a second call with another level is ignored
  // (the first level stays).
  // `progress(done, total)` (optional) is called after each matrix with the source bytes
  // packed so far: the pass reads every projection once (a load on a large model).
  void prepare_packed(cpu::SimdLevel simd,
                      const std::function<void(uint64_t, uint64_t)>& progress = {});
  // nullptr until prepare_packed.
  const cpu::PackedWeights* packed() const { return packed_.get(); }
  // Where the CPU backend's GetRows must read the token embedding from: after
  // prepare_packed, a tied embedding (Qwen2.5 small models, Llama 3.2) has had its mapped pages
  // released with the output projection's, and a row gathered through the mapping would
  // fault its page back in (0.1-0.6 ms per new row on the development VM); the source reads it
  // from the file (gguf::File::read_mapped, ~4 us). Empty (no redirection) otherwise. The
  // returned reader borrows the Model.
  cpu::RowSource embedding_row_source() const;
  // Bytes prepare_packed(simd) holds (or would hold) with the QKV fusion as prepared now.
  uint64_t packed_bytes(cpu::SimdLevel simd) const;

  // Graph for params.n_tokens tokens, params.n_outputs logit rows, params.cparams.n_ctx
  // context and params.cparams.fusion. Throws Error(InvalidArgument) on inconsistent params.
  Graph build_graph(const GraphParams& params) const;

 private:
  explicit Model(gguf::File f);
  // Calls fn(WeightRef, span<const WeightRef* const> parts) for every matmul weight the graph
  // reads: per layer the fused QKV (when prepared: with its parts unless borrowed) or Q, K, V,
  // then O, the fused gate-up (likewise) or gate and up, then down; then the output
  // projection. parts is empty for a weight whose bytes are its own.
  template <class Fn>
  void for_each_projection(Fn&& fn) const;
  bool packed_for(const cpu::PackedWeights* reader, cpu::SimdLevel simd, const WeightRef& w) const;
  // An address range reserved for fused weights' raw bytes (PROT_NONE until a layer's bytes
  // are copied in), unmapped with the Model.
  struct Reserved {
    uint8_t* base = nullptr;
    size_t size = 0;
    Reserved() = default;
    Reserved(const Reserved&) = delete;
    Reserved& operator=(const Reserved&) = delete;
    ~Reserved();
  };
  std::unique_ptr<Reserved> reserve_raw(size_t bytes, const char* what) const;
  // Commits w's pages in its Reserved range, copies the parts' bytes in, makes it read-only and
  // releases the parts' mapped pages.
  void copy_raw(WeightRef& w, std::span<const WeightRef* const> parts);
  gguf::File file_;
  HParams hp_;
  ModelWeights w_;
  std::vector<FusedQkv> fused_;  // per layer when prepared
  std::vector<bool> fused_ok_;
  std::unique_ptr<Reserved> qkv_raw_;
  std::vector<FusedGateUp> gate_up_;  // per layer when prepared
  std::vector<bool> gate_up_ok_;
  std::unique_ptr<Reserved> gate_up_raw_;
  std::unique_ptr<cpu::PackedWeights> packed_;
};

// Input / output names of the decoder graph.
inline constexpr const char* kInTokens = "token_ids";
inline constexpr const char* kInPositions = "positions";
inline constexpr const char* kInOutIds = "out_ids";
// Paged KV cache only (ContextParams::kv_block_size > 0): per token the slot its k/v rows are
// written to (-1: padding, not stored) and its row in the block tables; the tables themselves.
inline constexpr const char* kInKvSlots = "kv_slots";
inline constexpr const char* kInKvSeq = "kv_seq";
inline constexpr const char* kInKvTables = "kv_tables";
inline constexpr const char* kOutLogits = "logits";
// GraphType::Embeddings: the final-norm hidden states [n_embd, n_out] instead of the logits.
inline constexpr const char* kOutEmbd = "embd";

}  // namespace minfer
