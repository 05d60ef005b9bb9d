// Eager ops: one call = one CPU kernel from backend/cpu/kernels.h, run NOW, with its output
// acquired from the BufferPool and returned as a fresh Tensor. Nothing here computes; these
// are shape checks, pool acquires and the kernel call, so eager and graph mode run the very
// same arithmetic.
//
// Inputs are f32 tensors whose rows (ne[0]) are contiguous; rows may be strided (a narrow or a
// column view): the row stride nb[1] is passed to the kernels that accept one (rms_norm,
// matmul); the others require a contiguous input. Weights are borrowed WeightRefs (mmap'd
// bytes of the model) and never enter the pool.
//
// Ownership: returned tensors own a pool buffer; dropping the last handle recycles it.
// Thread safety: an OpContext is used by one thread; kernels fan out over ex.pool internally.
// Failure: shape mismatches are internal errors (MINFER_ASSERT); an unsupported weight type
// throws Error(Unsupported) naming the weight; positions outside the view throw
// Error(InvalidArgument) (from the kernels).
// Cost: the kernel's, plus one pool acquire per returned tensor (no heap allocation on a pool
// hit).
#pragma once

#include "backend/cpu/kernels.h"
#include "eager/buffer_pool.h"
#include "eager/tensor.h"
#include "graph/graph.h"

namespace minfer::cpu {
class PackedWeights;  // backend/cpu/packed_weights.h
}  // namespace minfer::cpu

namespace minfer::eager {

struct OpContext {
  BufferPool* pool = nullptr;
  cpu::Exec ex;
  // Load-time packed copies of the weights (Model::prepare_packed), when a graph Session of the
  // same Model prepared them: matmul then reads the same bytes with the same kernel as graph
  // mode, which keeps the two modes' logits identical. nullptr: the GGUF layout.
  const cpu::PackedWeights* packed = nullptr;
};

// Rows of embedding `table` selected by `ids` (I32 [n]) -> f32 [table.ne0, n].
Tensor get_rows(OpContext& c, const WeightRef& table, const Tensor& ids);
// Rows of an f32 activation [ne0, rows] selected by `ids` -> [ne0, n] (a copy).
Tensor get_rows(OpContext& c, const Tensor& x, const Tensor& ids);
// RMS norm over ne[0] of every row, times `w` (f32 [ne0]) unless w.data == nullptr.
Tensor rms_norm(OpContext& c, const Tensor& x, const WeightRef& w, float eps);
// a + b / a * b with b ([ne0, b_rows], contiguous) broadcast over a's rows.
Tensor add(OpContext& c, const Tensor& a, const Tensor& b);
Tensor add(OpContext& c, const Tensor& a, const WeightRef& bias);
Tensor mul(OpContext& c, const Tensor& a, const Tensor& b);
// y = W^T x: W [n_in, n_out] (any type matmul_supported), x [n_in, m] -> [n_out, m].
Tensor matmul(OpContext& c, const WeightRef& w, const Tensor& x);
Tensor silu(OpContext& c, const Tensor& x);
Tensor swiglu(OpContext& c, const Tensor& gate, const Tensor& up);
// Gemma: gelu_tanh(gate) * up; x *= s and x = cap * tanh(x / cap) in place (contiguous x).
Tensor geglu(OpContext& c, const Tensor& gate, const Tensor& up);
void scale_inplace(OpContext& c, const Tensor& x, float s);
void softcap_inplace(OpContext& c, const Tensor& x, float cap);
// In place RoPE of x viewed as heads [head_dim, n_head, n_tok] (rows may be strided:
// head stride nb[1], token stride nb[2]); pos is I32 [n_tok].
void rope_inplace(OpContext& c, const Tensor& x_heads, const Tensor& pos, const cpu::RopeParams& p);

struct AttentionOp {
  int64_t n_head_kv = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // gemma2's score soft-capping (0 = none)
  int64_t window = 0;    // sliding window (0 = none; cpu::AttentionArgs)
};
// Causal GQA attention of q ([head_dim, n_head, n_tok], possibly strided) over the zero-copy
// K/V views [n_kv_embd, len] (f32), at positions pos (I32 [n_tok], each < len).
// Returns [head_dim * n_head, n_tok].
Tensor attention(OpContext& c, const Tensor& q_heads, const Tensor& k_view, const Tensor& v_view,
                 const Tensor& pos, const AttentionOp& p);

// Copies an f16 tensor [ne0, rows] (contiguous) into a fresh f32 tensor (pooled).
Tensor f16_to_f32(OpContext& c, const Tensor& x);

}  // namespace minfer::eager
