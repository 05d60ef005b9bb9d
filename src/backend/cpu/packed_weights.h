// PackedWeights: weight matrices repacked once at load into the matmul kernels' compact panel
// layout (matmul_impl.h, PrepackedKernel), so prefill and batched decode never re-pack a weight
// and a decode step streams each weight byte once, in the order the kernel reads it.
//
// Which weights: those whose type has a load-time layout in the kernel table the given SIMD
// level selects (today AVX-512 VNNI and AVX2: Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K;
// docs/KERNELS.md); add() returns false for the rest, and matmul() reads those from their
// original bytes as before. The packed copy has about the size of the original (codes keep
// their width, scales stay f16, each panel rounded up to 64 bytes; K-quants +1-8%), so a
// caller that releases the original's mapped pages (Model does) keeps RSS level.
//
// Memory: reserve() maps one anonymous region for all the copies to come, advised for
// transparent huge pages, and add() carves 64-byte aligned slices from it (a copy that does
// not fit, or any copy without reserve(), gets its own heap buffer). Why: 500 MB of fresh 4 KiB
// pages cost 128K page faults at load (2-3x the packing itself, perf at c457ab1), and decode
// walks them with a TLB miss per page; 2 MiB pages make that ~250 faults.
// Ownership: owns every packed buffer (the region and heap buffers, freed with the object);
// PackedWeight pointers from find() stay valid for the object's life (entries are never
// removed or moved). The original weights are only read during add().
// Thread safety: add() must not race with anything; find() and the packed data are read-only
// afterwards and may be used from any number of threads.
// Failure: add() throws Error(OutOfMemory) when the buffer cannot be allocated.
// Cost: add() is one pass over the weight (plain C++ byte shuffling, ~1 GB/s); find() is one
// hash lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>

#include "backend/cpu/kernels.h"
#include "common/dtype.h"

namespace minfer::cpu {

struct PackedWeight {
  const void* data = nullptr;    // panels, 64-byte aligned
  const void* layout = nullptr;  // the kernel layout it was packed for (matmul() checks it)
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0, n_out = 0;
  size_t bytes = 0;
};

class PackedWeights {
 public:
  explicit PackedWeights(SimdLevel simd = SimdLevel::kBest) : simd_(simd) {}
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;
  ~PackedWeights();

  // Whether every load-time layout at this level has a one-column decode kernel
  // (PrepackedKernel::gemv). Without one, decode runs the panel gemm at one column, which
  // lacks the prefetching and is slower than the GEMV on the GGUF layout past the LLC (AVX2
  // Q8_0 0.5B, one thread: 14.5 against 24.8 t/s), so a one-sequence engine should not repack.
  static bool decodes_packed(SimdLevel simd);
  // Bytes add() would allocate for this weight at this level; 0 when its type has no layout.
  static size_t packed_bytes(SimdLevel simd, GgmlType type, int64_t n_in, int64_t n_out);

  // Packs w (n_out rows of row_size(type, n_in) bytes) unless already packed; false when the
  // type has no load-time layout at this level (nothing is stored). `done`, when given, is
  // called with each consecutive range of w already packed (a few MiB at a time, covering all
  // of w by the end), so a caller can drop the original's pages while the copy grows and the
  // peak RSS stays at about one copy.
  using DoneFn = std::function<void(const void* p, size_t n)>;
  // One region of `bytes` (the sum of packed_bytes() of the weights to add) for the copies;
  // call once, before add(). Pages are committed as add() writes them. Throws
  // Error(OutOfMemory) when the mapping fails.
  void reserve(size_t bytes);
  bool add(GgmlType type, const void* w, int64_t n_in, int64_t n_out, const DoneFn& done = {});
  // Rows from several matrices of one type and n_in, packed as their concatenation along n_out
  // (part 0's rows first) under the lookup key `key` (find(key)); e.g. a layer's gate and up
  // projections as one [W_gate | W_up] weight. No copy of the concatenation is made: a panel
  // inside one part packs from it in place, one that straddles two parts from its R rows
  // staged. `done` as add()'s, per part. Same result as add() over the concatenated bytes.
  struct RowsPart {
    const void* data;
    int64_t n_rows;
  };
  bool add_rows(GgmlType type, const void* key, std::span<const RowsPart> parts, int64_t n_in,
                const DoneFn& done = {});
  // The packed copy of the weight whose original bytes start at w, or nullptr.
  const PackedWeight* find(const void* w) const;

  SimdLevel simd() const { return simd_; }
  size_t bytes() const { return bytes_; }
  size_t count() const { return entries_.size(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  struct Entry {
    PackedWeight w;
    std::unique_ptr<uint8_t, Free> buf;
  };
  SimdLevel simd_;
  size_t bytes_ = 0;
  uint8_t* region_ = nullptr;  // reserve()'s mapping (region_size_ bytes mapped, the first
  size_t region_size_ = 0;     // region_cap_ usable, region_used_ of them carved)
  size_t region_cap_ = 0, region_used_ = 0;
  std::unordered_map<const void*, Entry> entries_;
};

}  // namespace minfer::cpu
