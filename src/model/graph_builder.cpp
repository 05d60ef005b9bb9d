// The decoder graph of llama / qwen2 / qwen3 / gemma2 / gemma3 / phi3, node by node in
// execution order; its output is the logits, or (GraphType::Embeddings) the final-norm hidden
// states. phi3 is the llama graph: its fused attn_qkv and gate-up weights arrive as
// row views (weights.h), its NeoX rope and LongRoPE factors through HParams::rope() and
// rope_freqs().
// Shapes are ggml-ordered ([ne0, ne1, ...], ne0 contiguous); T = n_tokens, O = n_out,
// E = n_embd, Q = n_head * head_dim, KV = n_head_kv * head_dim, F = n_ff, D = head_dim.
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "model/model.h"

namespace minfer {

namespace {

class Builder {
 public:
  Builder(const Model& m, const GraphParams& s) : m_(m), hp_(m.hparams()), s_(s) {}

  Graph build() {
    const int64_t T = s_.n_tokens, O = s_.n_outputs;
    tokens_ = g_.input(kInTokens, GgmlType::I32, {T, 1, 1, 1});        // [T] I32
    positions_ = g_.input(kInPositions, GgmlType::I32, {T, 1, 1, 1});  // [T] I32
    out_ids_ = g_.input(kInOutIds, GgmlType::I32, {O, 1, 1, 1});       // [O] I32
    if (paged()) {
      const int64_t S = s_.n_seqs, TB = s_.cparams.kv_table_stride;
      kv_slots_ = g_.input(kInKvSlots, GgmlType::I32, {T, 1, 1, 1});     // [T] I32
      kv_seq_ = g_.input(kInKvSeq, GgmlType::I32, {T, 1, 1, 1});         // [T] I32
      kv_tables_ = g_.input(kInKvTables, GgmlType::I32, {TB, S, 1, 1});  // [TB, S] I32
    }

    const NodeId tok_embd = g_.weight(m_.weights().tok_embd);
    NodeId x = g_.get_rows(tok_embd, tokens_, "inp_embd");  // [E, T]
    if (hp_.embd_scale != 1.0f) x = g_.scale(x, hp_.embd_scale, "inp_scaled");  // gemma
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      const int il = static_cast<int>(l);
      x = hp_.has_post_norms() ? gemma_layer(il, x) : layer(il, x);
    }

    // x is [E, O] here: the last layer already kept only the rows that need an output.
    if (s_.type == GraphType::Embeddings) {
      // The final-norm hidden states are the output: the head (V x E, the largest matrix of a
      // small model) is never read. Pooling is the caller's (model/pooling.h), over these rows.
      x = g_.rms_norm(x, g_.weight(m_.weights().output_norm), hp_.rms_eps, kOutEmbd);  // [E, O]
      g_.mark_output(x);
      return std::move(g_);
    }
    x = g_.rms_norm(x, g_.weight(m_.weights().output_norm), hp_.rms_eps, "result_norm");  // [E, O]
    const NodeId out_w = m_.weights().tied_output ? tok_embd : g_.weight(m_.weights().output);
    NodeId logits;
    if (hp_.final_softcap > 0.0f) {
      // Gemma 2: final logit soft-capping, in place over the head's output.
      logits = g_.matmul(out_w, x, "result_output");                            // [V, O]
      logits = g_.softcap(logits, hp_.final_softcap, std::string(kOutLogits));  // [V, O]
    } else {
      logits = g_.matmul(out_w, x, kOutLogits);  // [V, O]
    }
    g_.mark_output(logits);
    return std::move(g_);
  }

 private:
  std::string name(const char* what, int l) const { return fmt::format("{}-{}", what, l); }
  bool paged() const { return s_.cparams.kv_block_size > 0; }

