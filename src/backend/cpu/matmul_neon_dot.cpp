// AArch64 matmul tiles, NEON + dot product (compiled with -march=armv8.2-a+dotprod only; see
// CMakeLists.txt).
#include "backend/cpu/matmul_impl.h"

#if defined(__aarch64__) && defined(MINFER_ARM_KERNELS)
#define MINFER_NEON_DOT 1
#include "backend/cpu/matmul_neon.inc"
namespace minfer::cpu::detail {
const KernelTable* kernels_neon_dot() {
  return &kTable;
}
}  // namespace minfer::cpu::detail
#else
namespace minfer::cpu::detail {
const KernelTable* kernels_neon_dot() {
  return nullptr;
}
}  // namespace minfer::cpu::detail
#endif
