// minfer-test-libs: minfer_eager minfer_model minfer_kv minfer_backend_cpu
// KV cache element types (f32 / f16 / q8_0): the type names, the CPU kernels that write and read
// f16 and Q8_0 rows (fast paths at every SIMD level against the reference twins), the
// allocator's regions, and whole models: f16 vs f32 logits on stories260K, q8_0 vs f16 logits
// on a generated head_dim-64 model, graph vs eager with f16 and q8_0, `minfer` flags.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "common/error.h"
#include "common/fp16.h"
#include "common/quant.h"
#include "cpu_test_util.h"
#include "eager/forward.h"
#include "kv/cache_type.h"
#include "model/model.h"
#include "model/session.h"
#include "numeric_test_util.h"
#include "tiny_model.h"

namespace minfer {
namespace {

using test::nmse;
using test::randn;

namespace fs = std::filesystem;
using cpu::AttentionArgs;
using cpu::HeadLayout;
using cpu::KvRegions;
using cpu::SimdLevel;

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_fp16(x[i]);
  return h;
}

const SimdLevel kLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kBest};

using Ctx = test::CpuCtx;

// ---- type names ------------------------------------------------------------------------------

TEST(KvCacheType, ParsesCaseInsensitiveAndNamesTheFlagOnError) {
  EXPECT_EQ(parse_kv_cache_type("--cache-type-k", "f16"), GgmlType::F16);
  EXPECT_EQ(parse_kv_cache_type("--cache-type-k", "F16"), GgmlType::F16);
  EXPECT_EQ(parse_kv_cache_type("--cache-type-v", "F32"), GgmlType::F32);
  EXPECT_EQ(parse_kv_cache_type("--cache-type-k", "q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(parse_kv_cache_type("--cache-type-v", "Q8_0"), GgmlType::Q8_0);
  for (const char* bad : {"q5_1", "q4_0", "bogus", "", "f64x"}) {
    try {
      parse_kv_cache_type("--cache-type-v", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--cache-type-v"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    }
  }
  // Qwen2.5-0.5B: 24 layers, 2 KV heads of 64, 4096 tokens: 96 MiB f32, 48 MiB f16.
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::F32, GgmlType::F32), 96ull << 20);
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::F16, GgmlType::F16), 48ull << 20);
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::F16, GgmlType::F32), 72ull << 20);
  // q8_0: 34 bytes per 32 values (4 blocks a row of 128): 25.5 MiB, 17/32 of f16.
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::Q8_0, GgmlType::Q8_0),
            24ull * 4096 * 2 * (4 * 34));
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::Q8_0, GgmlType::Q8_0) * 32,
            kv_cache_bytes(24, 128, 4096, GgmlType::F16, GgmlType::F16) * 17);
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::Q8_0, GgmlType::F16),
            24ull * 4096 * (4 * 34 + 128 * 2));
}

TEST(KvCacheType, Q8_0NeedsHeadDimAMultipleOf32) {
  EXPECT_NO_THROW(check_kv_cache_type_fits("--cache-type-k", GgmlType::Q8_0, 64, 128));
  EXPECT_NO_THROW(check_kv_cache_type_fits("--cache-type-k", GgmlType::Q8_0, 32, 32));
  for (GgmlType t : {GgmlType::F32, GgmlType::F16})
    EXPECT_NO_THROW(check_kv_cache_type_fits("--cache-type-k", t, 8, 32));
  // stories260K: head_dim 8, 4 KV heads (rows of 32 would fit, heads would not); and 48.
  for (int64_t hd : {8, 48, 0}) {
    try {
      check_kv_cache_type_fits("--cache-type-v", GgmlType::Q8_0, hd, 4 * hd);
      ADD_FAILURE() << "accepted head_dim " << hd;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      const std::string msg = e.what();
      for (const std::string& part :
           {std::string("--cache-type-v"), std::string("'q8_0'"), "head_dim " + std::to_string(hd),
            std::string("multiple of 32")})
        EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
    }
  }
}

// ---- kernels ---------------------------------------------------------------------------------

TEST(KvKernels, StoreConvertsLikeTheScalarHelperAtEveryLevel) {
  const int64_t e = 37, n_ctx = 12, nt = 5;  // odd width: vector body and scalar tail
  auto k = randn(e * nt, 1, 3.0f), v = randn(e * nt, 2, 3.0f);
  k[0] = 70000.0f;  // overflows f16: inf, as f32_to_fp16
  k[1] = 1e-6f;     // f16 subnormal
  const std::vector<int32_t> pos = {0, 3, 4, 11, 7};
  std::vector<uint16_t> kw(e * n_ctx), vw(e * n_ctx);
  cpu::ref::kv_store(k.data(), e, v.data(), e, e, nt, pos.data(),
                     KvRegions{kw.data(), vw.data(), GgmlType::F16, GgmlType::F16}, n_ctx);
  for (int64_t t = 0; t < nt; ++t)
    for (int64_t i = 0; i < e; ++i) {
      ASSERT_EQ(kw[pos[t] * e + i], f32_to_fp16(k[t * e + i]));
      ASSERT_EQ(vw[pos[t] * e + i], f32_to_fp16(v[t * e + i]));
    }
  for (SimdLevel lvl : kLevels) {
    for (int th = 1; th <= 3; ++th) {
      Ctx c(th, lvl);
      std::vector<uint16_t> kg(e * n_ctx), vg(e * n_ctx);
      cpu::kv_store(c.ex, k.data(), e, v.data(), e, e, nt, pos.data(),
                    KvRegions{kg.data(), vg.data(), GgmlType::F16, GgmlType::F16}, n_ctx);
      EXPECT_EQ(kg, kw) << "level " << int(lvl);
      EXPECT_EQ(vg, vw) << "level " << int(lvl);
    }
  }
  // Mixed: K f16, V f32 (V rows copied).
  Ctx c(2);
  std::vector<uint16_t> kg(e * n_ctx);
  std::vector<float> vf(e * n_ctx, 0.0f);
  cpu::kv_store(c.ex, k.data(), e, v.data(), e, e, nt, pos.data(),
                KvRegions{kg.data(), vf.data(), GgmlType::F16, GgmlType::F32}, n_ctx);
  EXPECT_EQ(kg, kw);
  EXPECT_EQ(vf[pos[2] * e + 5], v[2 * e + 5]);
  // A bad position writes nothing; an unsupported type is refused.
  const std::vector<int32_t> bad = {1, 2, 12, 3, 4};
  const auto before = kg;
  std::vector<uint16_t> vh(e * n_ctx);
  EXPECT_THROW(cpu::kv_store(c.ex, k.data(), e, v.data(), e, e, nt, bad.data(),
                             KvRegions{kg.data(), vh.data(), GgmlType::F16, GgmlType::F16}, n_ctx),
               Error);
  EXPECT_EQ(kg, before);
  EXPECT_THROW(cpu::kv_store(c.ex, k.data(), e, v.data(), e, e, nt, pos.data(),
                             KvRegions{kg.data(), vf.data(), GgmlType::Q8_0, GgmlType::F32}, n_ctx),
               Error);
}

