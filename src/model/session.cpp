#include "model/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "alloc/arena.h"
#include "alloc/liveness.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/sim/sim_backend.h"
#include "common/error.h"
#include "common/quant.h"
#include "kv/cache_type.h"
#include "model/rope_params.h"
#include "sched/assign.h"
#include "sched/scheduler.h"

namespace minfer {
namespace {

// Graph shape bucket for n rows: powers of two up to 64 (decode batches, where sequences join
// and leave), then multiples of 32 (prefill: at most 31 padded rows), never above cap unless n
// itself is.
constexpr size_t kGraphCacheCapacity = 32;

int64_t bucket(int64_t n, int64_t cap) {
  int64_t b = 1;
  if (n <= 64) {
    while (b < n) b <<= 1;
  } else {
    b = (n + 31) / 32 * 32;
  }
  return std::max(n, std::min(b, cap));
}

void check_params(const SessionParams& p, const HParams& hp) {
  if (p.n_ctx <= 0) fail(ErrorKind::InvalidArgument, "context size {} must be > 0", p.n_ctx);
  if (p.n_batch <= 0 || p.n_ubatch <= 0)
    fail(ErrorKind::InvalidArgument, "batch sizes -b {} / -ub {} must be > 0", p.n_batch,
         p.n_ubatch);
  if (p.n_threads <= 0)
    fail(ErrorKind::InvalidArgument, "thread count {} must be > 0", p.n_threads);
  if (p.n_seq_max <= 0)
    fail(ErrorKind::InvalidArgument, "parallel sequences -np {} must be > 0", p.n_seq_max);
  if (p.kv_block_size <= 0 || p.kv_block_size > 4096)
    fail(ErrorKind::InvalidArgument, "--kv-block {} must be in [1, 4096]", p.kv_block_size);
  if (p.n_ctx_seq < 0 || p.n_ctx_seq > p.n_ctx)
    fail(ErrorKind::InvalidArgument, "per-sequence context {} must be in [0, -c {}]", p.n_ctx_seq,
         p.n_ctx);
  for (GgmlType t : {p.type_k, p.type_v})
    if (!kv_cache_type_supported(t))
      fail(ErrorKind::InvalidArgument, "KV cache type {} is not supported (use f32, f16 or q8_0)",
           type_name(t));
  check_kv_cache_type_fits("SessionParams::type_k", p.type_k, hp.head_dim, hp.n_kv_embd());
  check_kv_cache_type_fits("SessionParams::type_v", p.type_v, hp.head_dim, hp.n_kv_embd());
  if (p.device != BackendKind::Cpu && p.device != BackendKind::Sim)
    fail(ErrorKind::InvalidArgument, "SessionParams::device {} is not a device",
         backend_name(p.device));
  if (p.n_gpu_layers < 0) fail(ErrorKind::InvalidArgument, "-ngl {} must be >= 0", p.n_gpu_layers);
}

kv::CacheParams cache_params(const SessionParams& p, const HParams& hp, int64_t n_ctx_seq,
                             int64_t n_layer) {
  kv::CacheParams cp;
  cp.n_layer = n_layer;
  cp.n_kv_embd = hp.n_kv_embd();
  cp.type_k = p.type_k;
  cp.type_v = p.type_v;
  cp.n_ctx = p.n_ctx;
  cp.block_size = p.kv_block_size;
  cp.n_seq_max = p.n_seq_max;
  cp.n_ctx_seq = n_ctx_seq;
  cp.prefix_cache = p.prefix_cache;
  return cp;
}

}  // namespace

SessionFootprint session_footprint(const Model& model, const SessionParams& params) {
  const HParams& hp = model.hparams();
  check_params(params, hp);
  const int64_t n_ctx_seq = params.n_ctx_seq > 0 ? params.n_ctx_seq : params.n_ctx;
  SessionFootprint f;
  // With a device the K/V are two caches (device layers, CPU layers), each page-rounded.
  const int64_t n_dev =
      params.device == BackendKind::Cpu ? 0 : std::min<int64_t>(params.n_gpu_layers, hp.n_layer);
  for (const int64_t layers : {n_dev, hp.n_layer - n_dev})
    if (layers > 0) f.kv += kv::cache_reserved_bytes(cache_params(params, hp, n_ctx_seq, layers));
  // The largest micro-batch: n_ubatch tokens of one sequence; its graph has the biggest arena
  // (a decode bucket of n_seq_max rows is smaller). Planned as the Session would, not allocated.
  GraphParams gp;
  gp.n_tokens = std::min(params.n_ubatch, params.n_batch);
  gp.n_outputs = 1;
  gp.n_seqs = 1;
  gp.cparams.n_ctx =
      ((params.n_ctx + params.kv_block_size - 1) / params.kv_block_size + 1) * params.kv_block_size;
  gp.cparams.type_k = params.type_k;
  gp.cparams.type_v = params.type_v;
  gp.cparams.n_ubatch = static_cast<int32_t>(gp.n_tokens);
  gp.cparams.kv_block_size = params.kv_block_size;
  gp.cparams.kv_table_stride = (n_ctx_seq + params.kv_block_size - 1) / params.kv_block_size;
  gp.cparams.n_ctx_seq = n_ctx_seq;
  // Without fusion here: the fused weights need not exist yet, and the fused graph's arena is
  // no larger (its epilogue works in place).
  gp.cparams.fusion = FusionToggles{false, params.fusion.ffn, false};
  Graph g = model.build_graph(gp);
  if (params.device != BackendKind::Cpu) {
    // Placed as the Session places it, with the CPU running everything it is given and the
    // device its support table; the staging windows (a few activations) are not counted.
    std::vector<SupportMask> t(g.size(), support_bit(BackendKind::Cpu));
    for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i)
      if (sim_supports(g.node(i))) t[static_cast<size_t>(i)] |= support_bit(params.device);
    const AssignParams ap{params.device, params.n_gpu_layers, static_cast<int32_t>(hp.n_layer)};
    apply_assignment(g, assign_backends(g, ap, t));
  }
  f.compute = plan_arena(compute_liveness(g)).total_arena_bytes();
  if (params.fusion.qkv) {
    // [Wq|Wk|Wv] per layer, copied only where it is not packed (phi3's is the file's), plus
    // the f32 bias.
    const int64_t width = hp.n_q() + 2 * hp.n_kv_embd();
    for (const LayerWeights& w : model.weights().layers) {
      const bool packs =
          params.repack_weights &&
          cpu::PackedWeights::packed_bytes(cpu::SimdLevel::kBest, w.wq.type, hp.n_embd, width) > 0;
      if (!packs && !has_data(w.wqkv))
        f.fused_weights += row_size(w.wq.type, hp.n_embd) * static_cast<uint64_t>(width);
      f.fused_weights += 4 * static_cast<uint64_t>(width);
    }
  }
  if (params.fusion.gate_up) {
    // [W_gate | W_up] per layer, copied only where it is not packed (phi3's is the file's).
    for (const LayerWeights& w : model.weights().layers) {
      const bool packs = params.repack_weights &&
                         cpu::PackedWeights::packed_bytes(cpu::SimdLevel::kBest, w.ffn_gate.type,
                                                          hp.n_embd, 2 * hp.n_ff) > 0;
      if (!packs && w.ffn_gate.data + w.ffn_gate.n_bytes != w.ffn_up.data)
        f.fused_weights += w.ffn_gate.n_bytes + w.ffn_up.n_bytes;
    }
  }
  return f;
}

