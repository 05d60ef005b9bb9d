// minfer-test-libs: minfer_backend_cpu minfer_common
// KV cache kernels (split from kv_cache_test.cpp): the CPU kernels that write and read f16 and
// Q8_0 K/V rows — store, attention and the fused QKV epilogue — fast paths at every SIMD level
// against their reference twins, and f16 / q8_0 attention against f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/work_split.h"
#include "common/error.h"
#include "common/fp16.h"
#include "common/quant.h"
#include "cpu_test_util.h"
#include "numeric_test_util.h"

namespace minfer {
namespace {

using test::max_abs_diff;
using test::nmse;
using test::randn;

using cpu::AttentionArgs;
using cpu::HeadLayout;
using cpu::KvRegions;
using cpu::SimdLevel;

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_fp16(x[i]);
  return h;
}

const SimdLevel kLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kBest};

using Ctx = test::CpuCtx;

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

// One case's K/V rows in every storage type a test asks for, from the same random f32 rows
// (seeds seed_k, seed_v). Q8_0 blocks only when n_kv_embd is whole blocks.
struct KvRows {
  std::vector<float> kf, vf;
  std::vector<uint16_t> kh, vh;
  std::vector<uint8_t> kq, vq;
  const void* k(GgmlType t) const { return pick(t, kf, kh, kq); }
  const void* v(GgmlType t) const { return pick(t, vf, vh, vq); }

 private:
  static const void* pick(GgmlType t, const std::vector<float>& f, const std::vector<uint16_t>& h,
                          const std::vector<uint8_t>& q) {
    if (t == GgmlType::Q8_0) return q.data();
    if (t == GgmlType::F16) return h.data();
    return f.data();
  }
};

KvRows make_kv_rows(const AttnCase& cs, uint32_t seed_k, uint32_t seed_v) {
  const int64_t n_kv_embd = cs.nkv * cs.hd;
  KvRows r;
  r.kf = randn(n_kv_embd * cs.n_ctx, seed_k);
  r.vf = randn(n_kv_embd * cs.n_ctx, seed_v);
  r.kh = to_f16(r.kf);
  r.vh = to_f16(r.vf);
  if (n_kv_embd % QK8_0 == 0) {
    r.kq = to_q8_0(r.kf, n_kv_embd);
    r.vq = to_q8_0(r.vf, n_kv_embd);
  }
  return r;
}

// Queries (seed `seed`, scale 2) in layout `lq` and positions first_pos.. for one case.
struct Queries {
  std::vector<float> q;
  std::vector<int32_t> pos;
};

Queries make_queries(const AttnCase& cs, const HeadLayout& lq, uint32_t seed) {
  Queries r{randn(lq.ts() * cs.n_tok, seed, 2.0f), std::vector<int32_t>(cs.n_tok)};
  for (int64_t t = 0; t < cs.n_tok; ++t) r.pos[t] = (int32_t)(cs.first_pos + t);
  return r;
}

// Fast attention (every SIMD level, 1-3 threads) against the reference over the same stored
// rows, for every (K type, V type) pair. Queries are strided (3 floats between tokens).
void expect_attention_matches_reference(std::span<const AttnCase> cases,
                                        std::span<const std::array<GgmlType, 2>> types) {
  for (const auto& cs : cases) {
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    const KvRows kv = make_kv_rows(cs, 1, 2);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, cs.hd * cs.nh + 3};
    const Queries qs = make_queries(cs, lq, 3);
    for (const auto& tp : types) {
      std::vector<float> want(cs.hd * cs.nh * cs.n_tok), got(want.size());
      AttentionArgs a{qs.q.data(),
                      lq,
                      kv.k(tp[0]),
                      kv.v(tp[1]),
                      n_kv_embd,
                      cs.n_ctx,
                      (int32_t)cs.nkv,
                      qs.pos.data(),
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
    }
  }
}

