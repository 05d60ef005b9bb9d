// Compute-graph IR: one transformer forward pass as a list of nodes in BUILD ORDER.
//
// Build order is execution order. The allocator computes liveness over build order and the
// scheduler executes in build order — never another topological order (design doc §3.4,
// the G3 bug). topo_order() exists only to reject cycles.
//
// Shapes follow ggml: ne[0] is the contiguous (row) dimension, e.g. a hidden state for
// n_tok tokens is [n_embd, n_tok, 1, 1]; a weight used by MatMul is [n_in, n_out].
// Activations are F32 or I32 (I32 inputs ride in f32 buffers as bit patterns);
// Weight nodes carry the file's type and point at external (mmap'd) bytes.
//
// Ownership: Graph owns its nodes; weight bytes are borrowed (the model's File outlives it).
// Thread safety: none; build on one thread, then treat as immutable.
// Failure: structural mistakes by the builder (bad source id) are MINFER_ASSERTs;
// cycles are reported by validate()/topo_order() as Error(InvalidArgument).
// Cost: building appends (amortised O(1) per node, names are copied); find() is a linear scan
// by name (plan / input-filling time, not per kernel); validate()/topo_order() are
// O(nodes + edges) and allocate.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/rope_mode.h"

namespace minfer {

using NodeId = int32_t;
constexpr NodeId kNoNode = -1;
// Most sources a node may have (paged attention: q, kv, positions, sequences, tables); the
// scheduler resolves them into a fixed array of this size.
constexpr size_t kMaxSrc = 6;

enum class BackendKind : uint8_t {
  Cpu = 0,
  Sim = 1,  // simulated queued device (kernels run at sync, like a GPU command buffer)
};
constexpr int kNumBackends = 2;
std::string_view backend_name(BackendKind b);

enum class Op : uint8_t {
  Input,      // host-filled graph input (token ids / positions / out ids as I32, or F32)
  Weight,     // external tensor; never gets an allocator buffer
  GetRows,    // out[:, i] = src0[:, ids[i]]; src0 weight or F32 [ne0, rows], src1 ids I32 [n]
  RmsNorm,    // x / sqrt(mean(x^2) + eps) over ne0, times src1 (weight [ne0]) when present
  Add,        // src0 + src1, src1 broadcast over ne1.. (bias or residual)
  Mul,        // src0 * src1, src1 broadcast over ne1..
  MatMul,     // y[n_out, m] = W^T x: src0 weight [n_in, n_out], src1 x [n_in, m]
  Rope,       // in place: src0 x [head_dim, n_head, n_tok], src1 positions I32 [n_tok]
  Silu,       // in place
  SwiGlu,     // silu(src0) * src1; in place over src0 under the in-place rule. With one
              // source (fused gate/up): src0 [2n, T] rows [gate | up]; output [2n, T] rows
              // [gate | silu(gate) * up], in place the same way (consumers view the halves)
  View,       // src0 reinterpreted: offset + shape (+ row stride); no buffer of its own
  KvStore,    // write K (src0 [n_kv_embd, n_tok]) and V (src1) at rows (src2: I32 [n_tok]) of
              // layer p.layer; output stands for the layer's K region [n_kv_embd, n_ctx] of
              // type p.kv_type_k (the node's type); V's region has p.kv_type_v. Contiguous
              // (p.kv_block_size 0): the allocator owns the region and a row is a position.
              // Paged: the KV cache (kv/cache.h) owns it, a row is a slot, -1 = not stored
  Attention,  // src0 q [head_dim, n_head, n_tok], src1 the KvStore node, src2 positions;
              // causal over kv positions [0, pos]; reads the layer's V region as sibling.
              // Paged: src3 the token's sequence (I32 [n_tok]), src4 the block tables
              // (I32 [kv_table_stride, n_seq]): position j of token t is in block
              // tables[seq[t]][j / kv_block_size]
  QkvBiasRopeStore,  // fused: src0 qkv [n_q + 2 n_kv, n_tok], src1 bias, src2 positions;
                     // adds bias, ropes q and k, stores k/v (paged: at the slots in src3);
                     // output q in place
  // Gemma 2 / 3 (model/graph_builder.cpp's gemma_layer):
  Scale,    // src0 * p.scale; in place (the embedding scale sqrt(n_embd))
  SoftCap,  // p.softcap * tanh(src0 / p.softcap); in place (final logit soft-capping)
  GeGlu,    // gelu_tanh(src0) * src1; in place over src0 under the in-place rule; one
            // source: rows [gate | up] as SwiGlu's
  Count
};
std::string_view op_name(Op op);
// Ops whose output may alias src0 under the in-place rule (sole consumer, same backend).
bool op_is_inplace(Op op);
// Ops that read or write a layer's persistent K/V (the allocator gives them the KV regions, the
// assignment runs them where that layer's K/V live, the executors hand them the cache).
constexpr bool op_uses_kv(Op op) {
  return op == Op::KvStore || op == Op::Attention || op == Op::QkvBiasRopeStore;
}

struct OpParams {
  // RmsNorm
  float eps = 0.0f;
  // KvStore / Attention / QkvBiasRopeStore
  int32_t layer = -1;
  int64_t n_ctx = 0;
  // Element types of the layer's persistent K and V regions (rows of row_size(type, n_kv_embd)
  // bytes). Writers convert f32 rows on the way in; attention reads the stored type.
  GgmlType kv_type_k = GgmlType::F32;
  GgmlType kv_type_v = GgmlType::F32;
  // Paged KV cache: tokens per block (0 = one contiguous allocator-owned region per layer) and
  // block ids per table row (the most blocks one sequence may hold).
  int32_t kv_block_size = 0;
  int64_t kv_table_stride = 0;
  // Rope (also QkvBiasRopeStore)
  RopeMode rope_mode = RopeMode::Normal;
  int32_t n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  // YaRN (ggml_rope_ext's ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig):
  // ext_factor 0 and attn_factor 1 are plain RoPE.
  float rope_ext_factor = 0.0f;
  float rope_attn_factor = 1.0f;
  float rope_beta_fast = 32.0f;
  float rope_beta_slow = 1.0f;
  int64_t rope_n_ctx_orig = 0;
  // True when the node's last source is [n_rot / 2] f32 frequency divisors (Llama 3's
  // rope_freqs.weight); set by the rope builders from their freq_factors argument.
  bool rope_freq_factors = false;
  // Attention (also QkvBiasRopeStore)
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;  // also Scale's factor
  // Attention: scores s -> softcap * tanh(s / softcap) before the softmax (0 = none; also
  // SoftCap's cap), and the sliding window: a token at position p reads only positions
  // (p - window, p] (0 = all of [0, p]; the cache keeps every position either way).
  float softcap = 0.0f;
  int64_t window = 0;
  // View: element offset into src0 and elements between consecutive ne[1] rows (0 = ne[0])
  int64_t view_offset = 0;
  int64_t view_row_stride = 0;
  // Weight: index into Graph::weights()
  int32_t weight_id = -1;
};

struct Node {
  Op op = Op::Input;
  std::string name;
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  BackendKind backend = BackendKind::Cpu;
  std::vector<NodeId> src;
  OpParams p;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // Bytes of the node's own output (row_size for weights and KvStore's K region, 4 per element
  // otherwise).
  size_t n_bytes() const;
};

struct WeightRef {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  const uint8_t* data = nullptr;  // borrowed (mmap)
  size_t n_bytes = 0;
};

class Graph {
 public:
  // Appends a node; every source must already exist. Returns its id (= build position).
  NodeId add(Node n);