  OpParams attn_params(int l) const {
    OpParams p;
    p.layer = l;
    p.n_ctx = s_.cparams.n_ctx;
    p.kv_type_k = s_.cparams.type_k;
    p.kv_type_v = s_.cparams.type_v;
    p.kv_block_size = s_.cparams.kv_block_size;
    p.kv_table_stride = s_.cparams.kv_table_stride;
    const RopeConfig r = hp_.rope(l);  // per layer: gemma's windowed layers differ
    p.rope_mode = r.mode;
    p.n_rot = r.n_rot;
    p.freq_base = r.freq_base;
    p.freq_scale = r.freq_scale;
    p.rope_ext_factor = r.ext_factor;
    p.rope_attn_factor = r.attn_factor;
    p.rope_beta_fast = r.beta_fast;
    p.rope_beta_slow = r.beta_slow;
    p.rope_n_ctx_orig = r.n_ctx_orig;
    p.n_head = static_cast<int32_t>(hp_.n_head);
    p.n_head_kv = static_cast<int32_t>(hp_.n_head_kv);
    p.head_dim = static_cast<int32_t>(hp_.head_dim);
    p.scale = hp_.query_scale();    // 1 / sqrt(head_dim) but for gemma's 27B shapes
    p.softcap = hp_.attn_softcap;   // gemma2
    p.window = hp_.attn_window(l);  // gemma's sliding-window layers
    return p;
  }

  // The rope frequency factors as a node (one weight node shared by every rope), or kNoNode:
  // Llama 3's rope_freqs.weight, or Phi-3's LongRoPE long / short factors chosen by the
  // per-sequence context (rope_factors(), weights.h).
  NodeId rope_freqs() {
    const int64_t n_ctx_seq = s_.cparams.n_ctx_seq > 0 ? s_.cparams.n_ctx_seq : s_.cparams.n_ctx;
    const WeightRef& ff = rope_factors(m_.weights(), hp_, n_ctx_seq);
    if (!has_data(ff)) return kNoNode;
    if (rope_freqs_ == kNoNode) rope_freqs_ = g_.weight(ff);
    return rope_freqs_;
  }

  // Reinterprets a contiguous node with a new shape (no copy, no buffer).
  NodeId reshape(NodeId x, std::array<int64_t, 4> ne, const std::string& n) {
    if (g_.node(x).ne == ne) return x;
    return g_.view(x, ne, 0, 0, n);
  }

  NodeId layer(int l, NodeId x) {
    const LayerWeights& w = m_.weights().layers[l];

    // ---- attention block ----
    const NodeId o = attention_block(l, x);  // [E, T or O]
    x = g_.add(x, o, name("ffn_inp", l));    // [E, T or O]

    // ---- feed-forward block ----
    NodeId h = g_.rms_norm(x, g_.weight(w.ffn_norm), hp_.rms_eps, name("ffn_norm", l));  // [E, .]
    const NodeId act = ffn_glu(l, h, false);                                  // [F, .]
    NodeId down = g_.matmul(g_.weight(w.ffn_down), act, name("ffn_out", l));  // [E, .]
    return g_.add(x, down, name("l_out", l));                                 // [E, .]
  }

  // Gemma 2 / 3 layer (llama.cpp's llm_build_gemma2_iswa / gemma3): the attention and FFN
  // outputs are RMS-normed (attn_post_norm, ffn_post_norm) before their residual adds, and the
  // FFN is GeGLU (tanh GELU). Attention (windows, soft-capping, the layer's rope, gemma3's Q/K
  // norms) is the shared attention(), configured by attn_params(l).
  NodeId gemma_layer(int l, NodeId x) {
    const LayerWeights& w = m_.weights().layers[l];

    NodeId o = attention_block(l, x);  // [E, T or O]
    o = g_.rms_norm(o, g_.weight(w.attn_post_norm), hp_.rms_eps, name("attn_post_norm", l));
    x = g_.add(x, o, name("sa_out", l));  // [E, T or O]

    NodeId h = g_.rms_norm(x, g_.weight(w.ffn_norm), hp_.rms_eps, name("ffn_norm", l));  // [E, .]
    const NodeId act = ffn_glu(l, h, true);                                        // [F, .]
    NodeId down = g_.matmul(g_.weight(w.ffn_down), act, name("ffn_out", l));       // [E, .]
    down = g_.rms_norm(down, g_.weight(w.ffn_post_norm), hp_.rms_eps, name("ffn_post_norm", l));
    return g_.add(x, down, name("l_out", l));  // [E, .]
  }