// Fast attention over f32 rows and over the same rows stored as `type`:
// {f32 output, stored-type output}.
std::pair<std::vector<float>, std::vector<float>> attention_f32_and(const AttnCase& cs,
                                                                    GgmlType type) {
  const KvRows kv = make_kv_rows(cs, 4, 5);
  const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, 0};
  const Queries qs = make_queries(cs, lq, 6);
  std::vector<float> o32(cs.hd * cs.nh * cs.n_tok), o(o32.size());
  AttentionArgs a{qs.q.data(),
                  lq,
                  kv.kf.data(),
                  kv.vf.data(),
                  cs.nkv * cs.hd,
                  cs.n_ctx,
                  (int32_t)cs.nkv,
                  qs.pos.data(),
                  1.0f / std::sqrt((float)cs.hd),
                  o32.data()};
  Ctx c(2);
  cpu::attention(c.ex, a);
  a.k = kv.k(type);
  a.v = kv.v(type);
  a.k_type = a.v_type = type;
  a.out = o.data();
  cpu::attention(c.ex, a);
  return {o32, o};
}

TEST(KvKernels, AttentionOverF16MatchesReferenceAtEveryLevel) {
  const std::array<std::array<GgmlType, 2>, 3> types = {{{GgmlType::F16, GgmlType::F16},
                                                         {GgmlType::F16, GgmlType::F32},
                                                         {GgmlType::F32, GgmlType::F16}}};
  expect_attention_matches_reference(kAttnCases, types);
}

// Fast vs reference over the same quantized blocks: both decode d * code exactly, so only the
// order of the f32 sums differs from the reference's double sums (bound of the f16 test).
TEST(KvKernels, AttentionOverQ8_0MatchesReferenceAtEveryLevel) {
  const std::array<std::array<GgmlType, 2>, 4> types = {{{GgmlType::Q8_0, GgmlType::Q8_0},
                                                         {GgmlType::Q8_0, GgmlType::F16},
                                                         {GgmlType::F16, GgmlType::Q8_0},
                                                         {GgmlType::F32, GgmlType::Q8_0}}};
  expect_attention_matches_reference(kQ8AttnCases, types);
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

// Paged rows: the case's contiguous rows scattered into blocks of B (a shuffled block order, a
// gap between blocks), read through block tables by two "sequences" whose tables name the
// same data in different blocks. Reference and fast attention must give what the contiguous
// reference gives, for every element type and block size (tiles then end at block ends).
TEST(KvKernels, PagedAttentionReadsThroughBlockTables) {
  const std::array<GgmlType, 3> types = {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0};
  for (const auto& cs : kQ8AttnCases) {
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    const KvRows kv = make_kv_rows(cs, 11, 12);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, 0};
    const Queries qs = make_queries(cs, lq, 13);
    for (int64_t B : {int64_t{16}, int64_t{5}}) {
      for (GgmlType t : types) {
        const size_t row = row_size(t, n_kv_embd);
        const int64_t nb = (cs.n_ctx + B - 1) / B;  // blocks per sequence
        const auto stride = static_cast<int64_t>(row * B + 64);
        const int64_t n_blocks = 2 * nb + 1;
        std::vector<uint8_t> kp(stride * n_blocks), vp(stride * n_blocks);
        // Sequence s's blocks in reverse order, each sequence in its own half.
        std::vector<int32_t> tables(2 * nb);
        for (int64_t s = 0; s < 2; ++s)
          for (int64_t i = 0; i < nb; ++i)
            tables[s * nb + i] = static_cast<int32_t>(1 + (nb - 1 - i) + s * nb);
        const cpu::KvPaging pg{B, stride};
        for (int64_t s = 0; s < 2; ++s)
          for (int64_t j = 0; j < cs.n_ctx; ++j) {
            const int64_t slot = tables[s * nb + j / B] * B + j % B;
            std::memcpy(cpu::kv_row_ptr(kp.data(), pg, row, slot),
                        static_cast<const uint8_t*>(kv.k(t)) + j * row, row);
            std::memcpy(cpu::kv_row_ptr(vp.data(), pg, row, slot),
                        static_cast<const uint8_t*>(kv.v(t)) + j * row, row);
          }
        std::vector<float> want(cs.hd * cs.nh * cs.n_tok), got(want.size());
        AttentionArgs a{qs.q.data(), lq, kv.k(t), kv.v(t), n_kv_embd, cs.n_ctx, (int32_t)cs.nkv,
                        qs.pos.data(), 1.0f / std::sqrt((float)cs.hd), want.data(), t, t};
        cpu::ref::attention(a);
        std::vector<int32_t> seq(cs.n_tok);
        for (int64_t i = 0; i < cs.n_tok; ++i) seq[i] = static_cast<int32_t>(i % 2);
        a.k = kp.data();
        a.v = vp.data();
        a.paging = pg;
        a.tables = cpu::KvTables{seq.data(), tables.data(), nb};
        a.out = got.data();
        cpu::ref::attention(a);
        EXPECT_EQ(got, want) << "reference, B " << B << " " << type_name(t);
        for (SimdLevel lvl : kLevels) {
          Ctx c(2, lvl);
          std::fill(got.begin(), got.end(), 0.0f);
          cpu::attention(c.ex, a);
          EXPECT_LE(nmse(got, want), 1e-7) << "hd=" << cs.hd << " n_tok=" << cs.n_tok << " B "
                                           << B << " " << type_name(t) << " level " << int(lvl);
        }
      }
    }
  }
}