Session::Session(Model& model, const SessionParams& params)
    : model_(model), params_(params), embeddings_(params.embeddings) {
  const HParams& hp = model_.hparams();
  check_params(params_, hp);
  n_ctx_seq_ = params_.n_ctx_seq > 0 ? params_.n_ctx_seq : params_.n_ctx;
  // As in llama.cpp, a micro-batch never exceeds the logical batch.
  params_.n_ubatch = std::min(params_.n_ubatch, params_.n_batch);
  if (params_.fusion.qkv) model_.prepare_fused_qkv();
  if (params_.fusion.gate_up) model_.prepare_fused_ffn();

  if (params_.device != BackendKind::Cpu)
    n_dev_layers_ = static_cast<int32_t>(std::min<int64_t>(params_.n_gpu_layers, hp.n_layer));
  if (n_dev_layers_ > 0)
    kv_dev_ = std::make_unique<kv::Cache>(cache_params(params_, hp, n_ctx_seq_, n_dev_layers_));
  if (n_dev_layers_ < hp.n_layer)
    kv_ = std::make_unique<kv::Cache>(
        cache_params(params_, hp, n_ctx_seq_, hp.n_layer - n_dev_layers_));

  cpu::CpuBackendOptions bo;
  bo.n_threads = params_.n_threads;
  bo.simd = params_.simd;
  backend_ = std::make_unique<cpu::CpuBackend>(bo);
  if (params_.repack_weights) {
    // A Model holds one packed copy, and packing released the originals' pages: a Session at
    // another level (another kernel table: kBest and the level it resolves to are the same one)
    // would find no layout it can read.
    if (model_.packed() && std::string_view(cpu::simd_level_name(model_.packed()->simd())) !=
                               cpu::simd_level_name(params_.simd))
      fail(ErrorKind::InvalidArgument,
           "the model's weights are packed for SIMD level {}; a session at {} needs its own Model",
           cpu::simd_level_name(model_.packed()->simd()), cpu::simd_level_name(params_.simd));
    model_.prepare_packed(backend_->simd(), params_.repack_progress);
    backend_->set_packed_weights(model_.packed());
  }
  // Fused QKV and gate-up weights this backend will not find packed get their raw bytes now.
  model_.make_fused_readable(params_.repack_weights ? model_.packed() : nullptr, backend_->simd());

  // A tied embedding's pages left with the repack (this Session's or an earlier one's).
  backend_->set_row_source(model_.embedding_row_source());
  if (params_.device == BackendKind::Sim) {
    // The simulated device queues nodes and runs them at sync() with the CPU's kernels (so the
    // logits are the CPU's to the bit); its support table leaves norms and row gathers to the
    // CPU, so splits happen inside a layer.
    cpu::CpuBackend* cpu = backend_.get();
    device_ = std::make_unique<SimBackend>(
        [cpu](const NodeArgs& a) {
          cpu->execute(a);
          cpu->sync();
        },
        [cpu](const Node& n) { return cpu->supports(n) && sim_supports(n); });
  }
  // One graph per shape bucket in use (decode: a handful), each with its saved plan.
  cache_ = std::make_unique<GraphCache<GraphParams>>(kGraphCacheCapacity);
  cache_->allocator().set_planner(params_.planner);
  cache_->allocator().set_backend(*backend_);
  if (device_) cache_->allocator().set_backend(*device_);
  cache_->allocator().set_kv_source(this);
  sched_ = std::make_unique<Scheduler>(cache_->allocator());

  const auto ub = static_cast<size_t>(bucket(params_.n_ubatch, params_.n_ubatch));
  for (auto* v : {&tokens_, &positions_, &slots_, &seq_rows_, &out_ids_}) v->reserve(ub);
  tables_.reserve(std::min(ub, static_cast<size_t>(params_.n_seq_max)) *
                  static_cast<size_t>(kv().max_blocks_per_seq()));
  row_of_seq_.assign(static_cast<size_t>(params_.n_seq_max), -1);
  // The placement's tables hold every batch sequence's whole table: reserve the most they
  // can reach, so a sequence growing longer than before allocates nothing.
  const auto n_seq = static_cast<size_t>(params_.n_seq_max);
  placement_.slots.reserve(static_cast<size_t>(params_.n_batch));
  placement_.seq_ids.reserve(n_seq);
  placement_.seq_lens.reserve(n_seq);
  placement_.table_offset.reserve(n_seq + 1);
  placement_.tables.reserve(n_seq * static_cast<size_t>(kv().max_blocks_per_seq()));
  if (kv_dev_ && kv_) {
    placement_cpu_.slots.reserve(static_cast<size_t>(params_.n_batch));
    placement_cpu_.seq_ids.reserve(n_seq);
    placement_cpu_.seq_lens.reserve(n_seq);
    placement_cpu_.table_offset.reserve(n_seq + 1);
    placement_cpu_.tables.reserve(n_seq * static_cast<size_t>(kv().max_blocks_per_seq()));
  }
  ub_seqs_.reserve(static_cast<size_t>(params_.n_seq_max));
  logits_.reserve(static_cast<size_t>(hp.n_vocab));
}

