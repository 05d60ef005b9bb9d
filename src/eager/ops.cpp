#include "eager/ops.h"

#include "backend/cpu/packed_weights.h"
#include "common/error.h"
#include "common/fp16.h"

namespace minfer::eager {
namespace {

int64_t n_rows(const Tensor& t) {
  return t.ne(1) * t.ne(2) * t.ne(3);
}

// Floats between consecutive rows of an f32 tensor whose rows are uniformly strided (every
// contiguous tensor, and narrows/column views of one along dim 1).
int64_t row_ld(const Tensor& t) {
  MINFER_ASSERT(t.type() == GgmlType::F32 && t.nb(0) == sizeof(float),
                "eager op: input rows must be contiguous f32");
  const size_t nb1 = t.ne(1) > 1 ? t.nb(1) : static_cast<size_t>(t.ne(0)) * sizeof(float);
  MINFER_ASSERT(t.ne(2) == 1 || t.nb(2) == nb1 * static_cast<size_t>(t.ne(1)),
                "eager op: rows are not uniformly strided");
  MINFER_ASSERT(t.ne(3) == 1 || t.nb(3) == t.nb(2) * static_cast<size_t>(t.ne(2)),
                "eager op: rows are not uniformly strided");
  return static_cast<int64_t>(nb1 / sizeof(float));
}

void require_contiguous_f32(const Tensor& t) {
  MINFER_ASSERT(t.type() == GgmlType::F32 && t.is_contiguous(),
                "eager op input must be contiguous f32");
}

Tensor out_like_rows(OpContext& c, int64_t ne0, const Tensor& x) {
  return Tensor::empty_f32(*c.pool, {ne0, x.ne(1), x.ne(2), x.ne(3)});
}

const float* weight_f32(const WeightRef& w, const char* what) {
  if (w.type != GgmlType::F32) {
    fail(ErrorKind::Unsupported, "eager {}: weight '{}' must be f32, got {}", what, w.name,
         type_name(w.type));
  }
  return reinterpret_cast<const float*>(w.data);
}

// Head layout of a tensor [head_dim, n_head, n_tok] in floats.
cpu::HeadLayout heads_layout(const Tensor& t) {
  MINFER_ASSERT(t.type() == GgmlType::F32 && t.nb(0) == sizeof(float), "heads must be f32 rows");
  cpu::HeadLayout l;
  l.head_dim = t.ne(0);
  l.n_head = t.ne(1);
  l.n_tok = t.ne(2);
  l.head_stride = static_cast<int64_t>(t.nb(1) / sizeof(float));
  l.tok_stride = static_cast<int64_t>(t.nb(2) / sizeof(float));
  return l;
}

}  // namespace

Tensor get_rows(OpContext& c, const WeightRef& table, const Tensor& ids) {
  MINFER_ASSERT(ids.type() == GgmlType::I32 && ids.is_contiguous(), "get_rows: ids must be I32");
  const int64_t n = ids.n_elements();
  Tensor out = Tensor::empty_f32(*c.pool, {table.ne[0], n, 1, 1});
  cpu::get_rows(c.ex, table.type, table.data, table.ne[0], table.ne[1], ids.data<int32_t>(), n,
                out.f32());
  return out;
}

Tensor get_rows(OpContext& c, const Tensor& x, const Tensor& ids) {
  require_contiguous_f32(x);
  MINFER_ASSERT(ids.type() == GgmlType::I32 && ids.is_contiguous(), "get_rows: ids must be I32");
  const int64_t n = ids.n_elements();
  Tensor out = Tensor::empty_f32(*c.pool, {x.ne(0), n, 1, 1});
  cpu::get_rows(c.ex, GgmlType::F32, x.raw(), x.ne(0), n_rows(x), ids.data<int32_t>(), n,
                out.f32());
  return out;
}

Tensor rms_norm(OpContext& c, const Tensor& x, const WeightRef& w, float eps) {
  const float* wd = w.data ? weight_f32(w, "rms_norm") : nullptr;
  if (wd) MINFER_ASSERT(w.ne[0] == x.ne(0), "rms_norm: weight width differs from the rows");
  Tensor out = out_like_rows(c, x.ne(0), x);
  cpu::rms_norm(c.ex, x.f32(), row_ld(x), wd, out.f32(), x.ne(0), n_rows(x), eps);
  return out;
}

namespace {

// add / mul: b's rows repeat over a's (n_rows(b) divides n_rows(a)).
using BroadcastKernel = void (*)(const cpu::Exec&, const float*, const float*, float*, int64_t,
                                 int64_t, int64_t);
Tensor broadcast_rows(OpContext& c, const Tensor& a, const Tensor& b, BroadcastKernel kernel) {
  require_contiguous_f32(a);
  require_contiguous_f32(b);
  MINFER_ASSERT(b.ne(0) == a.ne(0) && n_rows(a) % n_rows(b) == 0, "add/mul: rhs must broadcast");
  Tensor out = out_like_rows(c, a.ne(0), a);
  kernel(c.ex, a.f32(), b.f32(), out.f32(), a.ne(0), n_rows(a), n_rows(b));
  return out;
}

}  // namespace

Tensor add(OpContext& c, const Tensor& a, const Tensor& b) {
  return broadcast_rows(c, a, b, cpu::add);
}

Tensor add(OpContext& c, const Tensor& a, const WeightRef& bias) {
  require_contiguous_f32(a);
  const float* bd = weight_f32(bias, "bias add");
  MINFER_ASSERT(bias.ne[0] == a.ne(0), "bias add: width differs");
  Tensor out = out_like_rows(c, a.ne(0), a);
  cpu::add(c.ex, a.f32(), bd, out.f32(), a.ne(0), n_rows(a), 1);
  return out;
}

Tensor mul(OpContext& c, const Tensor& a, const Tensor& b) {
  return broadcast_rows(c, a, b, cpu::mul);
}

Tensor matmul(OpContext& c, const WeightRef& w, const Tensor& x) {
  if (!cpu::matmul_supported(w.type)) {
    fail(ErrorKind::Unsupported, "eager matmul: weight '{}' of type {} not supported", w.name,
         type_name(w.type));
  }
  MINFER_ASSERT(w.ne[0] == x.ne(0), "matmul: weight n_in differs from the input rows");
  const int64_t m = n_rows(x);
  Tensor out = Tensor::empty_f32(*c.pool, {w.ne[1], m, 1, 1});
  cpu::MatmulArgs a;
  a.wtype = w.type;
  a.w = w.data;
  a.packed = c.packed ? c.packed->find(w.data) : nullptr;
  a.n_in = w.ne[0];
  a.n_out = w.ne[1];
  a.x = x.f32();
  a.ldx = row_ld(x);
  a.m = m;
  a.y = out.f32();
  a.ldy = w.ne[1];
  cpu::matmul(c.ex, a);
  return out;
}

Tensor silu(OpContext& c, const Tensor& x) {
  require_contiguous_f32(x);
  Tensor out = out_like_rows(c, x.ne(0), x);
  cpu::silu(c.ex, x.f32(), out.f32(), x.n_elements());
  return out;
}

Tensor swiglu(OpContext& c, const Tensor& gate, const Tensor& up) {
  require_contiguous_f32(gate);
  require_contiguous_f32(up);
  MINFER_ASSERT(gate.ne() == up.ne(), "swiglu: gate and up shapes differ");
  Tensor out = out_like_rows(c, gate.ne(0), gate);
  cpu::swiglu(c.ex, gate.f32(), up.f32(), out.f32(), gate.n_elements());
  return out;
}

Tensor geglu(OpContext& c, const Tensor& gate, const Tensor& up) {
  require_contiguous_f32(gate);
  require_contiguous_f32(up);
  MINFER_ASSERT(gate.ne() == up.ne(), "geglu: gate and up shapes differ");
  Tensor out = out_like_rows(c, gate.ne(0), gate);
  cpu::geglu(c.ex, gate.f32(), up.f32(), out.f32(), gate.n_elements());
  return out;
}

void scale_inplace(OpContext& c, const Tensor& x, float s) {
  require_contiguous_f32(x);
  cpu::scale(c.ex, x.f32(), x.f32(), x.n_elements(), s);
}

void softcap_inplace(OpContext& c, const Tensor& x, float cap) {
  require_contiguous_f32(x);
  cpu::softcap(c.ex, x.f32(), x.f32(), x.n_elements(), cap);
}

void rope_inplace(OpContext& c, const Tensor& x_heads, const Tensor& pos,
                  const cpu::RopeParams& p) {
  MINFER_ASSERT(pos.type() == GgmlType::I32 && pos.n_elements() == x_heads.ne(2),
                "rope: one position per token");
  const cpu::HeadLayout l = heads_layout(x_heads);
  cpu::rope(c.ex, x_heads.f32(), l, x_heads.f32(), l, pos.data<int32_t>(), p);
}

Tensor attention(OpContext& c, const Tensor& q_heads, const Tensor& k_view, const Tensor& v_view,
                 const Tensor& pos, const AttentionOp& p) {
  MINFER_ASSERT(k_view.is_contiguous() && v_view.is_contiguous() && k_view.ne() == v_view.ne(),
                "attention: K/V views must be contiguous prefixes of equal shape");
  MINFER_ASSERT(cpu::kv_type_supported(k_view.type()) && cpu::kv_type_supported(v_view.type()),
                "attention: K/V views must be f32, f16 or q8_0");
  const cpu::HeadLayout lq = heads_layout(q_heads);
  MINFER_ASSERT(pos.type() == GgmlType::I32 && pos.n_elements() == lq.n_tok,
                "attention: one position per query token");
  Tensor out = Tensor::empty_f32(*c.pool, {lq.head_dim * lq.n_head, lq.n_tok, 1, 1});
  cpu::AttentionArgs a;
  a.q = q_heads.f32();
  a.lq = lq;
  a.k = k_view.raw();
  a.v = v_view.raw();
  a.k_type = k_view.type();
  a.v_type = v_view.type();
  a.n_kv_embd = k_view.ne(0);
  // The view's length IS the context the kernel may read: only rows [0, len) are addressed.
  a.n_ctx = k_view.ne(1);
  a.n_head_kv = static_cast<int32_t>(p.n_head_kv);
  a.pos = pos.data<int32_t>();
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.window = p.window;
  a.out = out.f32();
  cpu::attention(c.ex, a);
  return out;
}

Tensor f16_to_f32(OpContext& c, const Tensor& x) {
  MINFER_ASSERT(x.type() == GgmlType::F16 && x.is_contiguous(), "f16_to_f32: contiguous f16 in");
  Tensor out = Tensor::empty_f32(*c.pool, x.ne());
  const uint16_t* src = x.data<uint16_t>();
  float* dst = out.f32();
  const int64_t n = x.n_elements();
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
  return out;
}

}  // namespace minfer::eager
