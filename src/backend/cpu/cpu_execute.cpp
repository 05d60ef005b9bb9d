// CpuBackend::execute: reads a node's shape and params from the graph and calls the kernel.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"

namespace minfer::cpu {
namespace {

const int32_t* as_i32(const void* p) {
  return static_cast<const int32_t*>(p);
}
const float* as_f32(const void* p) {
  return static_cast<const float*>(p);
}

// Floats between consecutive ne[1] rows of a source (honours strided views).
int64_t row_stride(const Node& s) {
  if (s.op == Op::View && s.p.view_row_stride != 0) return s.p.view_row_stride;
  return s.ne[0];
}

// Layout of a source read as [head_dim, n_head, n_tok].
HeadLayout head_layout(const Node& s, int64_t head_dim, int64_t n_head, int64_t n_tok) {
  HeadLayout l{head_dim, n_head, n_tok, 0, 0};
  const int64_t rs = row_stride(s);
  if (s.ne[0] == head_dim) {  // rows are heads
    l.head_stride = rs;
    l.tok_stride = rs * n_head;
  } else {  // rows are tokens (2-D [n_head * head_dim (+ more), n_tok])
    l.head_stride = head_dim;
    l.tok_stride = rs;
  }
  return l;
}

// Splits a [.., n_tok] activation into heads of head_dim.
void heads_of(const Node& n, int64_t head_dim, int64_t* n_head, int64_t* n_tok) {
  *n_tok = n.ne[0] == head_dim ? n.ne[2] * n.ne[3] : n.ne[1] * n.ne[2] * n.ne[3];
  *n_head = n.n_elements() / (*n_tok * head_dim);
}

void require_f32(const Node& s, const char* what, const Node& n) {
  if (s.type != GgmlType::F32)
    fail(ErrorKind::Unsupported, "cpu: {} of node '{}' ({}) must be f32, got {}", what, n.name,
         op_name(n.op), type_name(s.type));
}

// What a per-op runner needs of the node being executed.
struct Call {
  const Exec& ex;
  const Graph& g;
  const Node& n;
  const NodeArgs& args;
  float* out;                   // args.out as f32
  const PackedWeights* packed;  // load-time packed weights, or nullptr
  const Node& src(size_t i) const { return g.node(n.src.at(i)); }
};

void run_get_rows(const Call& c, const RowSource& rs, std::vector<uint8_t>& scratch) {
  const Exec& ex = c.ex;
  const NodeArgs& args = c.args;
  float* out = c.out;
  const Node& t = c.src(0);
  const auto* table = static_cast<const uint8_t*>(args.src[0]);
  const auto* begin = static_cast<const uint8_t*>(rs.begin);
  if (rs.read && table >= begin && table < begin + rs.bytes) {
    get_rows_read(t.type, table, t.ne[0], t.ne[1], as_i32(args.src[1]), c.src(1).n_elements(), out,
                  rs.read, scratch);
    return;
  }
  get_rows(ex, t.type, table, t.ne[0], t.ne[1], as_i32(args.src[1]), c.src(1).n_elements(), out);
}

void run_rms_norm(const Call& c) {
  const Exec& ex = c.ex;
  const Node& n = c.n;
  const NodeArgs& args = c.args;
  float* out = c.out;
  const Node& x = c.src(0);
  const bool has_w = n.src.size() > 1 && n.src[1] != kNoNode && args.src[1] != nullptr;
  if (has_w) require_f32(c.src(1), "norm weight", n);
  rms_norm(ex, as_f32(args.src[0]), row_stride(x), has_w ? as_f32(args.src[1]) : nullptr, out,
           n.ne[0], n.ne[1] * n.ne[2] * n.ne[3], n.p.eps);
}

void run_add_mul(const Call& c) {
  const Exec& ex = c.ex;
  const Node& n = c.n;
  const NodeArgs& args = c.args;
  float* out = c.out;
  const Node& b = c.src(1);
  require_f32(b, "second operand", n);
  const int64_t rows = n.ne[1] * n.ne[2] * n.ne[3];
  MINFER_ASSERT(b.ne[0] == n.ne[0] && rows % (b.n_elements() / b.ne[0]) == 0,
                "add/mul: src1 must broadcast over rows");
  if (n.op == Op::Add)
    add(ex, as_f32(args.src[0]), as_f32(args.src[1]), out, n.ne[0], rows, b.n_elements() / b.ne[0]);
  else
    mul(ex, as_f32(args.src[0]), as_f32(args.src[1]), out, n.ne[0], rows, b.n_elements() / b.ne[0]);
}

void run_matmul(const Call& c) {
  const Exec& ex = c.ex;
  const Node& n = c.n;
  const NodeArgs& args = c.args;
  float* out = c.out;
  const Node& w = c.src(0);
  const Node& x = c.src(1);
  MatmulArgs a;
  a.wtype = w.type;
  a.w = args.src[0];
  a.n_in = w.ne[0];
  a.n_out = w.ne[1];
  a.x = as_f32(args.src[1]);
  a.ldx = row_stride(x);
  a.m = x.ne[1] * x.ne[2] * x.ne[3];
  a.y = out;
  a.ldy = n.ne[0];
  a.packed = c.packed ? c.packed->find(a.w) : nullptr;
  if (!matmul_supported(a.wtype))
    fail(ErrorKind::Unsupported, "cpu matmul '{}': weight type {} not supported", n.name,
         type_name(a.wtype));
  matmul(ex, a);
}

// The node's RoPE parameters; frequency factors (when present) are its last source.
RopeParams rope_params(const Node& n, const NodeArgs& args, int32_t n_rot) {
  RopeParams rp;
  rp.mode = n.p.rope_mode;
  rp.n_rot = n_rot;
  rp.freq_base = n.p.freq_base;
  rp.freq_scale = n.p.freq_scale;
  rp.ext_factor = n.p.rope_ext_factor;
  rp.attn_factor = n.p.rope_attn_factor;
  rp.beta_fast = n.p.rope_beta_fast;
  rp.beta_slow = n.p.rope_beta_slow;
  rp.n_ctx_orig = n.p.rope_n_ctx_orig;
  if (n.p.rope_freq_factors) rp.freq_factors = as_f32(args.src[n.src.size() - 1]);
  return rp;
}

void run_rope(const Call& c) {
  const Exec& ex = c.ex;
  const Node& n = c.n;
  const NodeArgs& args = c.args;
  float* out = c.out;
  const Node& x = c.src(0);
  const int64_t hd = n.p.head_dim > 0 ? n.p.head_dim : n.ne[0];
  int64_t nh, nt;
  heads_of(n, hd, &nh, &nt);
  const RopeParams rp = rope_params(n, args, n.p.n_rot > 0 ? n.p.n_rot : (int32_t)hd);
  const HeadLayout lx = head_layout(x, hd, nh, nt);
  const bool inplace = args.out == args.src[0];
  const HeadLayout ly = inplace ? lx : HeadLayout{hd, nh, nt, 0, 0};
  rope(ex, as_f32(args.src[0]), lx, out, ly, as_i32(args.src[1]), rp);
}

// SwiGlu / GeGlu: two contiguous sources, or one of fused [gate | up] rows.
void run_glu(const Call& c) {
  const bool swi = c.n.op == Op::SwiGlu;
  const int64_t n = c.n.n_elements();
  if (c.n.src.size() == 1) {
    const Node& x = c.src(0);
    if (row_stride(x) != x.ne[0])
      fail(ErrorKind::Unsupported, "cpu {} '{}': strided source '{}'", op_name(c.n.op), c.n.name,
           x.name);
    const int64_t half = c.n.ne[0] / 2, rows = n / c.n.ne[0];
    (swi ? swiglu_halves : geglu_halves)(c.ex, as_f32(c.args.src[0]), c.out, half, rows);
    return;
  }
  (swi ? swiglu : geglu)(c.ex, as_f32(c.args.src[0]), as_f32(c.args.src[1]), c.out, n);
}

KvPaging paging_of(const NodeArgs& args) {
  return KvPaging{args.kv_block_size, args.kv_block_stride};
}

void run_kv_store(const Call& c) {
  const Exec& ex = c.ex;
  const Node& n = c.n;
  const NodeArgs& args = c.args;
  const Node& k = c.src(0);
  const Node& v = c.src(1);
  const int64_t n_tok = c.src(2).ne[0];
  const int64_t n_kv_embd = k.n_elements() / n_tok;
  // k/v may be [n_kv_embd, n_tok] (possibly a strided view) or contiguous [hd, n_kv, n_tok].
  auto ld = [&](const Node& s) {
    if (s.ne[0] == n_kv_embd) return row_stride(s);
    if (s.op == Op::View && s.p.view_row_stride != 0 && s.p.view_row_stride != s.ne[0])
      fail(ErrorKind::Unsupported, "cpu kv_store '{}': strided per-head view '{}'", n.name, s.name);
    return n_kv_embd;
  };
  void* kr = args.kv_k ? args.kv_k : args.out;
  MINFER_ASSERT(kr && args.kv_v, "kv_store: K/V regions missing");
  kv_store(ex, as_f32(args.src[0]), ld(k), as_f32(args.src[1]), ld(v), n_kv_embd, n_tok,
           as_i32(args.src[2]),
           KvRegions{kr, args.kv_v, n.p.kv_type_k, n.p.kv_type_v, paging_of(args)}, n.p.n_ctx);
}

void run_attention(const Call& c) {
  const Exec& ex = c.ex;
  const Node& n = c.n;
  const NodeArgs& args = c.args;
  float* out = c.out;
  const Node& q = c.src(0);
  const int64_t hd = n.p.head_dim;
  int64_t nh = n.p.n_head, nt;
  MINFER_ASSERT(hd > 0 && nh > 0 && n.p.n_head_kv > 0, "attention: head params missing");
  nt = q.n_elements() / (q.ne[0] == hd ? hd * nh : q.ne[0]);
  AttentionArgs a;
  a.q = as_f32(args.src[0]);
  a.lq = head_layout(q, hd, nh, nt);
  a.k = args.kv_k ? args.kv_k : args.src[1];
  a.v = args.kv_v;
  a.k_type = n.p.kv_type_k;
  a.v_type = n.p.kv_type_v;
  MINFER_ASSERT(a.k && a.v, "attention: K/V regions missing");
  a.n_head_kv = n.p.n_head_kv;
  a.n_kv_embd = (int64_t)n.p.n_head_kv * hd;
  a.n_ctx = n.p.n_ctx > 0 ? n.p.n_ctx : c.src(1).p.n_ctx;
  a.pos = as_i32(args.src[2]);
  a.scale = n.p.scale;
  a.softcap = n.p.softcap;
  a.window = n.p.window;
  a.out = out;
  a.paging = paging_of(args);
  if (n.p.kv_block_size > 0) {
    // Paged: a position's row comes from the token's block table; positions reach the table's
    // capacity, not the slot count.
    MINFER_ASSERT(n.src.size() == 5, "attention: paged without seq / tables");
    a.tables = KvTables{as_i32(args.src[3]), as_i32(args.src[4]), n.p.kv_table_stride};
    a.n_ctx = n.p.kv_table_stride * n.p.kv_block_size;
  }
  attention(ex, a);
}

void run_qkv_bias_rope_store(const Call& c) {
  const Exec& ex = c.ex;
  const Node& n = c.n;
  const NodeArgs& args = c.args;
  float* out = c.out;
  const Node& qkv = c.src(0);
  QkvRopeStoreArgs a;
  a.n_head = n.p.n_head;
  a.n_head_kv = n.p.n_head_kv;
  a.head_dim = n.p.head_dim;
  const int64_t width = (a.n_head + 2 * a.n_head_kv) * a.head_dim;
  MINFER_ASSERT(qkv.ne[0] == width || row_stride(qkv) >= width, "qkv: width mismatch");
  a.qkv = static_cast<float*>(const_cast<void*>(args.src[0]));
  a.ld = row_stride(qkv);
  a.n_tok = qkv.n_elements() / qkv.ne[0];
  a.bias = (n.src.size() > 1 && n.src[1] != kNoNode) ? as_f32(args.src[1]) : nullptr;
  a.pos = as_i32(args.src[2]);
  a.rope = rope_params(n, args, n.p.n_rot > 0 ? n.p.n_rot : n.p.head_dim);
  a.k_region = args.kv_k;
  a.v_region = args.kv_v;
  a.k_type = n.p.kv_type_k;
  a.v_type = n.p.kv_type_v;
  MINFER_ASSERT(a.k_region && a.v_region, "qkv_bias_rope_store: K/V regions missing");
  a.n_ctx = n.p.n_ctx;
  if (n.p.kv_block_size > 0) {
    MINFER_ASSERT(n.src.size() == 4u + n.p.rope_freq_factors,
                  "qkv_bias_rope_store: paged without slots");
    a.slot = as_i32(args.src[3]);
    a.paging = paging_of(args);
  }
  a.q_out = out;
  // Output keeps the qkv row layout (see cpu_backend.h).
  a.lq_out = HeadLayout{a.head_dim, a.n_head, a.n_tok, a.head_dim,
                        args.out == args.src[0] ? a.ld : n.ne[0]};
  qkv_bias_rope_store(ex, a);
}

}  // namespace

bool CpuBackend::supports(const Node& n) const {
  switch (n.op) {
    case Op::Count:
      return false;
    default:
      return true;
  }
}

void CpuBackend::set_profile(OpProfile* p) {
  profile_ = p;
  pool_.set_wait_clock(p ? &p->waits : nullptr);
}

void CpuBackend::execute(const NodeArgs& args) {
  // The only cost of profiling when it is off: this test.
  if (profile_ != nullptr) return run_node_profiled(args);
  run_node(args);
}

// The node's time on this thread minus what the pool spent waiting for workers meanwhile
// (that goes to profile_->waits, added by the pool itself).
void CpuBackend::run_node_profiled(const NodeArgs& args) {
  using Clock = std::chrono::steady_clock;
  const Node& n = args.graph->node(args.node);
  const OpKind kind = op_kind_of(n);
  const uint64_t sync0 = profile_->waits.total_ns();
  const auto t0 = Clock::now();
  run_node(args);
  const auto dt = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  if (kind == OpKind::Count) return;
  const uint64_t waited = profile_->waits.total_ns() - sync0;
  const uint64_t work = dt > waited ? dt - waited : 0;
  const auto k = static_cast<size_t>(kind);
  profile_->ns[k] += work;
  ++profile_->calls[k];
  if (kind == OpKind::MatMul) {
    const auto t = std::min(static_cast<size_t>(args.graph->node(n.src[0]).type),
                            kNumProfTypes - 1);
    profile_->matmul_ns[t] += work;
    ++profile_->matmul_calls[t];
  }
}

void CpuBackend::run_node(const NodeArgs& args) {
  const Graph& g = *args.graph;
  const Node& n = g.node(args.node);
  const Exec ex = exec();
  const Call c{ex, g, n, args, static_cast<float*>(args.out), packed_};

  switch (n.op) {
    case Op::Input:
    case Op::Weight:
    case Op::View:
    case Op::Count:
      return;
    case Op::GetRows:
      return run_get_rows(c, row_source_, row_scratch_);
    case Op::RmsNorm:
      return run_rms_norm(c);
    case Op::Add:
    case Op::Mul:
      return run_add_mul(c);
    case Op::MatMul:
      return run_matmul(c);
    case Op::Rope:
      return run_rope(c);
    case Op::Silu:
      silu(ex, as_f32(args.src[0]), c.out, n.n_elements());
      return;
    case Op::SwiGlu:
    case Op::GeGlu:
      return run_glu(c);
    case Op::Scale:
      scale(ex, as_f32(args.src[0]), c.out, n.n_elements(), n.p.scale);
      return;
    case Op::SoftCap:
      softcap(ex, as_f32(args.src[0]), c.out, n.n_elements(), n.p.softcap);
      return;
    case Op::KvStore:
      return run_kv_store(c);
    case Op::Attention:
      return run_attention(c);
    case Op::QkvBiasRopeStore:
      return run_qkv_bias_rope_store(c);
  }
  fail(ErrorKind::Unsupported, "cpu: op {} not supported", op_name(n.op));
}

}  // namespace minfer::cpu