  // The FFN's gate and up projections of h and their GLU (GeGLU for gemma, else SwiGLU): one
  // matmul against the fused [W_gate | W_up] rows where the model prepared them (one weight
  // stream, one pool dispatch and one activation quantization instead of two; the GLU runs in
  // place over the [2F, T] output and the down projection reads its up halves through a
  // strided view), else two matmuls. Returns [F, T] (a view in the fused case).
  NodeId ffn_glu(int l, NodeId h, bool gelu) {
    const LayerWeights& w = m_.weights().layers[l];
    if (const FusedGateUp* f = s_.cparams.fusion.gate_up ? m_.fused_gate_up(l) : nullptr) {
      const int64_t F = f->gate.ne[1], T = g_.node(h).ne[1];
      const NodeId gu = g_.matmul(g_.weight(f->weight), h, name("ffn_gate_up", l));  // [2F, T]
      const NodeId a = gelu ? g_.geglu_halves(gu, name("ffn_geglu", l))
                            : g_.swiglu_halves(gu, name("ffn_swiglu", l));  // [2F, T]
      return g_.view(a, {F, T, 1, 1}, F, 2 * F, name("ffn_act", l));        // [F, T]
    }
    const NodeId gate = g_.matmul(g_.weight(w.ffn_gate), h, name("ffn_gate", l));  // [F, .]
    const NodeId up = g_.matmul(g_.weight(w.ffn_up), h, name("ffn_up", l));        // [F, .]
    if (gelu) return g_.geglu(gate, up, name("ffn_geglu", l));                     // [F, .]
    if (s_.cparams.fusion.ffn) return g_.swiglu(gate, up, name("ffn_swiglu", l));  // [F, .]
    const NodeId act = g_.silu(gate, name("ffn_silu", l));  // [F, .] (in place over gate)
    return g_.mul(act, up, name("ffn_act", l));             // [F, .]
  }

  // Norm, attention and output projection of layer l, shared by every layer kind. On the last
  // layer only the rows that need logits go on (the last FFN and the output head run on O
  // rows): both the returned projection and the residual `x` are cut to them.
  NodeId attention_block(int l, NodeId& x) {
    const LayerWeights& w = m_.weights().layers[l];
    const NodeId h =
        g_.rms_norm(x, g_.weight(w.attn_norm), hp_.rms_eps, name("attn_norm", l));  // [E, T]
    const NodeId attn = attention(l, h);                                            // [Q, T]
    NodeId o = g_.matmul(g_.weight(w.wo), attn, name("attn_out", l));               // [E, T]
    if (l == hp_.n_layer - 1 && s_.n_outputs != s_.n_tokens) {
      o = g_.get_rows(o, out_ids_, name("attn_out_sel", l));  // [E, O]
      x = g_.get_rows(x, out_ids_, name("resid_sel", l));     // [E, O]
    }
    return o;
  }