// Q8_0 rows: the fast store writes exactly the blocks of common/quant.h's quantize_row (the one
// Q8_0 quantizer), at every level and thread count, and so does the reference.
TEST(KvKernels, StoreQuantizesQ8_0RowsWithTheReferenceQuantizer) {
  const int64_t e = 96, n_ctx = 12, nt = 5;  // 3 blocks a row
  auto k = randn(e * nt, 1, 3.0f), v = randn(e * nt, 2, 3.0f);
  std::fill(k.begin() + 32, k.begin() + 64, 0.0f);  // an all-zero block: d = 0, codes 0
  const std::vector<int32_t> pos = {0, 3, 4, 11, 7};
  const size_t rs = row_size(GgmlType::Q8_0, e);
  ASSERT_EQ(rs, 3u * 34u);
  std::vector<uint8_t> kw(rs * n_ctx), vw(rs * n_ctx);
  for (int64_t t = 0; t < nt; ++t) {
    quantize_row(GgmlType::Q8_0, k.data() + t * e, kw.data() + pos[t] * rs, e);
    quantize_row(GgmlType::Q8_0, v.data() + t * e, vw.data() + pos[t] * rs, e);
  }
  std::vector<uint8_t> kr(kw.size()), vr(vw.size());
  cpu::ref::kv_store(k.data(), e, v.data(), e, e, nt, pos.data(),
                     KvRegions{kr.data(), vr.data(), GgmlType::Q8_0, GgmlType::Q8_0}, n_ctx);
  EXPECT_EQ(kr, kw);
  EXPECT_EQ(vr, vw);
  for (SimdLevel lvl : kLevels) {
    for (int th = 1; th <= 3; ++th) {
      Ctx c(th, lvl);
      std::vector<uint8_t> kg(kw.size()), vg(vw.size());
      cpu::kv_store(c.ex, k.data(), e, v.data(), e, e, nt, pos.data(),
                    KvRegions{kg.data(), vg.data(), GgmlType::Q8_0, GgmlType::Q8_0}, n_ctx);
      EXPECT_EQ(kg, kw) << "level " << int(lvl);
      EXPECT_EQ(vg, vw) << "level " << int(lvl);
    }
  }
  // Each stored value is within half a step (d / 2, d = amax / 127) of the input.
  std::vector<float> back(e);
  dequantize_row(GgmlType::Q8_0, kw.data() + pos[1] * rs, back.data(), e);
  for (int64_t b = 0; b < e / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(k[e + b * 32 + i]));
    for (int i = 0; i < 32; ++i)
      ASSERT_LE(std::fabs(back[b * 32 + i] - k[e + b * 32 + i]), amax / 127 * 0.51f + 1e-6f);
  }
  // Rows that are not whole blocks are refused before anything is written, never aborted.
  Ctx c(2);
  std::vector<uint8_t> big(4096);
  EXPECT_THROW(cpu::kv_store(c.ex, k.data(), 40, v.data(), 40, 40, 2, pos.data(),
                             KvRegions{big.data(), big.data(), GgmlType::Q8_0, GgmlType::F32}, 4),
               Error);
  EXPECT_THROW(
      cpu::ref::kv_store(k.data(), 40, v.data(), 40, 40, 2, pos.data(),
                         KvRegions{big.data(), big.data(), GgmlType::F16, GgmlType::Q8_0}, 4),
      Error);
}

struct AttnCase {
  int64_t hd, nh, nkv, n_tok, first_pos, n_ctx;
};

// The same awkward shapes as the f32 attention test: decode and prefill, GQA groups, head_dim
// 8..64 and an odd 13 (scalar tails), a long context crossing several tiles.
const AttnCase kAttnCases[] = {{8, 8, 4, 1, 0, 16},    {16, 4, 4, 5, 3, 32},
                               {8, 8, 4, 77, 0, 100},  {64, 14, 2, 3, 150, 256},
                               {13, 6, 2, 70, 0, 80},  {64, 4, 1, 1, 199, 200},
                               {8, 2, 1, 130, 5, 140}, {32, 4, 2, 2, 300, 320}};

