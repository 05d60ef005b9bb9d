// PackedWeights: see packed_weights.h.
#include "backend/cpu/packed_weights.h"

#include <algorithm>
#include <cstdlib>

#include "backend/cpu/matmul_impl.h"
#include "common/error.h"

namespace minfer::cpu {
namespace {

const detail::PrepackedKernel* layout_for(SimdLevel simd, GgmlType type) {
  const detail::TypeKernel* k = detail::type_kernel(detail::select_table(simd), type);
  if (!k || k->prepacked.rows == 0) return nullptr;
  return &k->prepacked;
}

}  // namespace

void PackedWeights::Free::operator()(void* p) const {
  std::free(p);
}

size_t PackedWeights::packed_bytes(SimdLevel simd, GgmlType type, int64_t n_in, int64_t n_out) {
  const detail::PrepackedKernel* pk = layout_for(simd, type);
  if (!pk || n_in % type_traits(type).block_size != 0) return 0;
  return (size_t)((n_out + pk->rows - 1) / pk->rows) * pk->panel_bytes(n_in);
}

bool PackedWeights::add(GgmlType type, const void* w, int64_t n_in, int64_t n_out,
                        const DoneFn& done) {
  if (entries_.count(w)) return true;
  const detail::PrepackedKernel* pk = layout_for(simd_, type);
  const size_t bytes = packed_bytes(simd_, type, n_in, n_out);
  if (!pk || bytes == 0 || n_out <= 0) return false;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) fail(ErrorKind::OutOfMemory, "packed weights: cannot allocate {} bytes", bytes);
  Entry e;
  e.buf.reset(static_cast<uint8_t*>(p));
  const size_t rs = row_size(type, n_in), pb = pk->panel_bytes(n_in);
  const auto* src = static_cast<const uint8_t*>(w);
  constexpr size_t kDoneBytes = size_t{4} << 20;
  int64_t done_rows = 0;
  for (int64_t r = 0, i = 0; r < n_out; r += pk->rows, ++i) {
    const int nr = (int)std::min<int64_t>(pk->rows, n_out - r);
    pk->pack(src + r * rs, rs, nr, n_in, e.buf.get() + i * pb);
    if (done && ((size_t)(r + nr - done_rows) * rs >= kDoneBytes || r + nr == n_out)) {
      done(src + done_rows * rs, (size_t)(r + nr - done_rows) * rs);
      done_rows = r + nr;
    }
  }
  // Pages straddling two ranges were kept by both calls: once more over the whole weight.
  if (done) done(src, (size_t)n_out * rs);
  e.w = PackedWeight{e.buf.get(), pk, type, n_in, n_out, bytes};
  bytes_ += bytes;
  entries_.emplace(w, std::move(e));
  return true;
}

const PackedWeight* PackedWeights::find(const void* w) const {
  const auto it = entries_.find(w);
  return it == entries_.end() ? nullptr : &it->second.w;
}

}  // namespace minfer::cpu
