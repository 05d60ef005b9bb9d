// AArch64 matmul tiles, baseline ARMv8.0-A NEON (no extra flags).
#include "backend/cpu/matmul_impl.h"

#if defined(__aarch64__) && defined(MINFER_ARM_KERNELS)
#define MINFER_NEON_DOT 0
#include "backend/cpu/matmul_neon.inc"
namespace minfer::cpu::detail {
const KernelTable* kernels_neon() {
  return &kTable;
}
}  // namespace minfer::cpu::detail
#else
namespace minfer::cpu::detail {
const KernelTable* kernels_neon() {
  return nullptr;
}
}  // namespace minfer::cpu::detail
#endif