TEST(KvKernels, AttentionOverF16MatchesReferenceAtEveryLevel) {
  const std::array<std::array<GgmlType, 2>, 3> types = {{{GgmlType::F16, GgmlType::F16},
                                                         {GgmlType::F16, GgmlType::F32},
                                                         {GgmlType::F32, GgmlType::F16}}};
  for (const auto& cs : kAttnCases) {
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    const auto kf = randn(n_kv_embd * cs.n_ctx, 1), vf = randn(n_kv_embd * cs.n_ctx, 2);
    const auto kh = to_f16(kf), vh = to_f16(vf);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, cs.hd * cs.nh + 3};
    const auto q = randn(lq.ts() * cs.n_tok, 3, 2.0f);
    std::vector<int32_t> pos(cs.n_tok);
    for (int64_t t = 0; t < cs.n_tok; ++t) pos[t] = (int32_t)(cs.first_pos + t);
    for (const auto& tp : types) {
      std::vector<float> want(cs.hd * cs.nh * cs.n_tok), got(want.size());
      AttentionArgs a{q.data(),        lq,         nullptr,
                      nullptr,         n_kv_embd,  cs.n_ctx,
                      (int32_t)cs.nkv, pos.data(), 1.0f / std::sqrt((float)cs.hd),
                      want.data(),     tp[0],      tp[1]};
      a.k = tp[0] == GgmlType::F16 ? static_cast<const void*>(kh.data()) : kf.data();
      a.v = tp[1] == GgmlType::F16 ? static_cast<const void*>(vh.data()) : vf.data();
      cpu::ref::attention(a);
      for (SimdLevel lvl : kLevels) {
        for (int th = 1; th <= 3; ++th) {
          Ctx c(th, lvl);
          a.out = got.data();
          cpu::attention(c.ex, a);
          EXPECT_LE(nmse(got, want), 1e-7)
              << "hd=" << cs.hd << " n_tok=" << cs.n_tok << " level " << int(lvl);
        }
      }
      a.out = want.data();
    }
  }
}

// Q8_0 shapes: head_dim 32, 64 (acc in registers), 96 and 128 (the generic V path); decode and
// prefill; GQA groups of 1..7; contexts crossing several 64-position tiles.
const AttnCase kQ8AttnCases[] = {{32, 4, 2, 1, 0, 16},    {64, 14, 2, 3, 150, 256},
                                 {32, 8, 8, 70, 0, 80},   {64, 4, 1, 1, 199, 200},
                                 {128, 8, 2, 5, 60, 70},  {96, 4, 4, 1, 100, 128},
                                 {64, 2, 2, 130, 5, 140}, {32, 4, 2, 2, 300, 320}};

// Random f32 K/V regions quantized row by row into Q8_0 blocks.
std::vector<uint8_t> to_q8_0(const std::vector<float>& x, int64_t row) {
  const size_t rs = row_size(GgmlType::Q8_0, row);
  std::vector<uint8_t> q(rs * (x.size() / row));
  for (size_t r = 0; r < x.size() / row; ++r)
    quantize_row(GgmlType::Q8_0, x.data() + r * row, q.data() + r * rs, row);
  return q;
}

// Fast vs reference over the same quantized blocks: both decode d * code exactly, so only the
// order of the f32 sums differs from the reference's double sums (bound of the f16 test).
TEST(KvKernels, AttentionOverQ8_0MatchesReferenceAtEveryLevel) {
  const std::array<std::array<GgmlType, 2>, 4> types = {{{GgmlType::Q8_0, GgmlType::Q8_0},
                                                         {GgmlType::Q8_0, GgmlType::F16},
                                                         {GgmlType::F16, GgmlType::Q8_0},
                                                         {GgmlType::F32, GgmlType::Q8_0}}};
  for (const auto& cs : kQ8AttnCases) {
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    const auto kf = randn(n_kv_embd * cs.n_ctx, 1), vf = randn(n_kv_embd * cs.n_ctx, 2);
    const auto kh = to_f16(kf), vh = to_f16(vf);
    const auto kq = to_q8_0(kf, n_kv_embd), vq = to_q8_0(vf, n_kv_embd);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, cs.hd * cs.nh + 3};
    const auto q = randn(lq.ts() * cs.n_tok, 3, 2.0f);
    std::vector<int32_t> pos(cs.n_tok);
    for (int64_t t = 0; t < cs.n_tok; ++t) pos[t] = (int32_t)(cs.first_pos + t);
    auto region = [&](GgmlType t, const std::vector<float>& f, const std::vector<uint16_t>& h,
                      const std::vector<uint8_t>& b) -> const void* {
      if (t == GgmlType::Q8_0) return b.data();
      if (t == GgmlType::F16) return h.data();
      return f.data();
    };
    for (const auto& tp : types) {
      std::vector<float> want(cs.hd * cs.nh * cs.n_tok), got(want.size());
      AttentionArgs a{q.data(),
                      lq,
                      region(tp[0], kf, kh, kq),
                      region(tp[1], vf, vh, vq),
                      n_kv_embd,
                      cs.n_ctx,
                      (int32_t)cs.nkv,
                      pos.data(),
                      1.0f / std::sqrt((float)cs.hd),
                      want.data(),
                      tp[0],
                      tp[1]};
      cpu::ref::attention(a);
      for (SimdLevel lvl : kLevels) {
        for (int th = 1; th <= 3; ++th) {
          Ctx c(th, lvl);
          a.out = got.data();
          cpu::attention(c.ex, a);
          EXPECT_LE(nmse(got, want), 1e-7)
              << "hd=" << cs.hd << " n_tok=" << cs.n_tok << " types " << type_name(tp[0]) << "/"
              << type_name(tp[1]) << " level " << int(lvl) << " threads " << th;
        }
      }
      a.out = want.data();
    }
  }
  // A head that is not whole blocks is refused (stories260K's head_dim 8), never aborted.
  const auto kq = to_q8_0(randn(32 * 4, 7), 32);
  const auto q = randn(8 * 8, 8);
  std::vector<float> out(64);
  const int32_t p0 = 0;
  AttentionArgs bad{q.data(),
                    HeadLayout{8, 8, 1, 0, 0},
                    kq.data(),
                    kq.data(),
                    32,
                    4,
                    4,
                    &p0,
                    1.0f,
                    out.data(),
                    GgmlType::Q8_0,
                    GgmlType::Q8_0};
  Ctx c(1);
  EXPECT_THROW(cpu::attention(c.ex, bad), Error);
  EXPECT_THROW(cpu::ref::attention(bad), Error);
}

