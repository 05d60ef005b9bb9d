#include "eager/forward.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"
#include "kv/cache_type.h"

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
      cpu_(std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{params.n_threads})),
      kv_(kv_params(model.hparams(), params)),
      runner_(pool_, *cpu_, kv_) {
  graphs_.reserve(kMaxGraphs);
  for (auto* v : {&ub_rows_, &positions_, &out_ids_})
    v->reserve(static_cast<size_t>(params_.n_ubatch));
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
  // on a decode step runs the same graph, so it requests the same sizes in the same order and
  // every acquire is a hit.
  if (!warm_ && n_tokens == 1) {
    warm_ = true;
    const BufferPoolStats st = pool_.stats();
    allocs_at_warm_ = st.heap_allocations;
    arena_grows_at_warm_ = cpu_->arena().grow_count();
    peak_before_warm_ = st.peak_transient_bytes;
    peak_requested_before_warm_ = st.peak_requested_bytes;
    pool_.reset_peak();  // from here the pool's peak is the decode working set
  }
}

const EagerSession::CachedGraph& EagerSession::graph_for(int64_t n_tokens, int64_t n_outputs) {
  // The builder takes the fused path only for layers whose fused weights exist; a Model that
  // prepares them later (a graph Session on it) must get a new graph, not a stale one.
  // Fused weights are used only when this backend can read every one of them (packed for its
  // level by a graph Session, or copied raw: make_fused_readable).
  const bool readable = model_.fused_readable(model_.packed(), cpu_->simd());
  const bool qkv = params_.fusion.qkv && model_.fused_qkv(0) != nullptr && readable;
  const bool gate_up = params_.fusion.gate_up && model_.fused_gate_up(0) != nullptr && readable;
  const unsigned fused = (qkv ? 1u : 0u) | (gate_up ? 2u : 0u);
  ++n_evals_;
  CachedGraph* slot = nullptr;
  for (CachedGraph& c : graphs_) {
    if (c.n_tokens == n_tokens && c.n_outputs == n_outputs && c.fused == fused) {
      c.last_use = n_evals_;
      return c;
    }
    if (slot == nullptr || c.last_use < slot->last_use) slot = &c;
  }
  if (graphs_.size() < kMaxGraphs) slot = &graphs_.emplace_back();
  GraphParams gp;
  gp.n_tokens = n_tokens;
  gp.n_outputs = n_outputs;
  gp.n_seqs = 1;
  gp.type = GraphType::Causal;
  gp.cparams.n_ctx = params_.n_ctx;
  gp.cparams.type_k = gp.cparams.type_v = params_.kv_type;
  gp.cparams.n_ubatch = static_cast<int32_t>(params_.n_ubatch);
  gp.cparams.kv_block_size = 0;  // contiguous regions: the eager KV cache's layout
  gp.cparams.fusion = params_.fusion;
  gp.cparams.fusion.qkv = qkv;
  gp.cparams.fusion.gate_up = gate_up;
  gp.cparams.backend = BackendKind::Cpu;
  slot->graph = std::make_unique<EagerGraph>(model_.build_graph(gp));
  slot->n_tokens = n_tokens;
  slot->n_outputs = n_outputs;
  slot->fused = fused;
  slot->last_use = n_evals_;
  const Graph& g = slot->graph->graph;
  slot->tokens = g.find(kInTokens);
  slot->positions = g.find(kInPositions);
  slot->out_ids = g.find(kInOutIds);
  MINFER_ASSERT(slot->tokens != kNoNode && slot->positions != kNoNode && slot->out_ids != kNoNode &&
                    g.outputs().size() == 1,
                "eager: the model graph lacks its inputs or logits output");
  return *slot;
}

void EagerSession::forward(std::span<const int32_t> tokens, int64_t pos0,
                           std::span<const int32_t> rows, float* logits) {
  const auto T = static_cast<int64_t>(tokens.size());
  positions_.clear();
  for (int64_t t = 0; t < T; ++t) positions_.push_back(static_cast<int32_t>(pos0 + t));
  // A graph always has a logits output: with no rows requested, the last row's are computed
  // and dropped (as graph mode's Session does).
  out_ids_.assign(rows.begin(), rows.end());
  if (out_ids_.empty()) out_ids_.push_back(static_cast<int32_t>(T - 1));
  const CachedGraph& c = graph_for(T, static_cast<int64_t>(out_ids_.size()));
  // Read per pass: a graph Session of the same Model may have packed the weights since.
  cpu_->set_packed_weights(model_.packed());
  cpu_->set_row_source(model_.embedding_row_source());
  const HostInput inputs[3] = {
      {c.tokens, tokens}, {c.positions, positions_}, {c.out_ids, out_ids_}};
  runner_.run(*c.graph, inputs);
  kv_.set_len(pos0 + T);
  if (!rows.empty()) {
    const Tensor& lg = runner_.output(c.graph->graph.outputs()[0]);  // [V, rows]
    MINFER_ASSERT(lg.n_elements() == static_cast<int64_t>(rows.size()) * n_vocab(),
                  "eager: logits shape");
    std::memcpy(logits, lg.raw(), lg.n_bytes());
  }
  runner_.release();
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
  r.kernel_scratch_bytes = cpu_->arena().capacity();
  r.kernel_scratch_grows_after_warmup =
      warm_ ? cpu_->arena().grow_count() - arena_grows_at_warm_ : 0;
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
