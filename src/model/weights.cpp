#include "model/weights.h"

#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "gguf/gguf.h"

namespace minfer {

namespace {

enum class Kind { Matrix, Vector };  // Matrix: any supported type; Vector: f32 only

// A projection may have any element type minfer computes with (dtype.h's `supported`) except
// I32, which only carries ids and positions.
bool matmul_type_ok(GgmlType t) {
  return type_traits(t).supported && t != GgmlType::I32;
}

// "f32, f16, ..." for error messages, from the same table.
std::string matmul_type_names() {
  std::vector<std::string_view> names;
  for (uint32_t id = 0; id < 256; ++id) {  // ggml type ids are small; unknown ids are skipped
    const TypeTraits* tr = type_traits(id);
    if (tr != nullptr && matmul_type_ok(tr->type)) names.push_back(tr->name);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string shape_str(const std::array<int64_t, 4>& ne, int n_dims) {
  std::vector<int64_t> v(ne.begin(), ne.begin() + std::max(n_dims, 1));
  return fmt::format("[{}]", fmt::join(v, ", "));
}

WeightRef to_ref(const gguf::TensorInfo& t) {
  WeightRef w;
  w.name = t.name;
  w.type = t.type;
  w.ne = t.ne;
  w.data = t.data;
  w.n_bytes = t.n_bytes;
  return w;
}

class Loader {
 public:
  explicit Loader(const gguf::File& f) : f_(f) {}

  // Required tensor of exactly `shape` (trailing dims 1).
  WeightRef get(const std::string& name, std::vector<int64_t> shape, Kind kind) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) fail(ErrorKind::InvalidFile, "{}: missing tensor '{}'", f_.path(), name);
    return check(*t, std::move(shape), kind);
  }
  WeightRef get_optional(const std::string& name, std::vector<int64_t> shape, Kind kind) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    return t ? check(*t, std::move(shape), kind) : WeightRef{};
  }

  // Every tensor of the file must have been located: one the graph does not read would be
  // silently ignored (support.h).
  void check_all_used(std::string_view arch) const {
    if (n_used_ == f_.tensors().size()) return;
    for (const gguf::TensorInfo& t : f_.tensors()) {
      if (used_.count(t.name) == 0)
        fail(ErrorKind::Unsupported,
             "{}: tensor '{}' is not used by minfer's {} graph (not implemented; the file is "
             "refused rather than run without it)",
             f_.path(), t.name, arch);
    }
  }

 private:
  WeightRef check(const gguf::TensorInfo& t, std::vector<int64_t> shape, Kind kind) {
    if (used_.insert(t.name).second) ++n_used_;
    std::array<int64_t, 4> want{1, 1, 1, 1};
    for (size_t i = 0; i < shape.size(); ++i) want[i] = shape[i];
    if (t.ne != want)
      fail(ErrorKind::InvalidFile, "{}: tensor '{}': expected shape {}, found {}", f_.path(),
           t.name, shape_str(want, static_cast<int>(shape.size())), shape_str(t.ne, t.n_dims));
    if (kind == Kind::Vector && t.type != GgmlType::F32)
      fail(ErrorKind::InvalidFile, "{}: tensor '{}': expected type f32, found {}", f_.path(),
           t.name, type_name(t.type));
    if (kind == Kind::Matrix && !matmul_type_ok(t.type))
      fail(ErrorKind::Unsupported, "{}: tensor '{}': type {} is not supported ({})", f_.path(),
           t.name, type_name(t.type), matmul_type_names());
    return to_ref(t);
  }

