#include "model/model.h"

#include <map>

#include <fmt/format.h>

#include "common/error.h"

namespace minfer {

Model::Model(gguf::File f) : file_(std::move(f)) {
  hp_ = HParams::from_gguf(file_);
  w_ = ModelWeights::load(file_, hp_);
}

std::unique_ptr<Model> Model::load(const std::string& path, const gguf::OpenParams& params) {
  return from_file(gguf::File::open(path, params));
}

std::unique_ptr<Model> Model::from_file(gguf::File f) {
  return std::unique_ptr<Model>(new Model(std::move(f)));
}

GgmlType Model::dominant_type() const {
  // The type holding the most bytes among the layers' projections (what llama.cpp's "type"
  // column shows for a uniform file).
  std::map<GgmlType, uint64_t> bytes;
  for (const auto& l : w_.layers)
    for (const WeightRef* r : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down})
      bytes[r->type] += r->n_bytes;
  GgmlType best = GgmlType::F32;
  uint64_t most = 0;
  for (const auto& [t, n] : bytes)
    if (n > most) {
      most = n;
      best = t;
    }
  return best;
}

std::string Model::type_description() const {
  const double n = static_cast<double>(w_.n_params());
  std::string size = n >= 1e9   ? fmt::format("{:.1f}B", n / 1e9)
                     : n >= 1e6 ? fmt::format("{:.0f}M", n / 1e6)
                                : fmt::format("{:.0f}K", n / 1e3);
  std::string t(type_name(dominant_type()));
  for (auto& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return fmt::format("{} {} {}", arch_name(hp_.arch), size, t);
}

void Model::prepare_fused_qkv() {
  if (!fused_.empty()) return;
  fused_.resize(hp_.n_layer);
  fused_ok_.assign(hp_.n_layer, false);
  if (hp_.has_qk_norm()) return;  // qwen3: norms between projection and RoPE; stay unfused
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const LayerWeights& lw = w_.layers[l];
    if (has_data(lw.wqkv)) {
      // phi3: the file already holds [Wq | Wk | Wv]; borrowed, nothing copied or released.
      borrow_fused_qkv(lw, static_cast<int>(l), fused_[l]);
      fused_ok_[l] = true;
      continue;
    }
    fused_ok_[l] = build_fused_qkv(lw, static_cast<int>(l), fused_[l]);
    // The copy read the separate Q, K and V weights once, which left their mapped pages
    // resident next to the copy (25 MiB of peak RSS on a Qwen2.5-0.5B Q8_0, where that made
    // minfer's peak RSS 2.6% above llama.cpp's). The fused graph never reads them again; an
    // unfused graph that does gets them back from the page cache.
    if (fused_ok_[l]) {
      for (const WeightRef* r : {&lw.wq, &lw.wk, &lw.wv}) file_.release_pages(r->data, r->n_bytes);
    }
  }
}

template <class Fn>
void Model::for_each_projection(Fn&& fn) const {
  auto pack = [&](const WeightRef& w) {
    if (has_data(w) && w.ne[1] > 0) fn(w);
  };
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const LayerWeights& lw = w_.layers[l];
    if (const FusedQkv* f = fused_qkv(static_cast<int>(l))) {
      pack(f->weight);
    } else {
      pack(lw.wq);
      pack(lw.wk);
      pack(lw.wv);
    }
    for (const WeightRef* r : {&lw.wo, &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down}) pack(*r);
  }
  pack(w_.output);
}

void Model::prepare_packed(cpu::SimdLevel simd,
                           const std::function<void(uint64_t, uint64_t)>& progress) {
  if (packed_) return;
  packed_ = std::make_unique<cpu::PackedWeights>(simd);
  packed_->reserve(packed_bytes(simd));  // one huge-page region for all copies
  uint64_t total = 0, done = 0;
  if (progress) for_each_projection([&](const WeightRef& w) { total += w.n_bytes; });
  // The originals' pages go as they are packed (a fused copy lies outside the mapping:
  // release_pages ignores it).
  for_each_projection([&](const WeightRef& w) {
    packed_->add(w.type, w.data, w.ne[0], w.ne[1],
                 [this](const void* p, size_t n) { file_.release_pages(p, n); });
    done += w.n_bytes;
    if (progress) progress(done, total);
  });
}

uint64_t Model::packed_bytes(cpu::SimdLevel simd) const {
  uint64_t n = 0;
  for_each_projection([&](const WeightRef& w) {
    n += cpu::PackedWeights::packed_bytes(simd, w.type, w.ne[0], w.ne[1]);
  });
  return n;
}

const FusedQkv* Model::fused_qkv(int layer) const {
  if (fused_.empty() || !fused_ok_[layer]) return nullptr;
  return &fused_[layer];
}

}  // namespace minfer
