// CPU feature detection, the scratch arena and Exec helpers.
#include <cstdio>
#include <cstdlib>
#include <new>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "common/error.h"

namespace minfer::cpu {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 itself: clang (Debian 12's 14) has no "f16c" in
  // __builtin_cpu_supports, and the AVX2 check above it already covers the OS's ymm state.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  f.avx_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#elif defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is mandatory in AArch64
#if defined(__linux__)
  f.neon_dot = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__ARM_FEATURE_DOTPROD)
  f.neon_dot = true;  // elsewhere (macOS: every Apple core has it) trust the compile target
#endif
#endif
  // MINFER_SIMD=scalar|avx2|neon caps the level (debugging, A/B measurements).
  if (const char* env = std::getenv("MINFER_SIMD")) {
    const std::string_view v(env);
    if (v == "scalar") f = CpuFeatures{};
    if (v == "avx2") f.avx512 = f.avx_vnni = false;
    if (v == "neon") f.neon_dot = false;
    // A typo must not pass for a measurement of another ISA. No throw: the first caller may be
    // a pool worker deep in a kernel dispatch, so the value is named and ignored instead.
    if (v != "scalar" && v != "avx2" && v != "neon" && v != "native" && !v.empty())
      std::fprintf(stderr,
                   "minfer: MINFER_SIMD='%s' is not one of native, avx2, neon, scalar; "
                   "ignored (the CPU's own level is used)\n",
                   env);
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Arena::~Arena() {
  std::free(ptr_);
}

void* Arena::get(size_t bytes) {
  if (bytes <= cap_) return ptr_;
  // Grow geometrically so a slowly increasing demand settles after a few steps.
  size_t cap = cap_ ? cap_ : 4096;
  while (cap < bytes) cap *= 2;
  void* p = std::aligned_alloc(64, cap);
  if (!p) fail(ErrorKind::OutOfMemory, "cpu scratch arena: cannot allocate {} bytes", cap);
  std::free(ptr_);
  ptr_ = p;
  cap_ = cap;
  ++grows_;
  return ptr_;
}

int Exec::n_threads() const {
  return pool ? pool->size() : 1;
}

}  // namespace minfer::cpu