Session::~Session() = default;

KvLayerRef Session::kv_layer(int32_t layer) const {
  const kv::LayerView v =
      layer < n_dev_layers_ ? kv_dev_->layer(layer) : kv_->layer(layer - n_dev_layers_);
  return KvLayerRef{v.k, v.v, v.block_size, static_cast<int64_t>(v.block_stride)};
}

std::span<const float> Session::eval(std::span<const int32_t> tokens, int64_t start_pos,
                                     std::span<const int32_t> out_rows) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail(ErrorKind::InvalidArgument, "eval: no tokens");
  if (start_pos < 0 || start_pos + n > n_ctx_seq_)
    fail(ErrorKind::InvalidArgument,
         "{} tokens at position {} do not fit in the context of {} tokens (raise -c, up to the "
         "model's training context {})",
         n, start_pos, n_ctx_seq_, model_.hparams().n_ctx_train);
  for (size_t i = 0; i < out_rows.size(); ++i) {
    if (out_rows[i] < 0 || out_rows[i] >= n || (i > 0 && out_rows[i] <= out_rows[i - 1]))
      fail(ErrorKind::InvalidArgument, "eval: output rows must be increasing indices in [0, {})",
           n);
  }
  if (start_pos > kv().seq_len(0))
    fail(ErrorKind::InvalidArgument, "eval: position {} skips past the {} cached tokens", start_pos,
         kv().seq_len(0));
  // Overwriting (a rewind: bench repetitions, a regenerated reply) drops the old tail first,
  // so its blocks serve the new rows; decode() alone would keep them until the batch applies.
  if (start_pos < kv().seq_len(0)) seq_rm(0, start_pos, -1);
  Batch& b = eval_batch_;  // capacity kept across calls
  b.clear();
  size_t next = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool want = next < out_rows.size() && out_rows[next] == i;
    if (want) ++next;
    b.add(tokens[static_cast<size_t>(i)], static_cast<int32_t>(start_pos + i), 0, want);
  }
  return decode(b);
}