std::atomic<int> g_attn_steals{0};
std::atomic<bool> g_attn_expect_steal{false};
// WorkSplit claim hook: thread 1 sleeps after each claim of its own, so the others take the
// back of its share (attention's dynamic split); steals are counted. Where the test expects a
// steal, thread 1 then keeps waiting until one has happened (at most 50 ms): a fixed lag is
// shorter than the others' own shares on a slow machine (qemu runs these tests 10-50x slower),
// which then never steal.
void lagging_attention_worker(int ith, int64_t, int64_t, bool stolen) {
  if (stolen) g_attn_steals.fetch_add(1, std::memory_order_relaxed);
  if (stolen || ith != 1) return;
  std::this_thread::sleep_for(std::chrono::microseconds(300));
  for (int i = 0; i < 500 && g_attn_expect_steal.load() && g_attn_steals.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

// The threads split attention's (token, query head) units dynamically (work_split.h), cutting
// kv groups where a steal lands: whatever the schedule, every head is computed by one thread
// in the same order, so the output is bit for bit the one-thread result. Decode (Qwen2.5-0.5B's
// 14 heads over 2 kv heads at 1024 positions) and prefill, f32 / f16 / q8_0 rows, every level,
// a lagging thread and more threads than cores; prefill must see steals.
TEST(KvKernels, AttentionBitsDoNotDependOnTheSchedule) {
  cpu::WorkSplit::set_claim_hook(lagging_attention_worker);
  const AttnCase cases[] = {{64, 14, 2, 1, 1023, 1024},
                            {64, 14, 2, 3, 150, 256},
                            {32, 8, 8, 70, 0, 80},
                            {64, 2, 2, 130, 5, 140}};
  for (const auto& cs : cases) {
    const KvRows kv = make_kv_rows(cs, 31, 32);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, 0};
    const Queries qs = make_queries(cs, lq, 33);
    g_attn_expect_steal = cs.n_tok > 1;
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
      std::vector<float> one(cs.hd * cs.nh * cs.n_tok);
      AttentionArgs a{qs.q.data(), lq, kv.k(t), kv.v(t), cs.nkv * cs.hd, cs.n_ctx, (int32_t)cs.nkv,
                      qs.pos.data(), 1.0f / std::sqrt((float)cs.hd), one.data(), t, t};
      for (SimdLevel lvl : kLevels) {
        Ctx c1(1, lvl);
        a.out = one.data();
        cpu::attention(c1.ex, a);
        for (int th : {2, 3, 7}) {
          Ctx c(th, lvl);
          g_attn_steals = 0;
          // Up to 3 tries for a steal (a descheduled caller may miss it), bits every time.
          for (int attempt = 0; attempt < 3 && (attempt == 0 || g_attn_steals == 0); ++attempt) {
            std::vector<float> got(one.size(), -7.0f);
            a.out = got.data();
            cpu::attention(c.ex, a);
            for (size_t i = 0; i < one.size(); ++i)
              ASSERT_EQ(got[i], one[i]) << "hd=" << cs.hd << " n_tok=" << cs.n_tok << " "
                                        << type_name(t) << " level " << int(lvl) << " th=" << th
                                        << " i=" << i;
          }
          if (cs.n_tok > 1) {
            EXPECT_GT(g_attn_steals.load(), 0)
                << "n_tok=" << cs.n_tok << " " << type_name(t) << " th=" << th;
          }
        }
      }
    }
  }
  g_attn_expect_steal = false;
  cpu::WorkSplit::set_claim_hook(nullptr);
}

