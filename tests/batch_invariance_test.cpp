// minfer-test-libs: minfer_backend_cpu minfer_alloc minfer_graph minfer_common
// Batch invariance of the CPU matmul (docs/NUMERICS.md "Batch invariance"): column j of a
// matmul over m activation columns must equal, bit for bit, the matmul of column j alone, for
// the weight layouts graph mode uses by default (the load-time packed panels; float weights),
// at every x86 SIMD level and thread count. Decode (m = 1: the GEMV kernels), small batches (tiles,
// gemm_stream), prefill widths (the per-call packed panels, the expand step) all take different
// kernels; each must sum a column in the same order. The model-level checks (Session rows,
// SeqEngine sequences, self-draft acceptance) are in model_batch_invariance_test.cpp and
// spec_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/packed_weights.h"
#include "common/quant.h"
#include "cpu_test_util.h"
#include "numeric_test_util.h"

namespace minfer::cpu {
namespace {

using test::randn;

struct Level {
  const char* name;
  SimdLevel simd;
};

std::vector<Level> levels() {
  std::vector<Level> v{{"scalar", SimdLevel::kScalar}};
  const CpuFeatures& f = cpu_features();
  if (f.avx2 && detail::kernels_avx2()) v.push_back({"avx2", SimdLevel::kAvx2});
  if (f.avx512 && f.avx_vnni && detail::kernels_avx512())
    v.push_back({"avx512", SimdLevel::kAvx512Vnni});
  // NEON: not checked (no load-time layouts; its tiles were never compared column by column).
  return v;
}

std::vector<uint8_t> quantized(GgmlType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  auto wf = randn(n_in * n_out, seed, 0.05f);
  if (t == GgmlType::F32) {
    std::vector<uint8_t> w(wf.size() * 4);
    std::memcpy(w.data(), wf.data(), w.size());
    return w;
  }
  std::vector<uint8_t> w(row_size(t, n_in) * n_out);
  for (int64_t r = 0; r < n_out; ++r)
    quantize_row(t, wf.data() + r * n_in, w.data() + r * row_size(t, n_in), n_in);
  return w;
}

bool quantized_type(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::Q4_0, GgmlType::Q5_0,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// y = W x for columns [c0, c0 + m) of x (n_in x 80 column-major), m columns at once.
std::vector<float> run(const test::CpuCtx& c, GgmlType t, const std::vector<uint8_t>& w,
                       const PackedWeight* pk, const std::vector<float>& x, int64_t n_in,
                       int64_t n_out, int64_t c0, int64_t m) {
  std::vector<float> y(n_out * m, -7.0f);
  MatmulArgs a{t, w.data(), n_in, n_out, x.data() + c0 * n_in, n_in, m, y.data(), n_out};
  a.packed = pk;
  matmul(c.ex, a);
  return y;
}

// Column j of an m-column matmul == the one-column matmul of column j, for m = 2, 5, 17, 64
// (decode GEMV, small-batch gemm_stream, gemm, expand), 1 and 2 threads: the load-time packed
// layouts at AVX2 and AVX-512, float weights (F32 / F16 tiles and their GEMV), every type at
// the scalar level.
TEST(BatchInvariance, MatmulColumnDoesNotDependOnBatchWidth) {
  const int64_t n_in = 1024, n_out = 200;  // 200: a partial last panel / tile
  auto x = randn(n_in * 80, 7, 1.0f);
  for (const Level& lv : levels()) {
    for (GgmlType t : kTypes) {
      auto w = quantized(t, n_in, n_out, 11 + (uint32_t)t);
      PackedWeights pw(lv.simd);
      const bool has_pack = t != GgmlType::F32 && pw.add(t, w.data(), n_in, n_out);
      for (const PackedWeight* pk : {(const PackedWeight*)nullptr, pw.find(w.data())}) {
        if (pk != nullptr && !has_pack) continue;
        // Quantized weights in the GGUF layout (--no-repack, --exec eager) are NOT batch
        // invariant on x86: the row tiles (m < 8, and the Q4_0 / Q5_0 GEMV's block pairs) and
        // the per-call packed panels (m >= 8) sum in different orders (docs/NUMERICS.md).
        if (pk == nullptr && quantized_type(t) && lv.simd != SimdLevel::kScalar) continue;
        for (int th : {1, 2}) {
          const test::CpuCtx c(th, lv.simd);
          std::vector<std::vector<float>> one(64);
          for (int64_t j = 0; j < 64; ++j) one[j] = run(c, t, w, pk, x, n_in, n_out, j, 1);
          for (int64_t m : {2, 5, 17, 64}) {
            // Start at column 3 so the columns of the batch are not the batch's own first.
            const int64_t c0 = m == 64 ? 0 : 3;
            const auto y = run(c, t, w, pk, x, n_in, n_out, c0, m);
            int64_t bad = 0, first = -1;
            float worst = 0;
            for (int64_t j = 0; j < m; ++j)
              for (int64_t r = 0; r < n_out; ++r) {
                const float a = y[j * n_out + r], b = one[c0 + j][r];
                if (a != b) {
                  if (bad++ == 0) first = j * n_out + r;
                  worst = std::max(worst, std::fabs(a - b));
                }
              }
            EXPECT_EQ(bad, 0) << lv.name << " " << type_name(t) << " packed=" << (pk != nullptr)
                              << " th=" << th << " m=" << m << ": " << bad
                              << " values differ, first at " << first << ", max |diff| " << worst;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace minfer::cpu