std::span<const float> Session::decode(const Batch& b) {
  const size_t n = b.size();
  if (n == 0) fail(ErrorKind::InvalidArgument, "decode: empty batch");
  if (b.pos.size() != n || b.seq.size() != n || b.logits.size() != n)
    fail(ErrorKind::InvalidArgument, "decode: batch arrays differ in length ({} {} {} {})", n,
         b.pos.size(), b.seq.size(), b.logits.size());
  const int64_t n_vocab = model_.hparams().n_vocab;
  const int64_t row = n_out_row();
  size_t n_out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (b.token[i] < 0 || b.token[i] >= n_vocab)
      fail(ErrorKind::InvalidArgument, "decode: token id {} (batch row {}) outside [0, {})",
           b.token[i], i, n_vocab);
    n_out += b.logits[i] ? 1 : 0;
  }
  // Grows only when more rows are asked for than ever before (warm-up), never per decode step.
  if (logits_.size() < n_out * static_cast<size_t>(row))
    logits_.resize(n_out * static_cast<size_t>(row));
  n_logit_rows_ = 0;
  logits_view_ = {};

  place_all(b);  // throws with the caches unchanged
  try {
    const auto ub = static_cast<size_t>(params_.n_ubatch);
    for (size_t s = 0; s < n; s += ub) run_ubatch(b, s, std::min(n, s + ub));
  } catch (...) {
    kv().rollback(placement_);
    if (kv_dev_ && kv_) kv_->rollback(placement_cpu_);
    throw;
  }
  kv().apply(placement_);
  if (kv_dev_ && kv_) kv_->apply(placement_cpu_);
  if (!logits_view_.empty()) return logits_view_;
  return std::span<const float>(logits_.data(), n_logit_rows_ * static_cast<size_t>(row));
}