// Gemma's attention options. The sliding window against an independent construction: a token
// at position p with window W sees exactly what an unwindowed token at position W - 1 sees in
// the K/V rows that start at row p - W + 1. Then fast vs reference with window and
// soft-capping (cap 2: the scores of these queries are a few units, so it bites), over f32 /
// f16 / q8_0 rows, contiguous and paged (tiles then start inside blocks), every level.
TEST(KvKernels, SlidingWindowAndSoftcapMatchReference) {
  {
    const AttnCase cs{32, 4, 2, 1, 150, 160};
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    const KvRows kv = make_kv_rows(cs, 21, 22);
    const HeadLayout lq{cs.hd, cs.nh, 1, 0, 0};
    const Queries qs = make_queries(cs, lq, 23);
    for (int64_t W : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{100}}) {
      std::vector<float> want(cs.hd * cs.nh), got(want.size());
      const int32_t p0 = static_cast<int32_t>(W - 1);
      AttentionArgs b{qs.q.data(),
                      lq,
                      kv.kf.data() + (cs.first_pos - W + 1) * n_kv_embd,
                      kv.vf.data() + (cs.first_pos - W + 1) * n_kv_embd,
                      n_kv_embd,
                      W,
                      (int32_t)cs.nkv,
                      &p0,
                      0.25f,
                      want.data()};
      cpu::ref::attention(b);
      AttentionArgs a{qs.q.data(), lq,        kv.kf.data(),    kv.vf.data(),
                      n_kv_embd,   cs.n_ctx,  (int32_t)cs.nkv, qs.pos.data(),
                      0.25f,       got.data()};
      a.window = W;
      cpu::ref::attention(a);
      EXPECT_LE(nmse(got, want), 1e-12) << "reference window " << W;
      Ctx c(2);
      cpu::attention(c.ex, a);
      EXPECT_LE(nmse(got, want), 1e-7) << "fast window " << W;
      a.window = 0;  // the window changes the result (the test can fail)
      cpu::attention(c.ex, a);
      EXPECT_GT(nmse(got, want), 1e-3) << "window " << W;
    }
  }
  const std::array<GgmlType, 3> types = {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0};
  for (const auto& cs : kQ8AttnCases) {
    const int64_t n_kv_embd = cs.nkv * cs.hd;
    const KvRows kv = make_kv_rows(cs, 24, 25);
    const HeadLayout lq{cs.hd, cs.nh, cs.n_tok, 0, 0};
    const Queries qs = make_queries(cs, lq, 26);
    const int64_t B = 16, nb = (cs.n_ctx + B - 1) / B;
    std::vector<int32_t> table(nb), seq(cs.n_tok, 0);
    for (int64_t i = 0; i < nb; ++i) table[i] = static_cast<int32_t>(nb - 1 - i);  // reversed
    for (GgmlType t : types) {
      const size_t row = row_size(t, n_kv_embd);
      const cpu::KvPaging pg{B, static_cast<int64_t>(row * B)};
      std::vector<uint8_t> kp(row * B * nb), vp(row * B * nb);
      for (int64_t j = 0; j < cs.n_ctx; ++j) {
        const int64_t slot = table[j / B] * B + j % B;
        std::memcpy(cpu::kv_row_ptr(kp.data(), pg, row, slot),
                    static_cast<const uint8_t*>(kv.k(t)) + j * row, row);
        std::memcpy(cpu::kv_row_ptr(vp.data(), pg, row, slot),
                    static_cast<const uint8_t*>(kv.v(t)) + j * row, row);
      }
      for (int64_t W : {int64_t{3}, int64_t{50}, int64_t{96}}) {
        std::vector<float> want(cs.hd * cs.nh * cs.n_tok), got(want.size());
        AttentionArgs a{qs.q.data(),
                        lq,
                        kv.k(t),
                        kv.v(t),
                        n_kv_embd,
                        cs.n_ctx,
                        (int32_t)cs.nkv,
                        qs.pos.data(),
                        1.0f / std::sqrt((float)cs.hd),
                        want.data(),
                        t,
                        t};
        a.window = W;
        a.softcap = 2.0f;
        cpu::ref::attention(a);
        for (bool paged : {false, true}) {
          AttentionArgs f = a;
          if (paged) {
            f.k = kp.data();
            f.v = vp.data();
            f.paging = pg;
            f.tables = cpu::KvTables{seq.data(), table.data(), nb};
          }
          for (SimdLevel lvl : kLevels) {
            Ctx c(2, lvl);
            f.out = got.data();
            cpu::attention(c.ex, f);
            EXPECT_LE(nmse(got, want), 1e-7)
                << "hd=" << cs.hd << " n_tok=" << cs.n_tok << " W " << W << " " << type_name(t)
                << (paged ? " paged" : "") << " level " << int(lvl);
          }
        }
        AttentionArgs nocap = a;  // the cap changes the result
        nocap.softcap = 0.0f;
        nocap.out = got.data();
        cpu::ref::attention(nocap);
        if (cs.n_tok * cs.nh > 4) {
          EXPECT_GT(nmse(got, want), 1e-6) << "cap, hd=" << cs.hd;
        }
      }
    }
  }
}

