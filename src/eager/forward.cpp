#include "eager/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"
#include "kv/cache_type.h"
#include "model/rope_params.h"

namespace minfer::eager {
namespace {

KvCacheParams kv_params(const HParams& hp, const EagerParams& p) {
  // Q8_0 blocks must not span two heads (the attention kernel reads one head at a time).
  check_kv_cache_type_fits("EagerParams::kv_type", p.kv_type, hp.head_dim, hp.n_kv_embd());
  return KvCacheParams{hp.n_layer, p.n_ctx, hp.n_kv_embd(), p.kv_type};
}

EagerParams checked(EagerParams p) {
  if (p.n_ctx <= 0) fail(ErrorKind::InvalidArgument, "eager: context size {} must be > 0", p.n_ctx);
  if (p.n_threads < 1)
    fail(ErrorKind::InvalidArgument, "eager: thread count {} must be >= 1", p.n_threads);
  if (p.n_ubatch < 1)
    fail(ErrorKind::InvalidArgument, "eager: micro-batch {} must be >= 1", p.n_ubatch);
  return p;
}

}  // namespace

EagerSession::EagerSession(const Model& model, const EagerParams& params)
    : model_(model),
      params_(checked(params)),
      pool_(params.pool),
      threads_(std::make_unique<cpu::ThreadPool>(params.n_threads)),
      kv_(kv_params(model.hparams(), params)) {
  ctx_.pool = &pool_;
  ctx_.ex.pool = threads_.get();
  ctx_.ex.arena = &arena_;
}

EagerSession::~EagerSession() = default;

void EagerSession::reset() {
  kv_.reset();
}

std::span<const float> EagerSession::eval(std::span<const int32_t> tokens, int64_t start_pos,
                                          std::span<const int32_t> out_rows) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail(ErrorKind::InvalidArgument, "eager eval: no tokens");
  if (start_pos < 0 || start_pos > kv_.len()) {
    fail(ErrorKind::InvalidArgument,
         "eager eval: start position {} but only {} positions are cached", start_pos, kv_.len());
  }
  if (start_pos + n > params_.n_ctx) {
    fail(ErrorKind::InvalidArgument,
         "eager eval: {} cached + {} new tokens exceed the context of {} tokens", start_pos, n,
         params_.n_ctx);
  }
  for (size_t i = 0; i < out_rows.size(); ++i) {
    if (out_rows[i] < 0 || out_rows[i] >= n || (i > 0 && out_rows[i] <= out_rows[i - 1])) {
      fail(ErrorKind::InvalidArgument,
           "eager eval: output rows must be strictly increasing indices into {} tokens (row {} "
           "is {})",
           n, i, out_rows[i]);
    }
  }
  const int64_t V = n_vocab();
  const size_t need = out_rows.size() * static_cast<size_t>(V);
  if (logits_.size() < need) logits_.resize(need);
  if (ub_rows_.capacity() < static_cast<size_t>(params_.n_ubatch)) {
    ub_rows_.reserve(static_cast<size_t>(params_.n_ubatch));
  }
  kv_.set_len(start_pos);  // positions >= start_pos are about to be overwritten
  size_t r = 0;            // next entry of out_rows
  for (int64_t start = 0; start < n; start += params_.n_ubatch) {
    const int64_t len = std::min(params_.n_ubatch, n - start);
    float* out = logits_.data() + r * static_cast<size_t>(V);
    ub_rows_.clear();
    for (; r < out_rows.size() && out_rows[r] < start + len; ++r) {
      ub_rows_.push_back(static_cast<int32_t>(out_rows[r] - start));
    }
    forward(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(len)), start_pos + start,
            ub_rows_, out);
  }
  note_step(n);
  return {logits_.data(), need};
}

void EagerSession::note_step(int64_t n_tokens) {
  // Warm-up = everything up to and including the first single-token (decode) step: from then
  // on a decode step requests the same sizes in the same order, so every acquire is a hit.
  if (!warm_ && n_tokens == 1) {
    warm_ = true;
    const BufferPoolStats st = pool_.stats();
    allocs_at_warm_ = st.heap_allocations;
    arena_grows_at_warm_ = arena_.grow_count();
    peak_before_warm_ = st.peak_transient_bytes;
    peak_requested_before_warm_ = st.peak_requested_bytes;
    pool_.reset_peak();  // from here the pool's peak is the decode working set
  }
}