int64_t Session::n_out_row() const {
  return embeddings_ ? model_.hparams().n_embd : model_.hparams().n_vocab;
}

// Both KV parts get the same calls in the same order, so their (deterministic) bookkeeping
// hands out the same slots and tables: the graph's inputs are valid for both.
void Session::place_all(const Batch& b) {
  kv().place(b.token, b.pos, b.seq, placement_);  // reused: its vectors keep their capacity
  if (!(kv_dev_ && kv_)) return;
  try {
    kv_->place(b.token, b.pos, b.seq, placement_cpu_);
  } catch (...) {
    kv().rollback(placement_);
    throw;
  }
  MINFER_ASSERT(
      placement_cpu_.slots == placement_.slots && placement_cpu_.tables == placement_.tables,
      "session: the device and CPU KV caches disagree on slots");
}

// The model's graph, then (with a device) the backend assignment pass: per-layer placement as
// -ngl, the device's support table, fewest cuts (sched/assign.h).
Graph Session::build_assigned(const GraphParams& gp) const {
  Graph g = model_.build_graph(gp);
  if (!device_) return g;
  const HParams& hp = model_.hparams();
  const AssignParams ap{params_.device, params_.n_gpu_layers, static_cast<int32_t>(hp.n_layer)};
  const Assignment a = assign_backends(g, ap, support_table(g, {backend_.get(), device_.get()}));
  for (size_t l = 0; l < a.kv_backend.size(); ++l) {
    if (a.kv_backend[l] != kv_backend(static_cast<int32_t>(l)))
      fail(ErrorKind::Unsupported, "session: layer {}'s K/V are on {} but its KV ops run on {}", l,
           backend_name(kv_backend(static_cast<int32_t>(l))), backend_name(a.kv_backend[l]));
  }
  apply_assignment(g, a);
  return g;
}

GraphParams Session::ubatch_params(int64_t n_tok, int64_t n_out, int64_t n_seq) const {
  GraphParams gp;
  gp.n_tokens = n_tok;
  gp.n_outputs = n_out;
  gp.n_seqs = n_seq;
  gp.type = embeddings_ ? GraphType::Embeddings : GraphType::Causal;
  const kv::CacheParams& cp = kv().params();
  gp.cparams.n_ctx = kv().n_slots();
  gp.cparams.type_k = cp.type_k;
  gp.cparams.type_v = cp.type_v;
  gp.cparams.n_ubatch = params_.n_ubatch;
  gp.cparams.kv_block_size = cp.block_size;
  gp.cparams.kv_table_stride = kv().max_blocks_per_seq();
  gp.cparams.n_ctx_seq = n_ctx_seq_;
  gp.cparams.fusion = params_.fusion;
  gp.cparams.backend = params_.device;
  return gp;
}

// Block tables of this micro-batch's sequences (rows in ub_seqs_ order): the tables the whole
// batch leaves behind (Placement::table), so a later micro-batch sees the rows an earlier one
// wrote. A token reads its row only up to its own position, so the rest of a row and the
// padding rows of the input (padding tokens read row 0) are never read and stay unfilled.
void Session::fill_tables() {
  const auto stride = static_cast<size_t>(kv().max_blocks_per_seq());
  tables_.resize(ub_seqs_.size() * stride);  // within reserved capacity after warm-up
  for (size_t r = 0; r < ub_seqs_.size(); ++r) {
    const std::span<const int32_t> t = placement_.table(ub_seqs_[r]);
    MINFER_ASSERT(t.size() <= stride, "session: block table longer than its row");
    std::copy(t.begin(), t.end(), tables_.begin() + static_cast<ptrdiff_t>(r * stride));
  }
}

