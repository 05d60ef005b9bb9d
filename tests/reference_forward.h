// Test helper: a plain scalar forward pass (double accumulations, textbook formulas), the
// ground truth the engines are compared with on tiny models. Header-only; needs minfer_model.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/quant.h"
#include "model/model.h"

namespace minfer::test {

inline std::vector<float> deq(const WeightRef& w) {
  std::vector<float> out(static_cast<size_t>(w.ne[0] * w.ne[1]));
  const size_t rs = row_size(w.type, w.ne[0]);
  for (int64_t r = 0; r < w.ne[1]; ++r)
    dequantize_row(w.type, w.data + r * rs, out.data() + r * w.ne[0], w.ne[0]);
  return out;
}
inline std::vector<float> mv(const WeightRef& w, const std::vector<float>& x) {
  const auto m = deq(w);
  std::vector<float> y(static_cast<size_t>(w.ne[1]));
  for (int64_t o = 0; o < w.ne[1]; ++o) {
    double s = 0;
    for (int64_t i = 0; i < w.ne[0]; ++i) s += double(m[o * w.ne[0] + i]) * x[i];
    y[o] = float(s);
  }
  return y;
}
inline void rms(float* x, int64_t n, const WeightRef& w, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float sc = float(1.0 / std::sqrt(ss / n + eps));
  const float* wv = reinterpret_cast<const float*>(w.data);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * sc * wv[i];
}
// RoPE of one head as the papers and Hugging Face write it (not the kernels' code): inverse
// frequency base^(-2i/n_rot), divided by Llama 3's factor; linear scaling divides by the
// factor; YaRN (transformers' _compute_yarn_parameters) blends extrapolated and interpolated
// frequencies with a linear ramp between the correction dims and scales cos/sin by
// 0.1 ln(factor) + 1 (times rope.scaling.attn_factor).
inline void rope_ref(float* x, const HParams& h, const float* freq_factors, int pos) {
  const int64_t n = h.n_rot;
  const bool neox = h.rope_mode == RopeMode::Neox;
  const double factor = h.rope_scaling == RopeScaling::None ? 1.0 : 1.0 / h.rope_freq_scale;
  const bool yarn = h.rope_scaling == RopeScaling::Yarn;
  const double orig = double(h.n_ctx_orig > 0 ? h.n_ctx_orig : h.n_ctx_train);
  const auto corr_dim = [&](double rotations) {
    return n * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(double(h.rope_freq_base)));
  };
  const double low = std::max(0.0, std::floor(corr_dim(h.yarn_beta_fast)));
  double high = std::min(double(n - 1), std::ceil(corr_dim(h.yarn_beta_slow)));
  if (low == high) high += 0.001;
  const double mag = (yarn && factor > 1 ? 0.1 * std::log(factor) + 1.0 : 1.0) * h.rope_attn_factor;
  for (int64_t i = 0; i < n / 2; ++i) {
    double inv_freq = std::pow(double(h.rope_freq_base), -2.0 * i / n);
    if (freq_factors) inv_freq /= freq_factors[i];
    double f = inv_freq / factor;
    if (yarn) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrap_w = 1.0 - ramp;  // extrapolation_factor 1
      f = f * (1 - extrap_w) + inv_freq * extrap_w;
    }
    const double th = pos * f;
    const int64_t a = neox ? i : 2 * i, b = neox ? i + n / 2 : 2 * i + 1;
    const double x0 = x[a], x1 = x[b];
    x[a] = float((x0 * std::cos(th) - x1 * std::sin(th)) * mag);
    x[b] = float((x0 * std::sin(th) + x1 * std::cos(th)) * mag);
  }
}

// Gemma 2 / 3 as Hugging Face's modeling_gemma2 / gemma3 write them: tanh-approximated GELU,
// soft-capping c tanh(s / c), a window of n_swa positions on the sliding layers.
inline double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double softcap_ref(double s, double cap) {
  return cap > 0 ? cap * std::tanh(s / cap) : s;
}
// Layer l's RoPE hyperparameters: the sliding layers' own base (and, for gemma3, no scaling).
inline HParams layer_rope_hparams(const HParams& h, int64_t l) {
  HParams r = h;
  if (h.is_swa(l)) {
    r.rope_freq_base = h.rope_freq_base_swa;
    if (h.rope_freq_scale_swa == 1.0f) r.rope_scaling = RopeScaling::None;
  }
  return r;
}

// A tensor of the model's file as a WeightRef, straight from the GGUF table (not through
// ModelWeights, so phi3's fused tensors are read as the file holds them).
inline WeightRef file_weight(const Model& m, const std::string& name) {
  const gguf::TensorInfo* t = m.file().find_tensor(name);
  WeightRef w;
  if (t == nullptr) return w;
  w.name = t->name;
  w.type = t->type;
  w.ne = t->ne;
  w.data = t->data;
  w.n_bytes = t->n_bytes;
  return w;
}