void EagerSession::forward(std::span<const int32_t> tokens, int64_t pos0,
                           std::span<const int32_t> rows, float* logits) {
  const HParams& hp = model_.hparams();
  const ModelWeights& w = model_.weights();
  const auto T = static_cast<int64_t>(tokens.size());
  // Read per pass: a graph Session of the same Model may have packed the weights since.
  ctx_.packed = model_.packed();

  // Token ids and positions are I32 tensors on the pool's slab arm.
  Tensor pos = Tensor::empty(pool_, GgmlType::I32, {T, 1, 1, 1});
  for (int64_t t = 0; t < T; ++t) pos.data<int32_t>()[t] = static_cast<int32_t>(pos0 + t);
  Tensor x;
  {
    Tensor ids = Tensor::empty(pool_, GgmlType::I32, {T, 1, 1, 1});
    std::memcpy(ids.raw(), tokens.data(), tokens.size_bytes());
    x = get_rows(ctx_, w.tok_embd, ids);  // [E, T]
  }
  if (hp.embd_scale != 1.0f) scale_inplace(ctx_, x, hp.embd_scale);  // gemma: sqrt(n_embd)
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    // Only the last layer looks at `rows`: it keeps just the rows that need logits.
    const bool last = l == hp.n_layer - 1;
    const std::span<const int32_t> r = last ? rows : std::span<const int32_t>();
    if (hp.has_post_norms()) {
      gemma_layer(static_cast<int>(l), x, pos, pos0 + T, r);
    } else {
      layer(static_cast<int>(l), x, pos, pos0 + T, r);
    }
  }
  pos.reset();
  kv_.set_len(pos0 + T);
  if (rows.empty()) return;  // a prefill chunk whose logits nobody asked for

  // x is [E, rows.size()] here.
  const Tensor h = rms_norm(ctx_, x, w.output_norm, hp.rms_eps);
  x.reset();
  const Tensor lg = matmul(ctx_, w.output, h);  // [V, rows]
  if (hp.final_softcap > 0.0f) softcap_inplace(ctx_, lg, hp.final_softcap);  // gemma2
  std::memcpy(logits, lg.raw(), lg.n_bytes());
}

void EagerSession::layer(int l, Tensor& x, const Tensor& pos, int64_t n_kv,
                         std::span<const int32_t> rows) {
  const HParams& hp = model_.hparams();
  const LayerWeights& w = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t T = x.ne(1);
  const bool select = l == hp.n_layer - 1 && static_cast<int64_t>(rows.size()) != T;

  // ---- attention block ----
  Tensor o;
  {
    const Tensor h = rms_norm(ctx_, x, w.attn_norm, hp.rms_eps);  // [E, T]
    const Tensor attn = attention_block(l, h, pos, n_kv);         // [Q, T]
    o = matmul(ctx_, w.wo, attn);                                 // [E, T]
  }  // h and attn go back to the pool here
  if (select) select_rows(x, o, rows);
  x.replace(add(ctx_, x, o));  // residual: the old x buffer is released now
  o.reset();

  // ---- feed-forward block ----
  Tensor act;
  {
    const Tensor h = rms_norm(ctx_, x, w.ffn_norm, hp.rms_eps);  // [E, .]
    const Tensor gate = matmul(ctx_, w.ffn_gate, h);             // [F, .]
    const Tensor up = matmul(ctx_, w.ffn_up, h);                 // [F, .]
    act = params_.fusion.ffn ? swiglu(ctx_, gate, up) : mul(ctx_, silu(ctx_, gate), up);
  }
  const Tensor down = matmul(ctx_, w.ffn_down, act);  // [E, .]
  act.reset();
  x.replace(add(ctx_, x, down));
}

