#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include <cstring>
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

namespace {

size_t page_round(size_t n) {
  const auto pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + pg - 1) / pg * pg;
}

}  // namespace

Model::Reserved::~Reserved() {
  if (base) munmap(base, size);
}

std::unique_ptr<Model::Reserved> Model::reserve_raw(size_t bytes, const char* what) const {
  // No access until make_fused_readable copies a layer in: an engine that read a weight it
  // neither packed nor copied would fault at once rather than multiply zeros. NORESERVE:
  // address space only; with packing, these pages are never touched.
  void* m = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED)
    fail(ErrorKind::OutOfMemory, "{}: cannot reserve {} bytes for the {} weights: {}", path(),
         bytes, what, std::strerror(errno));
  auto r = std::make_unique<Reserved>();
  r->base = static_cast<uint8_t*>(m);
  r->size = bytes;
  return r;
}

void Model::prepare_fused_qkv() {
  if (!fused_.empty()) return;
  const auto L = static_cast<size_t>(hp_.n_layer);
  fused_.resize(L);
  fused_ok_.assign(L, false);
  if (hp_.has_qk_norm()) return;  // qwen3: norms between projection and RoPE; stay unfused
  // As prepare_fused_ffn: described only, the raw bytes reserved without access. The packed
  // copy is built from the three parts (prepare_packed); only an engine that reads a layer
  // unpacked gets its raw bytes (make_fused_readable), which replace the parts in RSS.
  std::vector<size_t> off(L, 0);
  size_t total = 0;
  for (size_t l = 0; l < L; ++l) {
    FusedQkv d;
    if (!has_data(w_.layers[l].wqkv) &&
        describe_fused_qkv(w_.layers[l], static_cast<int>(l), nullptr, d)) {
      off[l] = total;
      total += page_round(d.weight.n_bytes);
    }
  }
  if (total > 0) qkv_raw_ = reserve_raw(total, "fused QKV");
  for (size_t l = 0; l < L; ++l) {
    const LayerWeights& lw = w_.layers[l];
    if (has_data(lw.wqkv)) {
      // phi3: the file already holds [Wq | Wk | Wv]; borrowed, nothing copied or released.
      borrow_fused_qkv(lw, static_cast<int>(l), fused_[l]);
      fused_ok_[l] = true;
      continue;
    }
    const uint8_t* at = qkv_raw_ ? qkv_raw_->base + off[l] : nullptr;
    fused_ok_[l] = describe_fused_qkv(lw, static_cast<int>(l), at, fused_[l]);
  }
}

void Model::prepare_fused_ffn() {
  if (!gate_up_.empty()) return;
  const auto L = static_cast<size_t>(hp_.n_layer);
  // Sizes first: one reservation for every copied layer, each on its own pages (mprotect).
  std::vector<size_t> off(L, 0);
  size_t total = 0;
  for (size_t l = 0; l < L; ++l) {
    FusedGateUp d;
    if (describe_fused_gate_up(w_.layers[l], static_cast<int>(l), nullptr, d) && !d.borrowed) {
      off[l] = total;
      total += page_round(d.weight.n_bytes);
    }
  }
  if (total > 0) gate_up_raw_ = reserve_raw(total, "fused gate/up");
  gate_up_.resize(L);
  gate_up_ok_.assign(L, false);
  for (size_t l = 0; l < L; ++l) {
    const uint8_t* at = gate_up_raw_ ? gate_up_raw_->base + off[l] : nullptr;
    gate_up_ok_[l] = describe_fused_gate_up(w_.layers[l], static_cast<int>(l), at, gate_up_[l]);
  }
}

const FusedGateUp* Model::fused_gate_up(int layer) const {
  if (gate_up_.empty() || !gate_up_ok_[static_cast<size_t>(layer)]) return nullptr;
  return &gate_up_[static_cast<size_t>(layer)];
}

bool Model::packed_for(const cpu::PackedWeights* reader, cpu::SimdLevel simd,
                       const WeightRef& w) const {
  if (reader == nullptr || reader->simd() != simd) return false;
  // The shape too: a fused weight that borrows the file's bytes shares its key with the gate
  // projection, which a Model packed before fusing holds under it.
  const cpu::PackedWeight* p = reader->find(w.data);
  return p != nullptr && p->n_in == w.ne[0] && p->n_out == w.ne[1];
}

bool Model::fused_readable(const cpu::PackedWeights* reader, cpu::SimdLevel simd) const {
  for (size_t l = 0; l < fused_.size(); ++l)
    if (fused_ok_[l] && !fused_[l].raw && !packed_for(reader, simd, fused_[l].weight)) return false;
  for (size_t l = 0; l < gate_up_.size(); ++l)
    if (gate_up_ok_[l] && !gate_up_[l].raw && !packed_for(reader, simd, gate_up_[l].weight))
      return false;
  return true;
}

