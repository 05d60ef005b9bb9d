// AVX2 + FMA + F16C matmul tiles (compiled with those flags only; see CMakeLists.txt).
#include "backend/cpu/matmul_impl.h"

#if defined(__x86_64__) && defined(MINFER_X86_KERNELS)
#include <array>
#define MINFER_AVX512 0
#include "backend/cpu/matmul_x86.inc"
namespace minfer::cpu::detail {
const KernelTable* kernels_avx2() {
  return &kTable;
}
}  // namespace minfer::cpu::detail
#else
namespace minfer::cpu::detail {
const KernelTable* kernels_avx2() {
  return nullptr;
}
}  // namespace minfer::cpu::detail
#endif
