// Reference KV kernels: row store (f32 copy, f16 conversion or Q8_0 quantization), naive
// attention over f32, f16 or Q8_0 K/V, and the fused QKV epilogue built from the reference
// rope + store. See ref_kernels.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/ref_kernels.h"
#include "common/error.h"
#include "common/fp16.h"
#include "common/quant.h"

namespace minfer::cpu::ref {
namespace {

void check_types(GgmlType k, GgmlType v, int64_t width) {
  if (!kv_type_supported(k) || !kv_type_supported(v))
    fail(ErrorKind::Unsupported, "ref kv: KV cache types {}/{} (supported: f32, f16, q8_0)",
         type_name(k), type_name(v));
  for (GgmlType t : {k, v})
    if (width % type_traits(t).block_size != 0)
      fail(ErrorKind::InvalidArgument, "ref kv: {} needs {} to be a multiple of {}", type_name(t),
           width, type_traits(t).block_size);
}

void store_row(const float* x, uint8_t* dst, GgmlType type, int64_t n) {
  if (type == GgmlType::Q8_0) {
    quantize_row(type, x, dst, n);
  } else if (type == GgmlType::F16) {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(x[i]);
  } else {
    std::memcpy(dst, x, static_cast<size_t>(n) * 4);
  }
}

// Element i of a region of `type`, as f32. Q8_0 rows are whole blocks, so value i of the region
// is code i % 32 of block i / 32.
float load(const void* region, GgmlType type, int64_t i) {
  if (type == GgmlType::Q8_0) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(region)[i / QK8_0];
    return fp16_to_f32(b.d) * static_cast<float>(b.qs[i % QK8_0]);
  }
  if (type == GgmlType::F16) return fp16_to_f32(static_cast<const uint16_t*>(region)[i]);
  return static_cast<const float*>(region)[i];
}

}  // namespace

void kv_store(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t n_kv_embd,
              int64_t n_tok, const int32_t* slot, const KvRegions& kv, int64_t n_slots) {
  check_types(kv.k_type, kv.v_type, n_kv_embd);
  for (int64_t t = 0; t < n_tok; ++t)
    if (slot[t] >= n_slots)
      fail(ErrorKind::InvalidArgument, "kv_store: slot {} outside [0, {})", slot[t], n_slots);
  const size_t k_row = row_size(kv.k_type, n_kv_embd), v_row = row_size(kv.v_type, n_kv_embd);
  for (int64_t t = 0; t < n_tok; ++t) {
    if (slot[t] < 0) continue;  // padding
    store_row(k + t * ldk, kv_row_ptr(kv.k, kv.paging, k_row, slot[t]), kv.k_type, n_kv_embd);
    store_row(v + t * ldv, kv_row_ptr(kv.v, kv.paging, v_row, slot[t]), kv.v_type, n_kv_embd);
  }
}

void attention(const AttentionArgs& a) {
  check_types(a.k_type, a.v_type, a.lq.head_dim);
  const int64_t hd = a.lq.head_dim, nh = a.lq.n_head;
  const int64_t group = nh / a.n_head_kv;
  for (int64_t t = 0; t < a.lq.n_tok; ++t) {
    if (a.pos[t] < 0 || a.pos[t] >= a.n_ctx)
      fail(ErrorKind::InvalidArgument, "attention: position {} outside the context [0, {})",
           a.pos[t], a.n_ctx);
    const int64_t n_kv = a.pos[t] + 1;
    // Sliding window: positions before lo are masked (their weights stay 0).
    const int64_t lo = a.window > 0 ? std::max<int64_t>(0, n_kv - a.window) : 0;
    std::vector<double> s(n_kv, 0.0);
    // Row of position j: through the token's block table when paged, else row j.
    const size_t k_row = row_size(a.k_type, a.n_kv_embd), v_row = row_size(a.v_type, a.n_kv_embd);
    auto slot_of = [&](int64_t j) -> int64_t {
      if (!a.tables.tables) return j;
      const int64_t bs = a.paging.block_size;
      return int64_t{a.tables.tables[a.tables.seq[t] * a.tables.table_stride + j / bs]} * bs +
             j % bs;
    };
    auto k_at = [&](int64_t j) { return kv_row_ptr(const_cast<void*>(a.k), a.paging, k_row, slot_of(j)); };
    auto v_at = [&](int64_t j) { return kv_row_ptr(const_cast<void*>(a.v), a.paging, v_row, slot_of(j)); };
    for (int64_t h = 0; h < nh; ++h) {
      const float* q = a.q + t * a.lq.ts() + h * a.lq.hs();
      const int64_t kvh = h / group;
      double mx = -INFINITY;
      for (int64_t j = lo; j < n_kv; ++j) {
        const int64_t k0 = kvh * hd;
        const uint8_t* kr = k_at(j);
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += (double)q[i] * load(kr, a.k_type, k0 + i);
        s[j] = d * a.scale;
        if (a.softcap > 0.0f) s[j] = a.softcap * std::tanh(s[j] / a.softcap);
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int64_t j = lo; j < n_kv; ++j) sum += (s[j] = std::exp(s[j] - mx));
      float* o = a.out + t * hd * nh + h * hd;
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (int64_t j = lo; j < n_kv; ++j)
          acc += s[j] * load(v_at(j), a.v_type, kvh * hd + i);
        o[i] = (float)(acc / sum);
      }
    }
  }
}

void qkv_bias_rope_store(const QkvRopeStoreArgs& a) {
  const int64_t nq = a.n_head * a.head_dim, nkv = a.n_head_kv * a.head_dim;
  const int64_t width = nq + 2 * nkv;
  std::vector<float> buf(width * a.n_tok);
  for (int64_t t = 0; t < a.n_tok; ++t)
    for (int64_t i = 0; i < width; ++i)
      buf[t * width + i] = a.qkv[t * a.ld + i] + (a.bias ? a.bias[i] : 0.0f);
  HeadLayout lq{a.head_dim, a.n_head, a.n_tok, 0, width};
  HeadLayout lk{a.head_dim, a.n_head_kv, a.n_tok, 0, width};
  rope(buf.data(), lq, a.q_out, a.lq_out, a.pos, a.rope);
  rope(buf.data() + nq, lk, buf.data() + nq, lk, a.pos, a.rope);
  kv_store(buf.data() + nq, width, buf.data() + nq + nkv, width, nkv, a.n_tok,
           a.slot ? a.slot : a.pos, KvRegions{a.k_region, a.v_region, a.k_type, a.v_type, a.paging},
           a.n_ctx);
}

}  // namespace minfer::cpu::ref