void Session::run_ubatch(const Batch& b, size_t begin, size_t end) {
  const std::span<const int32_t> slots = placement_.slots;
  const auto T = static_cast<int64_t>(end - begin);
  // Table rows: one per distinct sequence, in order of first appearance.
  ub_seqs_.clear();
  seq_rows_.clear();
  tokens_.clear();
  positions_.clear();
  slots_.clear();
  out_ids_.clear();
  for (size_t i = begin; i < end; ++i) {
    int32_t& r = row_of_seq_[static_cast<size_t>(b.seq[i])];
    if (r < 0) {
      r = static_cast<int32_t>(ub_seqs_.size());
      ub_seqs_.push_back(b.seq[i]);
    }
    seq_rows_.push_back(r);
    tokens_.push_back(b.token[i]);
    positions_.push_back(b.pos[i]);
    slots_.push_back(slots[i]);
    if (b.logits[i]) out_ids_.push_back(static_cast<int32_t>(i - begin));
  }
  const auto n_out = static_cast<int64_t>(out_ids_.size());
  // Buckets only when sequences share the micro-batch: one sequence (run, chat, a lone server
  // slot, prefill) keeps its exact shape, so its arithmetic is that of eager mode to the bit
  // (a padded matmul may sum in another order) and no row is computed for nothing.
  const bool shared = ub_seqs_.size() > 1;
  const int64_t Tb = shared ? bucket(T, params_.n_ubatch) : T;
  const int64_t Sb = shared ? std::min(bucket(static_cast<int64_t>(ub_seqs_.size()), Tb), Tb) : 1;
  // A graph always has a logits output; when this micro-batch needs none, compute its last row
  // and drop it. Padded output rows repeat a real one.
  if (out_ids_.empty()) out_ids_.push_back(static_cast<int32_t>(T - 1));
  const auto n_ids = static_cast<int64_t>(out_ids_.size());
  const int64_t Ob = shared ? std::min(bucket(n_ids, Tb), Tb) : n_ids;
  const int32_t pad_out = out_ids_.back();
  while (static_cast<int64_t>(out_ids_.size()) < Ob) out_ids_.push_back(pad_out);
  // Padding tokens: token 0 at position 0 of the first row's sequence, stored nowhere.
  for (int64_t i = T; i < Tb; ++i) {
    tokens_.push_back(0);
    positions_.push_back(0);
    slots_.push_back(-1);
    seq_rows_.push_back(0);
  }
  fill_tables();
  for (int32_t s : ub_seqs_) row_of_seq_[static_cast<size_t>(s)] = -1;

  const GraphParams gp = ubatch_params(Tb, Ob, Sb);
  if (!cache_->try_reuse(gp)) cache_->replace_graph(build_assigned(gp), gp);
  const Graph& g = *cache_->graph();
  GraphAllocator& alloc = cache_->allocator();
  alloc.fill_input_i32(g, kInTokens, tokens_);
  alloc.fill_input_i32(g, kInPositions, positions_);
  alloc.fill_input_i32(g, kInOutIds, out_ids_);
  alloc.fill_input_i32(g, kInKvSlots, slots_);
  alloc.fill_input_i32(g, kInKvSeq, seq_rows_);
  alloc.fill_input_i32(g, kInKvTables, tables_);
  sched_->execute(g);

  if (n_out == 0) return;
  const auto width = static_cast<size_t>(n_out_row());  // n_vocab, or n_embd: embeddings
  const auto rows = static_cast<size_t>(n_out);
  const NodeId out = g.outputs()[0];
  // The whole batch in this one micro-batch (every decode step) with the logits in CPU memory:
  // hand out the graph's own output (pinned live to the graph's end, untouched until the next
  // decode runs a graph) instead of copying n_vocab floats per row (600 KB for Qwen2) into
  // logits_. The CPU backend runs synchronously, so the host view needs no sync. Padded
  // output rows follow the real ones.
  if (begin == 0 && end == b.size() && g.node(out).backend == BackendKind::Cpu) {
    logits_view_ = alloc.node_f32(out).first(rows * width);
    n_logit_rows_ = rows;
    return;
  }
  MINFER_ASSERT(logits_.size() >= (n_logit_rows_ + rows) * width);
  // Through the backend (sync + copy), not a host view: the logits may sit in device memory.
  alloc.copy_node_to_host(out, logits_.data() + n_logit_rows_ * width,
                          rows * width * sizeof(float));
  n_logit_rows_ += rows;
}

