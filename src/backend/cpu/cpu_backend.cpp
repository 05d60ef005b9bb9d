#include "backend/cpu/cpu_backend.h"

namespace minfer::cpu {

CpuBackend::CpuBackend(const CpuBackendOptions& opts)
    : pool_(opts.n_threads < 1 ? 1 : opts.n_threads), simd_(opts.simd) {}

CpuBackend::~CpuBackend() = default;

}  // namespace minfer::cpu