// kv_store at slots through paging: rows land in their blocks; slot -1 (padding) stores nothing.
TEST(KvKernels, PagedStoreWritesSlotsAndSkipsPadding) {
  const int64_t e = 64, nt = 4, B = 4;
  auto k = randn(e * nt, 1), v = randn(e * nt, 2);
  const cpu::KvPaging pg{B, static_cast<int64_t>(e * 4 * B + 128)};
  std::vector<uint8_t> kr(pg.block_stride * 3, 0), vr(kr.size(), 0);
  const std::vector<int32_t> slots = {9, -1, 4, 11};
  Ctx c(2);
  cpu::kv_store(c.ex, k.data(), e, v.data(), e, e, nt, slots.data(),
                KvRegions{kr.data(), vr.data(), GgmlType::F32, GgmlType::F32, pg}, 12);
  for (int64_t t = 0; t < nt; ++t) {
    if (slots[t] < 0) continue;
    const float* kg = reinterpret_cast<const float*>(cpu::kv_row_ptr(kr.data(), pg, e * 4, slots[t]));
    EXPECT_EQ(std::vector<float>(kg, kg + e), std::vector<float>(&k[t * e], &k[t * e] + e));
  }
  // Nothing but the three rows was written.
  size_t nonzero = 0;
  for (size_t i = 0; i < kr.size(); i += 4) nonzero += (kr[i] | kr[i + 1] | kr[i + 2] | kr[i + 3]) != 0;
  EXPECT_EQ(nonzero, 3u * e);
  const std::vector<int32_t> bad = {12};
  EXPECT_THROW(cpu::kv_store(c.ex, k.data(), e, v.data(), e, e, 1, bad.data(),
                             KvRegions{kr.data(), vr.data(), GgmlType::F32, GgmlType::F32, pg}, 12),
               Error);
}

// Q8_0 storage vs f32: the codes carry ~8 bits per value, relative to the block's largest
// magnitude (error <= amax / 254 per value, ~1.3e-5 relative MSE for Gaussian blocks); attention
// averages those errors over positions, so the output's NMSE stays near that level.
TEST(KvKernels, Q8_0AttentionIsCloseToF32) {
  double worst = 0;
  for (const auto& cs : kQ8AttnCases) {
    const auto [o32, o8] = attention_f32_and(cs, GgmlType::Q8_0);
    worst = std::max(worst, nmse(o8, o32));
    EXPECT_LE(nmse(o8, o32), 2e-4) << "hd=" << cs.hd;
  }
  std::printf("[ report ] q8_0 vs f32 attention, worst NMSE over the shapes: %.3g\n", worst);
}

// f16 storage is the only difference: attention over the rounded rows stays close to f32.
TEST(KvKernels, F16AttentionIsCloseToF32) {
  for (const auto& cs : kAttnCases) {
    const auto [o32, o16] = attention_f32_and(cs, GgmlType::F16);
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

}  // namespace
}  // namespace minfer