// Q8_0 storage vs f32: the codes carry ~8 bits per value, relative to the block's largest
// magnitude (error <= amax / 254 per value, ~1.3e-5 relative MSE for Gaussian blocks); attention
// averages those errors over positions, so the output's NMSE stays near that level.
TEST(KvKernels, Q8_0AttentionIsCloseToF32) {
  double worst = 0;
  for (const auto& cs : kQ8AttnCases) {
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    const auto kf = randn(n_kv_embd * cs.n_ctx, 4), vf = randn(n_kv_embd * cs.n_ctx, 5);
    const auto kq = to_q8_0(kf, n_kv_embd), vq = to_q8_0(vf, n_kv_embd);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, 0};
    const auto q = randn(lq.ts() * cs.n_tok, 6, 2.0f);
    std::vector<int32_t> pos(cs.n_tok);
    for (int64_t t = 0; t < cs.n_tok; ++t) pos[t] = (int32_t)(cs.first_pos + t);
    std::vector<float> o32(cs.hd * cs.nh * cs.n_tok), o8(o32.size());
    AttentionArgs a{q.data(),        lq,         kf.data(),
                    vf.data(),       n_kv_embd,  cs.n_ctx,
                    (int32_t)cs.nkv, pos.data(), 1.0f / std::sqrt((float)cs.hd),
                    o32.data()};
    Ctx c(2);
    cpu::attention(c.ex, a);
    a.k = kq.data();
    a.v = vq.data();
    a.k_type = a.v_type = GgmlType::Q8_0;
    a.out = o8.data();
    cpu::attention(c.ex, a);
    worst = std::max(worst, nmse(o8, o32));
    EXPECT_LE(nmse(o8, o32), 2e-4) << "hd=" << cs.hd;
  }
  std::printf("[ report ] q8_0 vs f32 attention, worst NMSE over the shapes: %.3g\n", worst);
}

// f16 storage is the only difference: attention over the rounded rows stays close to f32.
TEST(KvKernels, F16AttentionIsCloseToF32) {
  for (const auto& cs : kAttnCases) {
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    const auto kf = randn(n_kv_embd * cs.n_ctx, 4), vf = randn(n_kv_embd * cs.n_ctx, 5);
    const auto kh = to_f16(kf), vh = to_f16(vf);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, 0};
    const auto q = randn(lq.ts() * cs.n_tok, 6, 2.0f);
    std::vector<int32_t> pos(cs.n_tok);
    for (int64_t t = 0; t < cs.n_tok; ++t) pos[t] = (int32_t)(cs.first_pos + t);
    std::vector<float> o32(cs.hd * cs.nh * cs.n_tok), o16(o32.size());
    AttentionArgs a{q.data(),        lq,         kf.data(),
                    vf.data(),       n_kv_embd,  cs.n_ctx,
                    (int32_t)cs.nkv, pos.data(), 1.0f / std::sqrt((float)cs.hd),
                    o32.data()};
    Ctx c(2);
    cpu::attention(c.ex, a);
    a.k = kh.data();
    a.v = vh.data();
    a.k_type = a.v_type = GgmlType::F16;
    a.out = o16.data();
    cpu::attention(c.ex, a);
    EXPECT_LE(nmse(o16, o32), 1e-5) << "hd=" << cs.hd;
    EXPECT_LE(max_abs_diff(o16, o32), 1e-2) << "hd=" << cs.hd;
  }
}

// The fused QKV epilogue (bias, RoPE, K/V store) through the reference and through the fast
// kernel at `lvl`, on the same random rows: 4 query heads, 2 KV heads of `hd`, 5 tokens at
// positions 3..7, K/V regions of `type` for 16 positions.
struct EpilogueRun {
  std::vector<uint8_t> k_ref, v_ref, k_fast, v_fast;  // the K/V regions' bytes
  std::vector<float> q_ref, q_fast;                   // roped q
};

EpilogueRun run_qkv_epilogue(int64_t hd, GgmlType type, SimdLevel lvl) {
  const int64_t nh = 4, nkv = 2, nt = 5, n_ctx = 16;
  const int64_t width = (nh + 2 * nkv) * hd;
  const auto qkv = randn(width * nt, 1), bias = randn(width, 2);
  const std::vector<int32_t> pos = {3, 4, 5, 6, 7};
  const cpu::RopeParams rp{RopeMode::Neox, static_cast<int32_t>(hd), 1e6f, 1.0f};
  const size_t region_bytes = row_size(type, nkv * hd) * n_ctx;
  EpilogueRun r;
  for (auto* region : {&r.k_ref, &r.v_ref, &r.k_fast, &r.v_fast}) region->resize(region_bytes);
  r.q_ref.resize(hd * nh * nt);
  r.q_fast.resize(r.q_ref.size());
  auto in = qkv;
  cpu::QkvRopeStoreArgs a{in.data(),
                          width,
                          bias.data(),
                          nh,
                          nkv,
                          hd,
                          nt,
                          pos.data(),
                          rp,
                          r.k_ref.data(),
                          r.v_ref.data(),
                          n_ctx,
                          r.q_ref.data(),
                          HeadLayout{hd, nh, nt, 0, 0},
                          type,
                          type};
  cpu::ref::qkv_bias_rope_store(a);
  Ctx c(2, lvl);
  a.k_region = r.k_fast.data();
  a.v_region = r.v_fast.data();
  a.q_out = r.q_fast.data();
  cpu::qkv_bias_rope_store(c.ex, a);
  return r;
}