// ---- sequences ----

// Every mutating call goes to both KV parts (see the header): the first one validates (it
// throws with the cache unchanged), the second then gets exactly the same call.
int64_t Session::seq_len(int32_t seq) const {
  return kv().seq_len(seq);
}
void Session::seq_rm(int32_t seq, int64_t p0, int64_t p1) {
  each_kv([&](kv::Cache& c, int32_t) { c.seq_rm(seq, p0, p1); });
}
void Session::seq_cp(int32_t src, int32_t dst) {
  each_kv([&](kv::Cache& c, int32_t) { c.seq_cp(src, dst); });
}
void Session::seq_keep(int32_t seq) {
  each_kv([&](kv::Cache& c, int32_t) { c.seq_keep(seq); });
}
void Session::clear() {
  each_kv([&](kv::Cache& c, int32_t) { c.clear(); });
}
int64_t Session::reuse_prefix(int32_t seq, std::span<const int32_t> tokens, int64_t max_tokens) {
  int64_t got = -1;
  each_kv([&](kv::Cache& c, int32_t) {
    const int64_t n = c.reuse_prefix(seq, tokens, max_tokens);
    MINFER_ASSERT(got < 0 || got == n, "session: the KV parts reused different prefixes");
    got = n;
  });
  return got;
}

int64_t Session::cached_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const {
  return kv().cached_prefix(tokens, max_tokens);
}

void Session::seq_shift(int32_t seq, int64_t n_keep, int64_t n_discard) {
  // Scheduler::execute ends with every backend synchronised, so the device's rows are final.
  each_kv([&](kv::Cache& c, int32_t first_layer) {
    c.seq_shift(seq, n_keep, n_discard,
                [this, first_layer](int32_t layer, uint8_t* k, int64_t n_rows, int32_t delta) {
                  rerotate(first_layer + layer, k, n_rows, delta);
                });
  });
}