  const gguf::File& f_;
  std::unordered_set<std::string> used_;
  size_t n_used_ = 0;
};

// n rows of projection w starting at row `first`: a view into the same bytes (a projection's
// rows are contiguous and n_out-major).
WeightRef rows_of(const WeightRef& w, int64_t first, int64_t n, std::string name) {
  const size_t rs = row_size(w.type, w.ne[0]);
  WeightRef v = w;
  v.name = std::move(name);
  v.ne = {w.ne[0], n, 1, 1};
  v.data = w.data + static_cast<size_t>(first) * rs;
  v.n_bytes = static_cast<size_t>(n) * rs;
  return v;
}

// Divisors of the rope frequencies: 0, a negative or a NaN would make every angle meaningless
// (inf / NaN logits); n_rot / 2 floats, so reading them now costs nothing.
void check_rope_divisors(const gguf::File& f, const WeightRef& w) {
  if (!has_data(w)) return;
  const auto* ff = reinterpret_cast<const float*>(w.data);
  for (int64_t i = 0; i < w.ne[0]; ++i) {
    if (!std::isfinite(ff[i]) || !(ff[i] > 0.0f))
      fail(ErrorKind::InvalidFile, "{}: tensor '{}': value {} at [{}] must be finite and > 0",
           f.path(), w.name, ff[i], i);
  }
}

// phi3 (llama.cpp's llama_model_phi3::load_arch_tensors): fused attn_qkv and gate-up, no
// ffn_gate. The fused tensors are split into row views so the llama graph runs them.
void load_phi3_layer(Loader& ld, const HParams& hp, const std::string& b, LayerWeights& lw) {
  const int64_t E = hp.n_embd, Q = hp.n_q(), KV = hp.n_kv_embd(), F = hp.n_ff;
  lw.attn_norm = ld.get(b + "attn_norm.weight", {E}, Kind::Vector);
  lw.wqkv = ld.get(b + "attn_qkv.weight", {E, Q + 2 * KV}, Kind::Matrix);
  lw.wq = rows_of(lw.wqkv, 0, Q, b + "attn_qkv.weight/q");
  lw.wk = rows_of(lw.wqkv, Q, KV, b + "attn_qkv.weight/k");
  lw.wv = rows_of(lw.wqkv, Q + KV, KV, b + "attn_qkv.weight/v");
  lw.wo = ld.get(b + "attn_output.weight", {Q, E}, Kind::Matrix);
  lw.ffn_norm = ld.get(b + "ffn_norm.weight", {E}, Kind::Vector);
  const WeightRef gate_up = ld.get(b + "ffn_up.weight", {E, 2 * F}, Kind::Matrix);
  lw.ffn_gate = rows_of(gate_up, 0, F, b + "ffn_up.weight/gate");
  lw.ffn_up = rows_of(gate_up, F, F, b + "ffn_up.weight/up");
  lw.ffn_down = ld.get(b + "ffn_down.weight", {F, E}, Kind::Matrix);
}

}  // namespace

const WeightRef& rope_factors(const ModelWeights& w, const HParams& hp, int64_t n_ctx_seq) {
  if (has_data(w.rope_freqs)) return w.rope_freqs;
  // llama_context pads n_ctx_seq to a multiple of 256 before get_rope_factors compares it.
  const int64_t padded = (n_ctx_seq + 255) / 256 * 256;
  const int64_t orig = hp.n_ctx_orig > 0 ? hp.n_ctx_orig : hp.n_ctx_train;
  return padded > orig ? w.rope_long : w.rope_short;
}