TEST(KvKernels, FusedQkvEpilogueStoresF16LikeReference) {
  for (SimdLevel lvl : kLevels) {
    const EpilogueRun r = run_qkv_epilogue(16, GgmlType::F16, lvl);
    EXPECT_LE(nmse(r.q_fast, r.q_ref), 1e-7);
    const auto* kw = reinterpret_cast<const uint16_t*>(r.k_ref.data());
    const auto* kg = reinterpret_cast<const uint16_t*>(r.k_fast.data());
    const auto* vw = reinterpret_cast<const uint16_t*>(r.v_ref.data());
    const auto* vg = reinterpret_cast<const uint16_t*>(r.v_fast.data());
    // The f32 rows before rounding agree to ~1 ulp, so the halves agree to at most one step.
    for (size_t i = 0; i < r.k_ref.size() / sizeof(uint16_t); ++i) {
      ASSERT_LE(std::fabs(fp16_to_f32(kg[i]) - fp16_to_f32(kw[i])),
                1e-3f * std::max(1.0f, std::fabs(fp16_to_f32(kw[i]))))
          << i;
      ASSERT_EQ(vg[i], vw[i]) << i;  // V is only biased: bit-identical
    }
  }
}

// The fused epilogue quantizes its roped K row and biased V row with the same quantizer.
TEST(KvKernels, FusedQkvEpilogueStoresQ8_0LikeReference) {
  const int64_t n = 2 * 64 * 16;  // values per region: n_kv_embd x n_ctx
  for (SimdLevel lvl : kLevels) {
    const EpilogueRun run = run_qkv_epilogue(64, GgmlType::Q8_0, lvl);
    EXPECT_LE(nmse(run.q_fast, run.q_ref), 1e-7);
    EXPECT_EQ(run.v_fast, run.v_ref);  // V is only biased: the same f32 row, the same blocks
    // The roped K rows agree to ~1 ulp before quantizing: a code may move by one step.
    std::vector<float> kgf(n), kwf(n);
    dequantize_row(GgmlType::Q8_0, run.k_fast.data(), kgf.data(), n);
    dequantize_row(GgmlType::Q8_0, run.k_ref.data(), kwf.data(), n);
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(run.k_ref.data());
    for (size_t i = 0; i < kwf.size(); ++i)
      ASSERT_LE(std::fabs(kgf[i] - kwf[i]), 1.01f * fp16_to_f32(blocks[i / 32].d) + 1e-6f) << i;
  }
  // head_dim 16 cannot hold Q8_0 blocks: an error, not an abort.
  std::vector<uint8_t> r(4096);
  std::vector<float> buf(16 * 4 * 1), q(16 * 2);
  const int32_t p0 = 0;
  cpu::QkvRopeStoreArgs bad{buf.data(),
                            64,
                            nullptr,
                            2,
                            1,
                            16,
                            1,
                            &p0,
                            cpu::RopeParams{RopeMode::Normal, 16, 1e4f, 1.0f},
                            r.data(),
                            r.data(),
                            4,
                            q.data(),
                            HeadLayout{16, 2, 1, 0, 0},
                            GgmlType::Q8_0,
                            GgmlType::F16};
  Ctx c(1);
  EXPECT_THROW(cpu::qkv_bias_rope_store(c.ex, bad), Error);
}

// ---- allocator regions -----------------------------------------------------------------------

std::vector<uint8_t> tiny_bytes() {
  testing::TinySpec spec;
  spec.n_ff = 64;
  return testing::make_tiny_model(spec);
}

// A generated model q8_0 can serve: head_dim 64 (4 heads, 2 KV heads: GQA), Qwen2 (QKV biases,
// so the fused epilogue adds them before quantizing).
std::vector<uint8_t> tiny_hd64_bytes(const std::string& arch = "qwen2") {
  testing::TinySpec spec;
  spec.arch = arch;
  spec.n_embd = 256;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 128;
  spec.n_vocab = 64;
  spec.weight_std = 0.0625f;  // 1/sqrt(n_embd): attention scores of a few units
  return testing::make_tiny_model(spec);
}

