// AVX-512 (F/BW/VL) + VNNI matmul tiles on 256-bit vectors with 32 registers (compiled with
// those flags only; see CMakeLists.txt).
#include "backend/cpu/matmul_impl.h"

#if defined(__x86_64__) && defined(MINFER_X86_KERNELS)
#include <array>
#define MINFER_AVX512 1
#include "backend/cpu/matmul_x86.inc"
namespace minfer::cpu::detail {
const KernelTable* kernels_avx512() {
  return &kTable;
}
}  // namespace minfer::cpu::detail
#else
namespace minfer::cpu::detail {
const KernelTable* kernels_avx512() {
  return nullptr;
}
}  // namespace minfer::cpu::detail
#endif