ModelWeights ModelWeights::load(const gguf::File& f, const HParams& hp) {
  Loader ld(f);
  ModelWeights w;
  const int64_t E = hp.n_embd, V = hp.n_vocab, Q = hp.n_q(), KV = hp.n_kv_embd(), F = hp.n_ff;
  w.tok_embd = ld.get("token_embd.weight", {E, V}, Kind::Matrix);
  w.output_norm = ld.get("output_norm.weight", {E}, Kind::Vector);
  w.output = ld.get_optional("output.weight", {E, V}, Kind::Matrix);
  if (!has_data(w.output)) {
    // Tied embeddings (Qwen2.5 small models, Llama 3.2): the output projection reuses the
    // embedding table, which is [n_embd, n_vocab] as a projection needs.
    w.output = w.tok_embd;
    w.tied_output = true;
  }
  w.rope_freqs = ld.get_optional("rope_freqs.weight", {hp.n_rot / 2}, Kind::Vector);
  check_rope_divisors(f, w.rope_freqs);
  if (hp.arch == Arch::Phi3) {
    w.rope_long = ld.get_optional("rope_factors_long.weight", {hp.n_rot / 2}, Kind::Vector);
    w.rope_short = ld.get_optional("rope_factors_short.weight", {hp.n_rot / 2}, Kind::Vector);
    check_rope_divisors(f, w.rope_long);
    check_rope_divisors(f, w.rope_short);
  }
  // hp may be hand-made: the per-layer vector is sized only once the table can hold the layers.
  HParams::check_layer_tensors(f, "block_count", hp.n_layer, hp.arch);
  w.layers.resize(hp.n_layer);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    LayerWeights& lw = w.layers[l];
    if (hp.has_fused_weights()) {
      load_phi3_layer(ld, hp, b, lw);
      continue;
    }
    lw.attn_norm = ld.get(b + "attn_norm.weight", {E}, Kind::Vector);
    lw.wq = ld.get(b + "attn_q.weight", {E, Q}, Kind::Matrix);
    lw.wk = ld.get(b + "attn_k.weight", {E, KV}, Kind::Matrix);
    lw.wv = ld.get(b + "attn_v.weight", {E, KV}, Kind::Matrix);
    lw.wo = ld.get(b + "attn_output.weight", {Q, E}, Kind::Matrix);
    if (hp.has_qkv_bias()) {
      lw.bq = ld.get(b + "attn_q.bias", {Q}, Kind::Vector);
      lw.bk = ld.get(b + "attn_k.bias", {KV}, Kind::Vector);
      lw.bv = ld.get(b + "attn_v.bias", {KV}, Kind::Vector);
    }
    if (hp.has_qk_norm()) {
      lw.q_norm = ld.get(b + "attn_q_norm.weight", {hp.head_dim}, Kind::Vector);
      lw.k_norm = ld.get(b + "attn_k_norm.weight", {hp.head_dim}, Kind::Vector);
    }
    lw.ffn_norm = ld.get(b + "ffn_norm.weight", {E}, Kind::Vector);
    lw.ffn_gate = ld.get(b + "ffn_gate.weight", {E, F}, Kind::Matrix);
    lw.ffn_up = ld.get(b + "ffn_up.weight", {E, F}, Kind::Matrix);
    lw.ffn_down = ld.get(b + "ffn_down.weight", {F, E}, Kind::Matrix);
    if (hp.has_post_norms()) {
      lw.attn_post_norm = ld.get(b + "post_attention_norm.weight", {E}, Kind::Vector);
      lw.ffn_post_norm = ld.get(b + "post_ffw_norm.weight", {E}, Kind::Vector);
    }
  }
  ld.check_all_used(arch_name(hp.arch));
  return w;
}

namespace {
template <typename Fn>
void for_each_distinct(const ModelWeights& w, Fn fn) {
  fn(w.tok_embd);
  fn(w.output_norm);
  if (!w.tied_output) fn(w.output);
  for (const WeightRef* r : {&w.rope_freqs, &w.rope_long, &w.rope_short})
    if (has_data(*r)) fn(*r);
  for (const auto& l : w.layers) {
    for (const WeightRef* r :
         {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
          &l.ffn_norm, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.attn_post_norm, &l.ffn_post_norm})
      if (has_data(*r)) fn(*r);
  }
}
}  // namespace

uint64_t ModelWeights::total_bytes() const {
  uint64_t n = 0;
  for_each_distinct(*this, [&](const WeightRef& r) { n += r.n_bytes; });
  return n;
}