void EagerSession::select_rows(Tensor& x, Tensor& o, std::span<const int32_t> rows) {
  // The last FFN and the head run only on the rows that need logits (none requested: the
  // last row, whose result is then dropped). One row: zero-copy views that keep their
  // matrices' buffers alive until the add has read them; several: a gather, as graph mode.
  if (rows.size() <= 1) {
    const int64_t r = rows.empty() ? x.ne(1) - 1 : rows[0];
    o = o.narrow(1, r, 1);
    x.replace(x.narrow(1, r, 1));
  } else {
    Tensor ids = Tensor::empty(pool_, GgmlType::I32, {static_cast<int64_t>(rows.size()), 1, 1, 1});
    std::memcpy(ids.raw(), rows.data(), rows.size_bytes());
    o = get_rows(ctx_, o, ids);
    x.replace(get_rows(ctx_, x, ids));
  }
}

void EagerSession::gemma_layer(int l, Tensor& x, const Tensor& pos, int64_t n_kv,
                               std::span<const int32_t> rows) {
  const HParams& hp = model_.hparams();
  const LayerWeights& w = model_.weights().layers[static_cast<size_t>(l)];
  const bool select = l == hp.n_layer - 1 && static_cast<int64_t>(rows.size()) != x.ne(1);

  // ---- attention block: norm, attention, output projection, post-norm, residual ----
  Tensor o;
  {
    const Tensor h = rms_norm(ctx_, x, w.attn_norm, hp.rms_eps);  // [E, T]
    const Tensor attn = attention_block(l, h, pos, n_kv);         // [Q, T]
    o = matmul(ctx_, w.wo, attn);                                 // [E, T]
  }
  if (select) select_rows(x, o, rows);
  o = rms_norm(ctx_, o, w.attn_post_norm, hp.rms_eps);
  x.replace(add(ctx_, x, o));
  o.reset();

  // ---- feed-forward block: norm, GeGLU, down projection, post-norm, residual ----
  Tensor down;
  {
    const Tensor h = rms_norm(ctx_, x, w.ffn_norm, hp.rms_eps);  // [E, .]
    const Tensor gate = matmul(ctx_, w.ffn_gate, h);             // [F, .]
    const Tensor up = matmul(ctx_, w.ffn_up, h);                 // [F, .]
    const Tensor act = geglu(ctx_, gate, up);                    // [F, .]
    down = matmul(ctx_, w.ffn_down, act);                        // [E, .]
  }
  down = rms_norm(ctx_, down, w.ffn_post_norm, hp.rms_eps);
  x.replace(add(ctx_, x, down));
}

Tensor EagerSession::attention_block(int l, const Tensor& h, const Tensor& pos, int64_t n_kv) {
  const HParams& hp = model_.hparams();
  const LayerWeights& w = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t T = h.ne(1), D = hp.head_dim, H = hp.n_head, HKV = hp.n_head_kv;
  // Per layer (gemma's windowed layers rope with their own base and see only their window).
  const cpu::RopeParams rp = rope_kernel_params(hp, model_.weights(), params_.n_ctx, l);
  const AttentionOp ap{HKV, hp.query_scale(), hp.attn_softcap, hp.attn_window(l)};

  // Fused QKV (as graph mode): one matmul, then bias + RoPE + K/V store in one pass, in place;
  // the epilogue converts the K/V rows to the cache's type as it stores them.
  const FusedQkv* f = params_.fusion.qkv ? model_.fused_qkv(l) : nullptr;
  if (f) {
    const int64_t W = hp.n_q() + 2 * hp.n_kv_embd();
    const Tensor qkv = matmul(ctx_, f->weight, h);  // [W, T]
    cpu::QkvRopeStoreArgs a;
    a.qkv = qkv.f32();
    a.ld = W;
    a.bias = reinterpret_cast<const float*>(f->bias.data);
    a.n_head = H;
    a.n_head_kv = HKV;
    a.head_dim = D;
    a.n_tok = T;
    a.pos = pos.data<int32_t>();
    a.rope = rp;
    a.k_region = kv_.k_region(l).raw();
    a.v_region = kv_.v_region(l).raw();
    a.k_type = a.v_type = params_.kv_type;
    a.n_ctx = params_.n_ctx;
    a.q_out = qkv.f32();
    a.lq_out = cpu::HeadLayout{D, H, T, D, W};
    cpu::qkv_bias_rope_store(ctx_.ex, a);
    // q stays in the first Q floats of each token's W: a strided view, no copy.
    const size_t fs = sizeof(float);
    const Tensor q = qkv.view({D, H, T, 1}, {fs, fs * D, fs * W, fs * W * T}, 0);
    return attention(ctx_, q, kv_.k_view(l, n_kv), kv_.v_view(l, n_kv), pos, ap);
  }

  Tensor q = matmul(ctx_, w.wq, h);  // [Q, T]
  Tensor k = matmul(ctx_, w.wk, h);  // [KV, T]
  Tensor v = matmul(ctx_, w.wv, h);  // [KV, T]
  if (hp.has_qkv_bias()) {
    q.replace(add(ctx_, q, w.bq));
    k.replace(add(ctx_, k, w.bk));
    v.replace(add(ctx_, v, w.bv));
  }
  q.replace(q.reshape({D, H, T, 1}));
  k.replace(k.reshape({D, HKV, T, 1}));
  if (hp.has_qk_norm()) {
    // Qwen3, Gemma 3: RMS norm over each head's D values, one weight vector shared by the heads.
    q.replace(rms_norm(ctx_, q, w.q_norm, hp.rms_eps));
    k.replace(rms_norm(ctx_, k, w.k_norm, hp.rms_eps));
  }
  rope_inplace(ctx_, q, pos, rp);
  rope_inplace(ctx_, k, pos, rp);
  kv_.store(ctx_.ex, l, k.f32(), hp.n_kv_embd(), v.f32(), hp.n_kv_embd(), T, pos.data<int32_t>());
  k.reset();
  v.reset();
  // The attention kernel reads the cache's type (f32, f16 or q8_0) directly: no widened copy.
  return attention(ctx_, q, kv_.k_view(l, n_kv), kv_.v_view(l, n_kv), pos, ap);
}

