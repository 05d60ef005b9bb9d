// AVX-512 (F/BW/VL) + VNNI matmul tiles on 256-bit vectors with 32 registers (compiled with
// those flags only; see CMakeLists.txt).

// gcc 12's _mm512_undefined_ps() initialises a variable from itself (`__m512 __Y = __Y;`), so
// every inlined caller warns "may be used uninitialized" at the header's line (GCC bug 105593,
// fixed in gcc 13). The pragma must come before <immintrin.h> is first included to cover it.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "backend/cpu/matmul_impl.h"

#if defined(__x86_64__) && defined(MINFER_X86_KERNELS)
#include <array>
#define MINFER_AVX512 1
#include "backend/cpu/matmul_x86.inc"
namespace minfer::cpu::detail {
const KernelTable* kernels_avx512() {
  // Q5_K has no AVX-512 panel layout, per call or at load, so this table alone would leave it on
  // row tiles for prefill and decode. The AVX2 panels use a subset of this machine's
  // instructions and beat those row tiles at both (docs/KERNELS.md), so the table borrows them.
  // Only Q5_K: Q5_0 and Q6_K have AVX-512 layouts of their own (matmul_prepacked_x86.inc,
  // matmul_prepacked_avx512.inc), which prefill faster than the AVX2 ones.
  static const KernelTable table = [] {
    KernelTable t = kTable;
    if (const KernelTable* avx2 = kernels_avx2()) {
      t.q5_k.packed = avx2->q5_k.packed;
      t.q5_k.prepacked = avx2->q5_k.prepacked;
    }
    return t;
  }();
  return &table;
}
}  // namespace minfer::cpu::detail
#else
namespace minfer::cpu::detail {
const KernelTable* kernels_avx512() {
  return nullptr;
}
}  // namespace minfer::cpu::detail
#endif