// Logits for every token of `toks` (positions 0..n-1). `rope_factors`: the file tensor whose
// values divide the rope frequencies (e.g. Phi-3's "rope_factors_long.weight"); empty: the
// model's rope_freqs.weight, if any.
inline std::vector<std::vector<float>> reference_forward(const Model& m,
                                                         const std::vector<int32_t>& toks,
                                                         const std::string& rope_factors = {}) {
  const HParams& h = m.hparams();
  const ModelWeights& w = m.weights();
  const int64_t E = h.n_embd, D = h.head_dim, H = h.n_head, HKV = h.n_head_kv;
  const size_t n = toks.size();
  const auto emb = deq(w.tok_embd);
  std::vector<std::vector<float>> x(n);
  const bool gemma = h.is_gemma();
  for (size_t t = 0; t < n; ++t) {
    x[t].assign(emb.begin() + toks[t] * E, emb.begin() + (toks[t] + 1) * E);
    if (gemma)
      for (auto& e : x[t]) e = float(e * std::sqrt(double(E)));
  }
  for (int64_t l = 0; l < h.n_layer; ++l) {
    const LayerWeights& lw = w.layers[l];
    const HParams hl = layer_rope_hparams(h, l);
    const double qscale = h.attn_scale > 0 ? h.attn_scale : 1.0 / std::sqrt(double(D));
    const size_t window = h.is_swa(l) ? size_t(h.n_swa) : 0;
    std::vector<std::vector<float>> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      auto hh = x[t];
      rms(hh.data(), E, lw.attn_norm, h.rms_eps);
      if (h.arch == Arch::Phi3) {
        // phi3: one projection [q | k | v] (the file's attn_qkv), split by width.
        const auto qkv = mv(file_weight(m, "blk." + std::to_string(l) + ".attn_qkv.weight"), hh);
        const auto Q = static_cast<ptrdiff_t>(H * D), KV = static_cast<ptrdiff_t>(HKV * D);
        q[t].assign(qkv.begin(), qkv.begin() + Q);
        k[t].assign(qkv.begin() + Q, qkv.begin() + Q + KV);
        v[t].assign(qkv.begin() + Q + KV, qkv.end());
      } else {
        q[t] = mv(lw.wq, hh);
        k[t] = mv(lw.wk, hh);
        v[t] = mv(lw.wv, hh);
      }
      if (has_data(lw.bq)) {
        for (size_t i = 0; i < q[t].size(); ++i)
          q[t][i] += reinterpret_cast<const float*>(lw.bq.data)[i];
        for (size_t i = 0; i < k[t].size(); ++i)
          k[t][i] += reinterpret_cast<const float*>(lw.bk.data)[i];
        for (size_t i = 0; i < v[t].size(); ++i)
          v[t][i] += reinterpret_cast<const float*>(lw.bv.data)[i];
      }
      const WeightRef fw = rope_factors.empty() ? w.rope_freqs : file_weight(m, rope_factors);
      const float* ff = has_data(fw) ? reinterpret_cast<const float*>(fw.data) : nullptr;
      for (int64_t hd = 0; hd < H; ++hd) {
        if (has_data(lw.q_norm)) rms(&q[t][hd * D], D, lw.q_norm, h.rms_eps);
        rope_ref(&q[t][hd * D], hl, ff, int(t));
      }
      for (int64_t hd = 0; hd < HKV; ++hd) {
        if (has_data(lw.k_norm)) rms(&k[t][hd * D], D, lw.k_norm, h.rms_eps);
        rope_ref(&k[t][hd * D], hl, ff, int(t));
      }
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<float> att(static_cast<size_t>(H * D));
      for (int64_t hd = 0; hd < H; ++hd) {
        const int64_t kh = hd / (H / HKV);
        const size_t j0 = window > 0 && t + 1 > window ? t + 1 - window : 0;
        std::vector<double> s(t + 1, 0.0);
        double mx = -1e30;
        for (size_t j = j0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += double(q[t][hd * D + i]) * k[j][kh * D + i];
          s[j] = softcap_ref(d * qscale, h.attn_softcap);
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (size_t j = j0; j <= t; ++j) z += (s[j] = std::exp(s[j] - mx));
        for (size_t j = j0; j <= t; ++j)
          for (int64_t i = 0; i < D; ++i) att[hd * D + i] += float(s[j] / z * v[j][kh * D + i]);
      }
      auto o = mv(lw.wo, att);
      if (gemma) rms(o.data(), E, lw.attn_post_norm, h.rms_eps);
      for (int64_t i = 0; i < E; ++i) x[t][i] += o[i];
      auto hh = x[t];
      rms(hh.data(), E, lw.ffn_norm, h.rms_eps);
      std::vector<float> g, u;
      if (h.arch == Arch::Phi3) {
        // phi3: ffn_up holds [gate | up]; SiLU goes over the first half (ggml_swiglu).
        const auto gu = mv(file_weight(m, "blk." + std::to_string(l) + ".ffn_up.weight"), hh);
        g.assign(gu.begin(), gu.begin() + h.n_ff);
        u.assign(gu.begin() + h.n_ff, gu.end());
      } else {
        g = mv(lw.ffn_gate, hh);
        u = mv(lw.ffn_up, hh);
      }
      for (size_t i = 0; i < g.size(); ++i)
        g[i] = gemma ? float(gelu_tanh_ref(g[i]) * u[i]) : g[i] / (1.0f + std::exp(-g[i])) * u[i];
      auto d = mv(lw.ffn_down, g);
      if (gemma) rms(d.data(), E, lw.ffn_post_norm, h.rms_eps);
      for (int64_t i = 0; i < E; ++i) x[t][i] += d[i];
    }
  }
  std::vector<std::vector<float>> logits(n);
  for (size_t t = 0; t < n; ++t) {
    rms(x[t].data(), E, w.output_norm, h.rms_eps);
    logits[t] = mv(w.output, x[t]);
    for (auto& e : logits[t]) e = float(softcap_ref(e, h.final_softcap));
  }
  return logits;
}

}  // namespace minfer::test