  NodeId input(std::string name, GgmlType type, std::array<int64_t, 4> ne);
  NodeId weight(const WeightRef& w);
  void mark_output(NodeId id);

  // Convenience builders (the model code reads like the model).
  NodeId get_rows(NodeId table, NodeId ids, std::string name);
  NodeId rms_norm(NodeId x, NodeId w, float eps, std::string name);  // w may be kNoNode
  NodeId add(NodeId a, NodeId b, std::string name);
  NodeId mul(NodeId a, NodeId b, std::string name);
  NodeId matmul(NodeId w, NodeId x, std::string name);
  // freq_factors (optional): [n_rot / 2] f32 divisors of each pair's frequency, appended as
  // the last source (also for qkv_bias_rope_store).
  NodeId rope(NodeId x, NodeId pos, const OpParams& p, std::string name,
              NodeId freq_factors = kNoNode);
  NodeId silu(NodeId x, std::string name);
  NodeId swiglu(NodeId gate, NodeId up, std::string name);
  NodeId scale(NodeId x, float s, std::string name);
  NodeId softcap(NodeId x, float cap, std::string name);
  NodeId geglu(NodeId gate, NodeId up, std::string name);
  // The one-source forms over a fused gate/up matmul's output [2n, T] (rows [gate | up]):
  // output [2n, T] rows [gate | glu]; read the GLU as view(out, {n, T}, n, 2n).
  NodeId swiglu_halves(NodeId gate_up, std::string name);
  NodeId geglu_halves(NodeId gate_up, std::string name);
  NodeId view(NodeId x, std::array<int64_t, 4> ne, int64_t offset, int64_t row_stride,
              std::string name);
  NodeId kv_store(NodeId k, NodeId v, NodeId pos, const OpParams& p, std::string name);
  NodeId attention(NodeId q, NodeId kv, NodeId pos, const OpParams& p, std::string name);
  // Paged: each token reads its sequence's block table (p.kv_block_size > 0).
  NodeId attention_paged(NodeId q, NodeId kv, NodeId pos, NodeId seq, NodeId tables,
                         const OpParams& p, std::string name);
  // Fused epilogue: qkv [head_dim * (n_head + 2 n_head_kv), n_tok] + bias, rope q and k, store
  // k/v into layer p.layer's KV regions; output is the qkv block (in place), q in its first rows.
  // `slots` (paged, p.kv_block_size > 0): where each token's k/v rows go; kNoNode: at pos.
  NodeId qkv_bias_rope_store(NodeId qkv, NodeId bias, NodeId pos, const OpParams& p,
                             std::string name, NodeId slots = kNoNode,
                             NodeId freq_factors = kNoNode);

  size_t size() const { return nodes_.size(); }
  const Node& node(NodeId id) const;
  Node& node(NodeId id);
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<NodeId>& inputs() const { return inputs_; }
  const std::vector<NodeId>& outputs() const { return outputs_; }
  const std::vector<WeightRef>& weights() const { return weights_; }
  NodeId find(std::string_view name) const;  // kNoNode when absent

  // Test hook: rewire a source after the fact (this is how a cycle can be built).
  void set_src(NodeId id, size_t index, NodeId src);

  // Kahn order. Throws Error(InvalidArgument) naming a node on a cycle. Validation only:
  // nobody may schedule or compute liveness with this order (G3).
  std::vector<NodeId> topo_order() const;
  void validate() const;

  std::string to_json() const;
  std::string to_dot() const;

 private:
  NodeId glu_halves(Op op, NodeId gate_up, std::string name);
  std::vector<Node> nodes_;
  std::vector<NodeId> inputs_;
  std::vector<NodeId> outputs_;
  std::vector<WeightRef> weights_;
};

}  // namespace minfer