TEST(KvRegions, SizedByTypeAndFixedForTheAllocatorsLife) {
  const auto bytes = tiny_bytes();
  auto model = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
  const HParams& hp = model->hparams();
  GraphParams gp;
  gp.n_tokens = 3;
  gp.n_outputs = 1;
  gp.cparams.n_ctx = 32;
  gp.cparams.type_k = GgmlType::F16;
  gp.cparams.type_v = GgmlType::F32;
  const Graph g = model->build_graph(gp);
  for (const Node& n : g.nodes()) {
    if (n.op == Op::KvStore) {
      EXPECT_EQ(n.type, GgmlType::F16);
      EXPECT_EQ(n.n_bytes(), static_cast<size_t>(hp.n_kv_embd() * 32 * 2));
    }
  }
  SessionParams sp;
  sp.n_ctx = 32;
  sp.type_k = GgmlType::F16;
  sp.type_v = GgmlType::F32;
  Session s(*model, sp);
  const int32_t toks[3] = {1, 2, 3};
  s.eval_last(toks, 0);
  EXPECT_EQ(s.kv_bytes(),
            kv_cache_bytes(hp.n_layer, hp.n_kv_embd(), 32, GgmlType::F16, GgmlType::F32));
  EXPECT_EQ(s.mem_report().kv_type_k, GgmlType::F16);
  EXPECT_EQ(s.mem_report().kv_type_v, GgmlType::F32);

  // The same allocator asked for other KV types: an error, not a silent reinterpretation.
  GraphCache gc;
  cpu::CpuBackendOptions bo;
  cpu::CpuBackend be(bo);
  gc.allocator().set_backend(be);
  gc.replace_graph(model->build_graph(gp), gp);
  GraphParams other = gp;
  other.cparams.type_v = GgmlType::F16;
  EXPECT_THROW(gc.replace_graph(model->build_graph(other), other), Error);
  gc.allocator().reset();

  SessionParams bad = sp;
  bad.type_k = GgmlType::Q4_0;
  EXPECT_THROW(Session(*model, bad), Error);
  // The tiny model's head_dim is 8: q8_0 is refused with InvalidArgument by the session, the
  // eager session and the graph builder alike (never an abort in the allocator or a kernel).
  ASSERT_EQ(hp.head_dim, 8);
  bad.type_k = GgmlType::F16;
  bad.type_v = GgmlType::Q8_0;
  try {
    Session sq(*model, bad);
    ADD_FAILURE() << "q8_0 accepted with head_dim 8";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("head_dim 8"), std::string::npos) << e.what();
  }
  eager::EagerParams ep;
  ep.n_ctx = 32;
  ep.kv_type = GgmlType::Q8_0;
  EXPECT_THROW(eager::EagerSession(*model, ep), Error);
  GraphParams gq = gp;
  gq.cparams.type_k = GgmlType::Q8_0;
  EXPECT_THROW(model->build_graph(gq), Error);
}

// q8_0 regions: 34 bytes per 32 values, in the graph node, the allocator and the report.
TEST(KvRegions, Q8_0RegionsAreBlockRows) {
  testing::TinySpec spec;
  spec.n_embd = 128;
  spec.n_head = 2;  // head_dim 64
  spec.n_head_kv = 1;
  spec.n_ff = 64;
  const auto bytes = testing::make_tiny_model(spec);
  auto model = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
  const HParams& hp = model->hparams();
  ASSERT_EQ(hp.head_dim, 64);
  GraphParams gp;
  gp.n_tokens = 3;
  gp.n_outputs = 1;
  gp.cparams.n_ctx = 32;
  gp.cparams.type_k = gp.cparams.type_v = GgmlType::Q8_0;
  const Graph g = model->build_graph(gp);  // a named graph: nodes() borrows from it
  for (const Node& n : g.nodes()) {
    if (n.op == Op::KvStore) {
      EXPECT_EQ(n.n_bytes(), static_cast<size_t>(64 / 32 * 34 * 32));
    }
  }
  SessionParams sp;
  sp.n_ctx = 32;
  sp.type_k = sp.type_v = GgmlType::Q8_0;
  Session s(*model, sp);
  const int32_t toks[3] = {1, 2, 3};
  s.eval_last(toks, 0);
  EXPECT_EQ(s.kv_bytes(), kv_cache_bytes(hp.n_layer, 64, 32, GgmlType::Q8_0, GgmlType::Q8_0));
  EXPECT_EQ(s.kv_bytes(), static_cast<uint64_t>(hp.n_layer) * 2 * 32 * 68);
  EXPECT_EQ(s.mem_report().kv_type_k, GgmlType::Q8_0);
}

// ---- whole models ----------------------------------------------------------------------------

const fs::path kShared = MINFER_SHARED_DIR;
const fs::path kStories = kShared / "models" / "stories260K.gguf";

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy prefill + decode with f16 and f32 caches side by side: the logits stay close (f16
// rounds each cached element by <= 2^-11 relative) and the greedy tokens are the same.
TEST(KvModel, Stories260KF16LogitsCloseToF32) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "../shared absent: " << kStories;
  auto model = Model::load(kStories.string());
  for (bool fused : {true, false}) {
    if (fused) model->prepare_fused_qkv();
    SessionParams p32, p16;
    p32.n_ctx = p16.n_ctx = 512;
    p32.n_threads = p16.n_threads = 2;
    p32.fusion = p16.fusion = FusionToggles{fused, fused};
    p32.type_k = p32.type_v = GgmlType::F32;
    p16.type_k = p16.type_v = GgmlType::F16;
    Session s32(*model, p32), s16(*model, p16);
    std::vector<int32_t> in = {1, 403, 407, 261, 378, 312, 1161 % 512, 288};
    int64_t pos = 0;
    double worst = 0;
    int32_t tok = 0;
    for (int step = 0; step < 200; ++step) {
      std::vector<float> a;
      {
        const std::span<const float> l = s32.eval_last(in, pos);
        a.assign(l.begin(), l.end());
      }
      const std::span<const float> b = s16.eval_last(in, pos);
      worst = std::max(worst, max_abs_diff(a, b));
      ASSERT_EQ(argmax(a), argmax(b)) << "step " << step;
      pos += static_cast<int64_t>(in.size());
      tok = argmax(a);
      in.assign(1, tok);
    }
    EXPECT_EQ(s16.kv_bytes() * 2, s32.kv_bytes());
    EXPECT_LT(worst, 0.06) << (fused ? "fused" : "unfused");
    std::printf(
        "[ report ] stories260K %s, 208 positions: max |logit f16 KV - logit f32 KV| = %.3g\n",
        fused ? "fused" : "unfused", worst);
  }
}