EagerMemReport EagerSession::eager_mem_report() const {
  const BufferPoolStats st = pool_.stats();
  EagerMemReport r;
  r.peak_transient_bytes = std::max(peak_before_warm_, st.peak_transient_bytes);
  r.decode_peak_transient_bytes = warm_ ? st.peak_transient_bytes : 0;
  r.peak_requested_bytes = std::max(peak_requested_before_warm_, st.peak_requested_bytes);
  r.decode_peak_requested_bytes = warm_ ? st.peak_requested_bytes : 0;
  r.cached_bytes = st.cached_bytes;
  r.cached_buffers = st.cached_buffers;
  r.outstanding = st.outstanding;
  r.hits = st.hits;
  r.misses = st.misses;
  r.heap_allocations = st.heap_allocations;
  r.heap_allocations_after_warmup =
      warm_ ? static_cast<int64_t>(st.heap_allocations - allocs_at_warm_) : -1;
  r.kernel_scratch_bytes = arena_.capacity();
  r.kernel_scratch_grows_after_warmup = warm_ ? arena_.grow_count() - arena_grows_at_warm_ : 0;
  r.kv_bytes = kv_.bytes();
  return r;
}

MemReport EagerSession::mem_report() const {
  const EagerMemReport e = eager_mem_report();
  MemReport r;
  r.kv_bytes = e.kv_bytes;
  r.kv_type_k = r.kv_type_v = params_.kv_type;
  r.compute_bytes = e.peak_transient_bytes;
  r.cached_bytes = e.cached_bytes;
  r.outstanding = e.outstanding;
  r.heap_allocs_after_warmup = e.heap_allocations_after_warmup;
  // Before the first decode step there is no warm-up mark: say so rather than print -1.
  const std::string after_warm =
      e.heap_allocations_after_warmup < 0
          ? std::string("none yet after warm-up: no decode step so far")
          : fmt::format("{} after warm-up", e.heap_allocations_after_warmup);
  r.detail = fmt::format(
      "eager pool: peak transient {} B (ops asked for {} B), decode after warm-up {} B (asked "
      "{} B); cached {} B in {} buffers; outstanding {}; hits {}, misses {}; heap allocations "
      "{} ({}); kernel scratch {} B ({} grows after warm-up)",
      e.peak_transient_bytes, e.peak_requested_bytes, e.decode_peak_transient_bytes,
      e.decode_peak_requested_bytes, e.cached_bytes, e.cached_buffers, e.outstanding, e.hits,
      e.misses, e.heap_allocations, after_warm, e.kernel_scratch_bytes,
      e.kernel_scratch_grows_after_warmup);
  return r;
}

}  // namespace minfer::eager