void Model::copy_raw(WeightRef& w, std::span<const WeightRef* const> parts) {
  auto* dst = const_cast<uint8_t*>(w.data);  // inside a Reserved range, ours to write
  const size_t n = page_round(w.n_bytes);
  if (mprotect(dst, n, PROT_READ | PROT_WRITE) != 0)
    fail(ErrorKind::OutOfMemory, "{}: cannot commit {} bytes for '{}': {}", path(), n, w.name,
         std::strerror(errno));
  // A projection's rows are contiguous and n_out-major: concatenating along n_out is a
  // concatenation of bytes.
  for (const WeightRef* r : parts) {
    std::memcpy(dst, r->data, r->n_bytes);
    dst += r->n_bytes;
  }
  mprotect(const_cast<uint8_t*>(w.data), n, PROT_READ);  // read-only from here; a failure
                                                         // only leaves it writable
  // The copy replaces the parts in RSS (an unfused graph gets them back from the page cache).
  for (const WeightRef* r : parts) file_.release_pages(r->data, r->n_bytes);
}

void Model::make_fused_readable(const cpu::PackedWeights* reader, cpu::SimdLevel simd) {
  for (size_t l = 0; l < fused_.size(); ++l) {
    FusedQkv& f = fused_[l];
    if (!fused_ok_[l] || f.raw || packed_for(reader, simd, f.weight)) continue;
    const WeightRef* parts[3] = {&f.q, &f.k, &f.v};
    copy_raw(f.weight, parts);
    f.raw = true;
  }
  for (size_t l = 0; l < gate_up_.size(); ++l) {
    FusedGateUp& f = gate_up_[l];
    if (!gate_up_ok_[l] || f.raw || packed_for(reader, simd, f.weight)) continue;
    const WeightRef* parts[2] = {&f.gate, &f.up};
    copy_raw(f.weight, parts);
    f.raw = true;
  }
}

template <class Fn>
void Model::for_each_projection(Fn&& fn) const {
  using Parts = std::span<const WeightRef* const>;
  auto pack = [&](const WeightRef& w, Parts parts = {}) {
    if (has_data(w) && w.ne[1] > 0) fn(w, parts);
  };
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const LayerWeights& lw = w_.layers[l];
    if (const FusedQkv* f = fused_qkv(static_cast<int>(l))) {
      const WeightRef* parts[3] = {&f->q, &f->k, &f->v};
      pack(f->weight, f->borrowed ? Parts{} : Parts{parts});
    } else {
      pack(lw.wq);
      pack(lw.wk);
      pack(lw.wv);
    }
    pack(lw.wo);
    if (const FusedGateUp* f = fused_gate_up(static_cast<int>(l))) {
      const WeightRef* parts[2] = {&f->gate, &f->up};
      pack(f->weight, f->borrowed ? Parts{} : Parts{parts});
    } else {
      pack(lw.ffn_gate);
      pack(lw.ffn_up);
    }
    pack(lw.ffn_down);
  }
  pack(w_.output);
}

void Model::prepare_packed(cpu::SimdLevel simd,
                           const std::function<void(uint64_t, uint64_t)>& progress) {
  if (packed_) return;
  packed_ = std::make_unique<cpu::PackedWeights>(simd);
  packed_->reserve(packed_bytes(simd));  // one huge-page region for all copies
  uint64_t total = 0, done = 0;
  using Parts = std::span<const WeightRef* const>;
  if (progress) for_each_projection([&](const WeightRef& w, Parts) { total += w.n_bytes; });
  // The originals' pages go as they are packed (a fused weight already copied raw lies
  // outside the mapping: release_pages ignores it).
  const auto release = [this](const void* p, size_t n) { file_.release_pages(p, n); };
  for_each_projection([&](const WeightRef& w, Parts parts) {
    if (!parts.empty()) {
      // A fused weight straight from its parts' rows: the raw concatenation is never made.
      cpu::PackedWeights::RowsPart rows[3];
      for (size_t i = 0; i < parts.size(); ++i) rows[i] = {parts[i]->data, parts[i]->ne[1]};
      packed_->add_rows(w.type, w.data, std::span(rows, parts.size()), w.ne[0], release);
    } else {
      packed_->add(w.type, w.data, w.ne[0], w.ne[1], release);
    }
    done += w.n_bytes;
    if (progress) progress(done, total);
  });
}

cpu::RowSource Model::embedding_row_source() const {
  if (!packed_ || !w_.tied_output || !file_.mapped() || packed_->find(w_.output.data) == nullptr)
    return {};
  const gguf::File* f = &file_;
  return {w_.tok_embd.data, w_.tok_embd.n_bytes, [f](const void* p, void* dst, size_t n) {
            if (!f->read_mapped(p, dst, n)) std::memcpy(dst, p, n);
          }};
}

uint64_t Model::packed_bytes(cpu::SimdLevel simd) const {
  uint64_t n = 0;
  for_each_projection([&](const WeightRef& w, std::span<const WeightRef* const>) {
    n += cpu::PackedWeights::packed_bytes(simd, w.type, w.ne[0], w.ne[1]);
  });
  return n;
}

const FusedQkv* Model::fused_qkv(int layer) const {
  if (fused_.empty() || !fused_ok_[layer]) return nullptr;
  return &fused_[layer];
}

}  // namespace minfer