  // Q/K/V projections, RoPE, K/V store and attention for layer l. Returns [Q, T].
  NodeId attention(int l, NodeId h) {
    const LayerWeights& w = m_.weights().layers[l];
    const int64_t T = s_.n_tokens, D = hp_.head_dim, H = hp_.n_head, HKV = hp_.n_head_kv;
    const OpParams p = attn_params(l);

    if (const FusedQkv* f = s_.cparams.fusion.qkv ? m_.fused_qkv(l) : nullptr) {
      // W = Q + 2 KV
      const NodeId qkv = g_.matmul(g_.weight(f->weight), h, name("qkv", l));  // [W, T]
      // Fused epilogue: + bias, RoPE of q and k, k and v stored at `positions` into the layer's
      // K/V regions; in place, so q stays in the first Q rows of each token's W.
      const NodeId qkv_r =
          g_.qkv_bias_rope_store(qkv, g_.weight(f->bias), positions_, p, name("qkv_rope_store", l),
                                 paged() ? kv_slots_ : kNoNode, rope_freqs());  // [W, T]
      // Attention reads roped q as the first Q floats of each W-wide row of qkv_r.
      return attend(qkv_r, qkv_r, p, name("kqv", l));  // [Q, T]
    }

    NodeId q = g_.matmul(g_.weight(w.wq), h, name("Qcur", l));  // [Q, T]
    NodeId k = g_.matmul(g_.weight(w.wk), h, name("Kcur", l));  // [KV, T]
    NodeId v = g_.matmul(g_.weight(w.wv), h, name("Vcur", l));  // [KV, T]
    if (hp_.has_qkv_bias()) {
      q = g_.add(q, g_.weight(w.bq), name("Qbias", l));  // [Q, T]
      k = g_.add(k, g_.weight(w.bk), name("Kbias", l));  // [KV, T]
      v = g_.add(v, g_.weight(w.bv), name("Vbias", l));  // [KV, T]
    }
    q = reshape(q, {D, H, T, 1}, name("Qheads", l));    // [D, H, T]
    k = reshape(k, {D, HKV, T, 1}, name("Kheads", l));  // [D, HKV, T]
    if (hp_.has_qk_norm()) {
      // Qwen3, Gemma 3: RMS norm of every head's D values, one weight vector shared by the heads.
      q = g_.rms_norm(q, g_.weight(w.q_norm), hp_.rms_eps, name("Qnorm", l));  // [D, H, T]
      k = g_.rms_norm(k, g_.weight(w.k_norm), hp_.rms_eps, name("Knorm", l));  // [D, HKV, T]
    }
    q = g_.rope(q, positions_, p, name("Qrope", l), rope_freqs());  // [D, H, T] (in place)
    k = g_.rope(k, positions_, p, name("Krope", l), rope_freqs());  // [D, HKV, T] (in place)
    k = reshape(k, {hp_.n_kv_embd(), T, 1, 1}, name("Kflat", l));  // [KV, T]
    // Rows: positions into the contiguous region, or the cache's slots when paged.
    const NodeId rows = paged() ? kv_slots_ : positions_;
    const NodeId kv = g_.kv_store(k, v, rows, p, name("kv_store", l));  // [KV, n_ctx]
    return attend(q, kv, p, name("kqv", l));                            // [Q, T]
  }

  // Causal attention over the layer's cache; paged: through each token's block table.
  NodeId attend(NodeId q, NodeId kv, const OpParams& p, std::string nm) {
    if (!paged()) return g_.attention(q, kv, positions_, p, std::move(nm));
    return g_.attention_paged(q, kv, positions_, kv_seq_, kv_tables_, p, std::move(nm));
  }

  const Model& m_;
  const HParams& hp_;
  const GraphParams& s_;
  Graph g_;
  NodeId tokens_ = kNoNode, positions_ = kNoNode, out_ids_ = kNoNode;
  NodeId kv_slots_ = kNoNode, kv_seq_ = kNoNode, kv_tables_ = kNoNode;
  NodeId rope_freqs_ = kNoNode;
};

}  // namespace

Graph Model::build_graph(const GraphParams& s) const {
  if (s.n_tokens <= 0 || s.n_outputs <= 0 || s.n_outputs > s.n_tokens || s.cparams.n_ctx <= 0)
    fail(ErrorKind::InvalidArgument, "build_graph: bad params n_tokens {} n_outputs {} n_ctx {}",
         s.n_tokens, s.n_outputs, s.cparams.n_ctx);
  if (s.cparams.kv_block_size > 0 && (s.n_seqs <= 0 || s.cparams.kv_table_stride <= 0))
    fail(ErrorKind::InvalidArgument, "build_graph: paged KV with n_seqs {} table stride {}",
         s.n_seqs, s.cparams.kv_table_stride);
  return Builder(*this, s).build();
}

}  // namespace minfer