// Eager and graph call the same kernels in the same order: bit-identical logits.
void eager_and_graph_bit_identical(const std::vector<uint8_t>& bytes, GgmlType type) {
  for (bool fused : {true, false}) {
    auto model = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
    if (fused) model->prepare_fused_qkv();
    SessionParams gp;
    gp.n_ctx = 64;
    gp.n_ubatch = 4;
    gp.fusion = FusionToggles{fused, fused};
    gp.type_k = gp.type_v = type;
    eager::EagerParams ep;
    ep.n_ctx = 64;
    ep.n_ubatch = 4;
    ep.fusion = gp.fusion;
    ep.kv_type = type;
    Session graph(*model, gp);
    eager::EagerSession eager(*model, ep);
    const std::vector<int32_t> prompt = {1, 5, 9, 33, 2, 60, 17};
    std::vector<float> g;
    {
      const std::span<const float> s = graph.eval_last(prompt, 0);
      g.assign(s.begin(), s.end());
    }
    EXPECT_EQ(max_abs_diff(g, eager.eval_last(prompt, 0)), 0.0);
    int32_t tok = 7;
    for (int64_t pos = 7; pos < 20; ++pos) {
      const int32_t one[1] = {tok};
      {
        const std::span<const float> s = graph.eval_last(one, pos);
        g.assign(s.begin(), s.end());
      }
      const std::span<const float> e = eager.eval_last(one, pos);
      EXPECT_EQ(max_abs_diff(g, e), 0.0) << "pos " << pos;
      tok = argmax(e);
    }
    EXPECT_EQ(eager.eager_mem_report().heap_allocations_after_warmup, 0);
    EXPECT_EQ(eager.mem_report().kv_bytes, graph.kv_bytes());
  }
}

// Eager and graph call the same kernels in the same order, with f16 and q8_0 caches too.
TEST(KvModel, EagerAndGraphBitIdenticalWithF16AndQ8_0) {
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
    SCOPED_TRACE(std::string(type_name(type)));
    eager_and_graph_bit_identical(type == GgmlType::Q8_0 ? tiny_hd64_bytes() : tiny_bytes(), type);
  }
}

// Greedy prefill + decode on the head_dim-64 model with f16 and q8_0 caches side by side.
// Tolerance: a q8_0 value is off by up to amax / 254 of its 32-value block, an RMS error of
// ~0.5% of a Gaussian block's spread, against ~0.02% for f16's 11-bit mantissa: about 25x. On
// this model f16 moves the logits (range ~+-2.5) by <= 0.0015 from f32, and q8_0 by <= 0.035
// (measured: 87 positions, fused and unfused alike), so the bound is 0.06; a misplaced block or
// scale moves them by whole units. The greedy tokens agree at every step (their gaps are wider).
TEST(KvModel, Q8_0LogitsCloseToF16OnAHeadDim64Model) {
  const auto bytes = tiny_hd64_bytes();
  for (bool fused : {true, false}) {
    auto model = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
    ASSERT_EQ(model->hparams().head_dim, 64);
    if (fused) model->prepare_fused_qkv();
    SessionParams p16, p8;
    p16.n_ctx = p8.n_ctx = 128;
    p16.n_threads = p8.n_threads = 2;
    p16.n_ubatch = p8.n_ubatch = 16;  // the 40-token prompt runs as 3 micro-batches
    p16.fusion = p8.fusion = FusionToggles{fused, fused};
    p16.type_k = p16.type_v = GgmlType::F16;
    p8.type_k = p8.type_v = GgmlType::Q8_0;
    Session s16(*model, p16), s8(*model, p8);
    std::vector<int32_t> in(40);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>((i * 37 + 5) % 64);
    int64_t pos = 0;
    double worst = 0;
    int same = 0, steps = 48;
    for (int step = 0; step < steps; ++step) {
      std::vector<float> a;
      {
        const std::span<const float> l = s16.eval_last(in, pos);
        a.assign(l.begin(), l.end());
      }
      const std::span<const float> b = s8.eval_last(in, pos);
      worst = std::max(worst, max_abs_diff(a, b));
      same += argmax(a) == argmax(b);
      pos += static_cast<int64_t>(in.size());
      in.assign(1, argmax(a));  // both follow the f16 tokens: positions and inputs stay equal
    }
    EXPECT_LT(worst, 0.05) << (fused ? "fused" : "unfused");
    EXPECT_EQ(same, steps) << "greedy tokens differ";
    EXPECT_EQ(s8.kv_bytes() * 32, s16.kv_bytes() * 17);
    std::printf(
        "[ report ] head_dim-64 qwen2 %s, %lld positions: max |logit q8_0 KV - logit f16 "
        "KV| = %.3g, greedy tokens equal %d/%d\n",
        fused ? "fused" : "unfused", static_cast<long long>(pos), worst, same, steps);
  }
}
// ---- the CLI ---------------------------------------------------------------------------------

struct Result {
  int status = -1;
  std::string out, err;
};