// K rows were roped at their old positions; rotating by delta more gives the rotation at the
// new ones (RoPE(p + d) = R(d) RoPE(p)), so no position is needed. Rows of f16 / q8_0 are
// widened, rotated in f32 and stored back with the cache's own writer.
void Session::rerotate(int32_t layer, uint8_t* k, int64_t n_rows, int32_t delta) {
  const HParams& hp = model_.hparams();
  const int64_t nkv = hp.n_kv_embd();
  const GgmlType t = params_.type_k;
  std::vector<float> rows(static_cast<size_t>(nkv * n_rows));
  const size_t row_bytes = row_size(t, nkv);
  for (int64_t r = 0; r < n_rows; ++r)
    dequantize_row(t, k + r * row_bytes, rows.data() + r * nkv, nkv);
  std::vector<int32_t> pos(static_cast<size_t>(n_rows), delta);
  cpu::Arena arena;  // a context shift is rare: its scratch need not outlive it
  cpu::Exec ex;
  ex.arena = &arena;
  // Per layer: gemma's windowed layers rope with their own base.
  cpu::RopeParams rp = rope_kernel_params(hp, model_.weights(), n_ctx_seq_, layer);
  // Rotating by delta must not scale again: the rows already carry the magnitude (YaRN's).
  rp.attn_factor =
      rp.ext_factor != 0.0f ? 1.0f / (1.0f + 0.1f * std::log(1.0f / rp.freq_scale)) : 1.0f;
  const cpu::HeadLayout lay{hp.head_dim, hp.n_head_kv, n_rows, 0, 0};
  cpu::rope(ex, rows.data(), lay, rows.data(), lay, pos.data(), rp);
  std::vector<int32_t> slot(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) slot[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  std::vector<uint8_t> vdummy(row_bytes * static_cast<size_t>(n_rows));
  cpu::kv_store(ex, rows.data(), nkv, rows.data(), nkv, nkv, n_rows, slot.data(),
                cpu::KvRegions{k, vdummy.data(), t, t}, n_rows);
}

KvReport Session::kv_report() const {
  kv::CacheStats st = kv().stats();
  if (kv_dev_ && kv_) {  // block counts are the same in both parts; bytes add up
    const kv::CacheStats cs = kv_->stats();
    st.reserved_bytes += cs.reserved_bytes;
    st.committed_bytes += cs.committed_bytes;
  }
  KvReport r;
  r.n_seq_max = params_.n_seq_max;
  r.block_size = params_.kv_block_size;
  r.blocks_total = st.n_blocks;
  r.blocks_used = st.blocks_used;
  r.blocks_cached = st.blocks_cached;
  r.blocks_free = st.blocks_free;
  r.reserved_bytes = st.reserved_bytes;
  r.committed_bytes = st.committed_bytes;
  r.tokens_held = st.tokens_held;
  r.prefix_hits = st.prefix_hits;
  r.prefix_lookups = st.prefix_lookups;
  return r;
}

uint64_t Session::kv_bytes() const {
  // K/V rows of the whole pool, as llama.cpp reports its KV buffer; the region's page rounding
  // and null block are in the reserved figure, what is resident in the committed one.
  const kv::CacheParams& p = kv().params();
  const int64_t blocks = (p.n_ctx + p.block_size - 1) / p.block_size;
  return kv_cache_bytes(model_.hparams().n_layer, p.n_kv_embd, blocks * p.block_size, p.type_k,
                        p.type_v);
}

uint64_t Session::compute_bytes() const {
  // The KV cache has its own region now; the backends' pools hold activations only.
  return backend_->pool_bytes() + (device_ ? device_->pool_bytes() : 0);
}

const Graph* Session::last_graph() const {
  return cache_->graph();
}

void Session::set_profile(cpu::OpProfile* p) {
  backend_->set_profile(p);
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
  if (const cpu::PackedWeights* pw = params_.repack_weights ? model_.packed() : nullptr)
    r.detail += "\npacked weights: " + std::to_string(pw->bytes()) + " B in " +
                std::to_string(pw->count()) + " matrices (load-time repack; originals' pages " +
                "released)";
  kv::CacheStats ks = kv().stats();
  if (kv_dev_ && kv_) {  // both parts' bytes (block counts are the same)
    ks.reserved_bytes += kv_->stats().reserved_bytes;
    ks.committed_bytes += kv_->stats().committed_bytes;
  }
  if (device_) {
    const uint64_t dev_kv = kv_dev_ ? kv_dev_->stats().reserved_bytes : 0;
    r.detail += "\ndevice " + std::string(backend_name(params_.device)) + " (-ngl " +
                std::to_string(params_.n_gpu_layers) + "): " + std::to_string(n_dev_layers_) +
                " layers' K/V there (" + std::to_string(dev_kv) + " B reserved), pool " +
                std::to_string(device_->pool_bytes()) + " B, arena " +
                std::to_string(st.plan_bytes[static_cast<size_t>(params_.device)]) +
                " B, staging " + std::to_string(st.staging_bytes) + " B";
  }
  r.detail += "\nKV cache: " + std::to_string(ks.reserved_bytes) + " B reserved, " +
              std::to_string(ks.committed_bytes) + " B committed (" +
              std::to_string(ks.blocks_used) + " blocks used, " + std::to_string(ks.blocks_cached) +
              " cached, block " + std::to_string(ks.block_bytes) + " B)";
  return r;
}

}  // namespace minfer
