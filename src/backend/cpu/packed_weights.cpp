// PackedWeights: see packed_weights.h.
#include "backend/cpu/packed_weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

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

PackedWeights::~PackedWeights() {
  entries_.clear();
  if (region_) munmap(region_, region_size_);
}

void PackedWeights::reserve(size_t bytes) {
  MINFER_ASSERT(region_ == nullptr && entries_.empty(), "packed weights: reserve once, first");
  constexpr size_t kHuge = size_t{2} << 20;
  // Over-map by one huge page so the region can start on a 2 MiB boundary (THP needs aligned
  // 2 MiB ranges); the unused head and tail are unmapped again.
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  if (size == 0) return;
  void* m = mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    fail(ErrorKind::OutOfMemory, "packed weights: cannot map {} bytes: {}", size,
         std::strerror(errno));
  auto* base = static_cast<uint8_t*>(m);
  auto* start = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) &
                                           ~uintptr_t{kHuge - 1});
  if (start > base) munmap(base, start - base);
  if (start + size < base + size + kHuge)
    munmap(start + size, base + size + kHuge - (start + size));
  // Advice only: without THP (or with it off) the region still works on 4 KiB pages.
  madvise(start, size, MADV_HUGEPAGE);
  region_ = start;
  region_size_ = size;
  region_cap_ = bytes & ~size_t{63};  // copies are 64-byte multiples
}

bool PackedWeights::decodes_packed(SimdLevel simd) {
  const detail::KernelTable& t = detail::select_table(simd);
  for (const detail::TypeKernel* k :
       {&t.f32, &t.f16, &t.bf16, &t.q4_0, &t.q5_0, &t.q8_0, &t.q4_k, &t.q5_k, &t.q6_k})
    if (k->prepacked.rows > 0 && k->prepacked.gemv == nullptr) return false;
  return true;
}

size_t PackedWeights::packed_bytes(SimdLevel simd, GgmlType type, int64_t n_in, int64_t n_out) {
  const detail::PrepackedKernel* pk = layout_for(simd, type);
  if (!pk || n_in % type_traits(type).block_size != 0) return 0;
  return (size_t)((n_out + pk->rows - 1) / pk->rows) * pk->panel_bytes(n_in);
}

bool PackedWeights::add(GgmlType type, const void* w, int64_t n_in, int64_t n_out,
                        const DoneFn& done) {
  const RowsPart part{w, n_out};
  return add_rows(type, w, std::span<const RowsPart>(&part, 1), n_in, done);
}

bool PackedWeights::add_rows(GgmlType type, const void* key, std::span<const RowsPart> parts,
                             int64_t n_in, const DoneFn& done) {
  if (entries_.count(key)) return true;
  // first[k]: the first row of part k in the concatenation; first[parts.size()] = n_out.
  std::vector<int64_t> first(parts.size() + 1, 0);
  for (size_t k = 0; k < parts.size(); ++k) {
    MINFER_ASSERT(parts[k].n_rows >= 0 && parts[k].data, "packed weights: bad part");
    first[k + 1] = first[k] + parts[k].n_rows;
  }
  const int64_t n_out = first.back();
  const detail::PrepackedKernel* pk = layout_for(simd_, type);
  const size_t bytes = packed_bytes(simd_, type, n_in, n_out);
  if (!pk || bytes == 0 || n_out <= 0) return false;
  Entry e;
  uint8_t* p = nullptr;
  if (region_ && region_cap_ - region_used_ >= bytes) {  // bytes is a 64-byte multiple
    p = region_ + region_used_;
    region_used_ += bytes;
  } else {
    p = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
    if (!p) fail(ErrorKind::OutOfMemory, "packed weights: cannot allocate {} bytes", bytes);
    e.buf.reset(p);
  }
  const size_t rs = row_size(type, n_in), pb = pk->panel_bytes(n_in);
  MINFER_ASSERT(pb % 64 == 0, "packed weights: panel bytes not a 64-byte multiple");
  auto row = [&](size_t k, int64_t r) {
    return static_cast<const uint8_t*>(parts[k].data) + static_cast<size_t>(r - first[k]) * rs;
  };
  constexpr int64_t kDoneBytes = int64_t{4} << 20;
  std::vector<int64_t> done_rows(first.begin(), first.end() - 1);  // per part: released up to
  std::vector<uint8_t> stage;
  size_t k = 0;  // the part holding row r
  for (int64_t r = 0, i = 0; r < n_out; r += pk->rows, ++i) {
    const int nr = (int)std::min<int64_t>(pk->rows, n_out - r);
    while (first[k + 1] <= r) ++k;
    if (r + nr <= first[k + 1]) {
      pk->pack(row(k, r), rs, nr, n_in, p + i * pb);
    } else {  // the panel straddles parts (n_rows not a multiple of R): gather its rows
      stage.resize(static_cast<size_t>(pk->rows) * rs);
      for (int j = 0, kk = static_cast<int>(k); j < nr; ++j) {
        while (first[kk + 1] <= r + j) ++kk;
        std::memcpy(stage.data() + j * rs, row(kk, r + j), rs);
      }
      pk->pack(stage.data(), rs, nr, n_in, p + i * pb);
    }
    if (!done) continue;
    for (size_t kk = k; kk < parts.size() && first[kk] < r + nr; ++kk) {
      const int64_t end = std::min(r + nr, first[kk + 1]);
      if ((end - done_rows[kk]) * static_cast<int64_t>(rs) >= kDoneBytes || end == first[kk + 1]) {
        if (end > done_rows[kk])
          done(row(kk, done_rows[kk]), static_cast<size_t>(end - done_rows[kk]) * rs);
        done_rows[kk] = end;
      }
    }
  }
  // Pages straddling two ranges were kept by both calls: once more over each whole part.
  if (done)
    for (size_t kk = 0; kk < parts.size(); ++kk)
      if (parts[kk].n_rows > 0) done(parts[kk].data, static_cast<size_t>(parts[kk].n_rows) * rs);
  e.w = PackedWeight{p, pk, type, n_in, n_out, bytes};
  bytes_ += bytes;
  entries_.emplace(key, std::move(e));
  return true;
}

const PackedWeight* PackedWeights::find(const void* w) const {
  const auto it = entries_.find(w);
  return it == entries_.end() ? nullptr : &it->second.w;
}

}  // namespace minfer::cpu