Result run(const std::string& args) {
  const fs::path dir = fs::temp_directory_path();
  const std::string tag = std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                          std::to_string(reinterpret_cast<uintptr_t>(&args));
  const fs::path out = dir / ("kv_cli_out_" + tag), err = dir / ("kv_cli_err_" + tag);
  const std::string cmd = std::string(MINFER_BINARY) + " " + args + " >" + out.string() + " 2>" +
                          err.string() + " </dev/null";
  Result r;
  const int st = std::system(cmd.c_str());
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  auto slurp = [](const fs::path& p) {
    std::FILE* f = std::fopen(p.string().c_str(), "rb");
    std::string s;
    if (!f) return s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

TEST(KvCli, RunReportsTypesAndRejectsBadValues) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "../shared absent: " << kStories;
  const std::string m = kStories.string();
  const Result d = run("run -m " + m + " -p 'Once upon a time' -n 8 --temp 0 -t 1");
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_NE(d.err.find("KV cache type K f16 V f16"), std::string::npos) << d.err;
  const Result f = run("run -m " + m +
                       " -p 'Once upon a time' -n 8 --temp 0 -t 1 -ctk F32 "
                       "--cache-type-v f32");
  ASSERT_EQ(f.status, 0) << f.err;
  EXPECT_NE(f.err.find("KV cache type K f32 V f32"), std::string::npos) << f.err;
  EXPECT_EQ(f.out, d.out);  // same greedy text on this prompt
  const Result e = run("run -m " + m + " -p hi -n 2 --exec eager -ctk f32 -ctv f32");
  EXPECT_EQ(e.status, 0) << e.err;
  for (const char* args : {"-ctk q4_0", "-ctv nonsense", "--cache-type-k f8"}) {
    const Result b = run("run -m " + m + " -p hi -n 2 " + args);
    EXPECT_NE(b.status, 0) << args;
    const std::string flag =
        std::string(args).find("ctv") != std::string::npos ? "--cache-type-v" : "--cache-type-k";
    EXPECT_NE(b.err.find(flag), std::string::npos) << b.err;
    EXPECT_NE(b.err.find("use f32, f16 or q8_0"), std::string::npos) << b.err;
  }
  const Result mixed = run("run -m " + m + " -p hi -n 2 --exec eager -ctk f32");
  EXPECT_NE(mixed.status, 0);
  // q8_0 is a known type, but stories260K's heads of 8 cannot hold 32-value blocks: a clean
  // error naming the flag, the value and the head_dim, in graph and eager mode, run and plan.
  for (const std::string& cmd : {"run -m " + m + " -p hi -n 2 -ctk q8_0",
                                 "run -m " + m +
                                     " -p hi -n 2 --exec eager -ctk "
                                     "q8_0 -ctv q8_0",
                                 "plan -m " + m + " -c 64 --n-tokens 4 -ctv Q8_0"}) {
    const Result q = run(cmd);
    EXPECT_EQ(q.status, 1) << cmd << ": " << q.err;
    const std::string flag =
        cmd.find("-ctv Q8_0") != std::string::npos ? "--cache-type-v" : "--cache-type-k";
    for (const std::string& part :
         {flag + " 'q8_0'", std::string("head_dim 8"), std::string("multiple of 32")})
      EXPECT_NE(q.err.find(part), std::string::npos) << cmd << ": " << part << " in " << q.err;
  }
}

TEST(KvCli, PlanKvBytesFollowTheTypeAndBenchShowsIt) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "../shared absent: " << kStories;
  const std::string m = kStories.string();
  uint64_t kv[2] = {0, 0};
  int i = 0;
  for (const char* t : {"f32", "f16"}) {
    const Result r = run("plan -m " + m + " -c 256 --n-tokens 8 -o json -ctk " + t + " -ctv " + t);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    kv[i++] = j["kv_bytes"].get<uint64_t>();
    EXPECT_EQ(j["type_k"].get<std::string>(), t);
    EXPECT_EQ(j["type_v"].get<std::string>(), t);
  }
  EXPECT_EQ(kv[0], 2 * kv[1]);
  // stories260K: 5 layers, 4 KV heads of 8, 256 tokens, f16.
  EXPECT_EQ(kv[1], kv_cache_bytes(5, 32, 256, GgmlType::F16, GgmlType::F16));
  const Result b = run("bench -m " + m + " -p 8 -n 2 -r 1 -t 1 -ctk f32 -ctv f32");
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_NE(b.out.find("type_k"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("f32"), std::string::npos) << b.out;
  const Result bj = run("bench -m " + m + " -p 0 -n 2 -r 1 -t 1 -o json");
  ASSERT_EQ(bj.status, 0) << bj.err;
  EXPECT_EQ(nlohmann::json::parse(bj.out)[0]["type_k"].get<std::string>(), "f16");
  // At a depth (llama-bench -d): decode reads the prefilled positions.
  const Result bd = run("bench -m " + m + " -p 4 -n 2 -d 40 -r 1 -t 1 -o json");
  ASSERT_EQ(bd.status, 0) << bd.err;
  const auto jd = nlohmann::json::parse(bd.out);
  EXPECT_EQ(jd[1]["test"].get<std::string>(), "tg2 @ d40");
  EXPECT_EQ(jd[1]["n_depth"].get<int64_t>(), 40);
}

// plan's kv_bytes for q8_0 on a model whose heads hold whole blocks (the generated
// head_dim-64 model written to a temporary file): 34 bytes per 32 values.
TEST(KvCli, PlanKvBytesForQ8_0) {
  const auto bytes = tiny_hd64_bytes("llama");
  const fs::path file =
      fs::temp_directory_path() /
      ("kv_q8_plan_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".gguf");
  {
    std::FILE* f = std::fopen(file.string().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  uint64_t kv[2] = {0, 0};
  int i = 0;
  for (const char* t : {"f16", "q8_0"}) {
    const Result r =
        run("plan -m " + file.string() + " -c 256 --n-tokens 8 -o json -ctk " + t + " -ctv " + t);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    kv[i++] = j["kv_bytes"].get<uint64_t>();
    EXPECT_EQ(j["type_k"].get<std::string>(), t);
  }
  fs::remove(file);
  // 2 layers, 2 KV heads of 64, 256 tokens.
  EXPECT_EQ(kv[1], kv_cache_bytes(2, 128, 256, GgmlType::Q8_0, GgmlType::Q8_0));
  EXPECT_EQ(kv[1], 2ull * 256 * 2 * (4 * 34));
  EXPECT_EQ(kv[1] * 32, kv[0] * 17);
}

}  // namespace
}  // namespace minfer