uint64_t ModelWeights::n_params() const {
  uint64_t n = 0;
  for_each_distinct(*this, [&](const WeightRef& r) {
    n += static_cast<uint64_t>(r.ne[0] * r.ne[1] * r.ne[2] * r.ne[3]);
  });
  return n;
}

namespace {

// The fused QKV's f32 bias [width]: the concatenated biases, or zeros without them. The fused
// op always adds one (a negligible add) so the graph has one shape for every architecture.
void fused_qkv_bias(const LayerWeights& lw, int layer, int64_t width, FusedQkv& out) {
  out.bias_bytes.assign(static_cast<size_t>(width) * sizeof(float), 0);
  if (has_data(lw.bq)) {
    uint8_t* dst = out.bias_bytes.data();
    for (const WeightRef* r : {&lw.bq, &lw.bk, &lw.bv}) {
      std::memcpy(dst, r->data, r->n_bytes);
      dst += r->n_bytes;
    }
  }
  out.bias.name = fmt::format("blk.{}.attn_qkv.bias", layer);
  out.bias.type = GgmlType::F32;
  out.bias.ne = {width, 1, 1, 1};
  out.bias.data = out.bias_bytes.data();
  out.bias.n_bytes = out.bias_bytes.size();
}

}  // namespace

void borrow_fused_qkv(const LayerWeights& lw, int layer, FusedQkv& out) {
  out.weight = lw.wqkv;  // points into the mapping
  out.q = lw.wq;
  out.k = lw.wk;
  out.v = lw.wv;
  out.borrowed = out.raw = true;
  fused_qkv_bias(lw, layer, lw.wqkv.ne[1], out);  // phi3 has no bias: zeros
}

bool describe_fused_qkv(const LayerWeights& lw, int layer, const uint8_t* data, FusedQkv& out) {
  if (lw.wq.type != lw.wk.type || lw.wq.type != lw.wv.type || lw.wq.ne[0] != lw.wk.ne[0] ||
      lw.wq.ne[0] != lw.wv.ne[0])
    return false;
  out.q = lw.wq;
  out.k = lw.wk;
  out.v = lw.wv;
  out.borrowed = out.raw = false;
  // A projection's rows are contiguous and n_out-major, so concatenating along n_out is a
  // concatenation of bytes (Model::make_fused_readable).
  out.weight.name = fmt::format("blk.{}.attn_qkv.weight", layer);
  out.weight.type = lw.wq.type;
  out.weight.ne = {lw.wq.ne[0], lw.wq.ne[1] + lw.wk.ne[1] + lw.wv.ne[1], 1, 1};
  out.weight.data = data;
  out.weight.n_bytes = lw.wq.n_bytes + lw.wk.n_bytes + lw.wv.n_bytes;
  fused_qkv_bias(lw, layer, out.weight.ne[1], out);
  return true;
}

bool describe_fused_gate_up(const LayerWeights& lw, int layer, const uint8_t* data,
                            FusedGateUp& out) {
  const WeightRef &g = lw.ffn_gate, &u = lw.ffn_up;
  if (!has_data(g) || !has_data(u) || g.type != u.type || g.ne[0] != u.ne[0]) return false;
  out.gate = g;
  out.up = u;
  out.weight.type = g.type;
  out.weight.ne = {g.ne[0], g.ne[1] + u.ne[1], 1, 1};
  out.weight.n_bytes = g.n_bytes + u.n_bytes;
  // phi3's gate and up are the two row halves of the file's ffn_up.weight: that is the fused
  // weight already.
  out.borrowed = g.data + g.n_bytes == u.data;
  out.raw = out.borrowed;
  out.weight.data = out.borrowed ? g.data : data;
  out.weight.name = out.borrowed ? fmt::format("blk.{}.ffn_up.weight", layer)
                                 : fmt::format("blk.{}.ffn_gate_up.weight", layer);
  return true;
}

}  // namespace minfer
