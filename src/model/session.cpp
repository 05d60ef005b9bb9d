#include "model/session.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "kv/cache_type.h"
#include "sched/scheduler.h"

namespace minfer {

Session::Session(Model& model, const SessionParams& params) : model_(model), params_(params) {
  if (params_.n_ctx <= 0)
    fail(ErrorKind::InvalidArgument, "context size {} must be > 0", params_.n_ctx);
  if (params_.n_batch <= 0 || params_.n_ubatch <= 0)
    fail(ErrorKind::InvalidArgument, "batch sizes -b {} / -ub {} must be > 0", params_.n_batch,
         params_.n_ubatch);
  if (params_.n_threads <= 0)
    fail(ErrorKind::InvalidArgument, "thread count {} must be > 0", params_.n_threads);
  for (GgmlType t : {params_.type_k, params_.type_v})
    if (!kv_cache_type_supported(t))
      fail(ErrorKind::InvalidArgument, "KV cache type {} is not supported (use f32, f16 or q8_0)",
           type_name(t));
  const HParams& hp = model_.hparams();
  check_kv_cache_type_fits("SessionParams::type_k", params_.type_k, hp.head_dim, hp.n_kv_embd());
  check_kv_cache_type_fits("SessionParams::type_v", params_.type_v, hp.head_dim, hp.n_kv_embd());
  // As in llama.cpp, a micro-batch never exceeds the logical batch.
  params_.n_ubatch = std::min(params_.n_ubatch, params_.n_batch);
  if (params_.fusion.qkv) model_.prepare_fused_qkv();

  cpu::CpuBackendOptions bo;
  bo.n_threads = params_.n_threads;
  backend_ = std::make_unique<cpu::CpuBackend>(bo);
  cache_ = std::make_unique<GraphCache>();
  cache_->allocator().set_planner(params_.planner);
  cache_->allocator().set_backend(*backend_);
  sched_ = std::make_unique<Scheduler>(cache_->allocator());

  positions_.reserve(params_.n_ubatch);
  ub_rows_.reserve(params_.n_ubatch);
  logits_.reserve(static_cast<size_t>(model_.hparams().n_vocab));
}

Session::~Session() = default;

std::span<const float> Session::eval(std::span<const int32_t> tokens, int64_t start_pos,
                                     std::span<const int32_t> out_rows) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail(ErrorKind::InvalidArgument, "eval: no tokens");
  if (start_pos < 0 || start_pos + n > params_.n_ctx)
    fail(ErrorKind::InvalidArgument,
         "{} tokens at position {} do not fit in the context of {} tokens (raise -c, up to the "
         "model's training context {})",
         n, start_pos, params_.n_ctx, model_.hparams().n_ctx_train);
  for (size_t i = 0; i < out_rows.size(); ++i) {
    if (out_rows[i] < 0 || out_rows[i] >= n || (i > 0 && out_rows[i] <= out_rows[i - 1]))
      fail(ErrorKind::InvalidArgument, "eval: output rows must be increasing indices in [0, {})",
           n);
  }
  const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  // Grows only when more rows are asked for than ever before (warm-up), never per decode step.
  if (logits_.size() < out_rows.size() * n_vocab) logits_.resize(out_rows.size() * n_vocab);
  n_logit_rows_ = 0;

  size_t next_row = 0;
  for (int64_t b = 0; b < n; b += params_.n_ubatch) {
    const int64_t e = std::min<int64_t>(n, b + params_.n_ubatch);
    ub_rows_.clear();
    while (next_row < out_rows.size() && out_rows[next_row] < e)
      ub_rows_.push_back(static_cast<int32_t>(out_rows[next_row++] - b));
    run_ubatch(tokens.subspan(b, e - b), start_pos + b, ub_rows_);
  }
  return std::span<const float>(logits_.data(), n_logit_rows_ * n_vocab);
}

void Session::run_ubatch(std::span<const int32_t> tokens, int64_t start_pos,
                         std::span<const int32_t> rows) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const bool want = !rows.empty();
  // A graph always has a logits output; when this micro-batch needs none, compute its last row
  // and drop it.
  const int32_t last = static_cast<int32_t>(T - 1);
  std::span<const int32_t> ids = want ? rows : std::span<const int32_t>(&last, 1);

  GraphParams gp;
  gp.n_tokens = T;
  gp.n_outputs = static_cast<int64_t>(ids.size());
  gp.type = GraphType::Causal;
  gp.cparams.n_ctx = params_.n_ctx;
  gp.cparams.type_k = params_.type_k;
  gp.cparams.type_v = params_.type_v;
  gp.cparams.n_ubatch = params_.n_ubatch;
  gp.cparams.fusion = params_.fusion;
  gp.cparams.backend = BackendKind::Cpu;
  if (!cache_->try_reuse(gp)) cache_->replace_graph(model_.build_graph(gp), gp);
  const Graph& g = *cache_->graph();
  GraphAllocator& alloc = cache_->allocator();

  positions_.resize(static_cast<size_t>(T));  // within reserved capacity after warm-up
  for (int64_t i = 0; i < T; ++i) positions_[i] = static_cast<int32_t>(start_pos + i);
  alloc.fill_input_i32(g, kInTokens, tokens);
  alloc.fill_input_i32(g, kInPositions, positions_);
  alloc.fill_input_i32(g, kInOutIds, ids);
  sched_->execute(g);

  if (!want) return;
  const std::span<const float> out = alloc.node_f32(g.outputs()[0]);
  const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  MINFER_ASSERT(out.size() >= ids.size() * n_vocab);
  std::memcpy(logits_.data() + n_logit_rows_ * n_vocab, out.data(),
              ids.size() * n_vocab * sizeof(float));
  n_logit_rows_ += ids.size();
}

uint64_t Session::kv_bytes() const {
  return cache_->allocator().kv_bytes();
}

uint64_t Session::compute_bytes() const {
  const uint64_t pool = backend_->pool_bytes();
  const uint64_t kv = kv_bytes();
  return pool > kv ? pool - kv : 0;
}

uint64_t Session::n_graph_builds() const {
  return cache_->n_builds();
}
uint64_t Session::n_graph_reuses() const {
  return cache_->n_reuses();
}

MemReport Session::mem_report() const {
  MemReport r;
  r.kv_bytes = kv_bytes();
  r.compute_bytes = compute_bytes();
  const AllocStats st = cache_->allocator().stats();
  const bool arena = params_.planner == PlannerKind::Arena;
  r.kv_type_k = params_.type_k;
  r.kv_type_v = params_.type_v;
  r.detail = std::string(arena ? "planner arena: arena " : "planner size-class: plan ") +
             std::to_string(st.plan_bytes[static_cast<size_t>(BackendKind::Cpu)]) + " B for " +
             std::to_string(st.n_intervals) + " intervals in " + std::to_string(st.n_buffers) +
             " buffers (" + std::to_string(st.n_inplace) + " in place), naive " +
             std::to_string(st.naive_bytes) + " B";
  if (arena) {
    r.detail += ", lower bound " +
                std::to_string(st.lower_bound_bytes[static_cast<size_t>(BackendKind::Cpu)]) +
                " B, planned in " + std::to_string(static_cast<int64_t>(st.plan_us)) + " us";
  }
  return r;
}

}  // namespace minfer
