// minfer-test-libs: minfer_model minfer_gen
// Batch invariance of the graph engine (docs/NUMERICS.md "Batch invariance"): a token row's
// logits are bit for bit the same whether its tokens were evaluated one per eval (decode) or k
// per eval (prefill, speculative verification), and a sequence's logits the same alone or
// sharing its decode steps with other sequences (continuous batching). On the default path
// (weights packed at load) at every x86 SIMD level, for stories260K (F32) and `minfer gen`
// files of each weight type the kernels pack.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "common/error.h"
#include "gen_file_util.h"
#include "model/model.h"
#include "model/session.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

struct Level {
  const char* name;
  cpu::SimdLevel simd;
};

std::vector<Level> levels() {
  std::vector<Level> v{{"native", cpu::SimdLevel::kBest}};
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (f.avx512 && f.avx2) v.push_back({"avx2", cpu::SimdLevel::kAvx2});
  return v;
}

SessionParams params(cpu::SimdLevel simd, int32_t n_seq = 1) {
  SessionParams p;
  p.n_ctx = 512;
  p.n_seq_max = n_seq;
  p.n_threads = 2;
  p.prefix_cache = false;
  p.simd = simd;
  return p;
}

std::vector<int32_t> random_tokens(size_t n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(1, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

using Rows = std::vector<std::vector<float>>;

// Logits of every position of `toks`, evaluated k tokens per eval (the last eval shorter).
Rows eval_in_chunks(Model& m, cpu::SimdLevel simd, const std::vector<int32_t>& toks, size_t k) {
  Session s(m, params(simd));
  const auto V = static_cast<size_t>(s.n_vocab());
  Rows out;
  for (size_t p = 0; p < toks.size(); p += k) {
    const size_t n = std::min(k, toks.size() - p);
    std::vector<int32_t> rows(n);
    for (size_t i = 0; i < n; ++i) rows[i] = static_cast<int32_t>(i);
    const auto lg = s.eval(std::span(toks).subspan(p, n), static_cast<int64_t>(p), rows);
    for (size_t i = 0; i < n; ++i) out.emplace_back(lg.begin() + i * V, lg.begin() + (i + 1) * V);
  }
  return out;
}

// "" when equal bit for bit, else the first row that differs and the largest difference.
std::string compare(const Rows& got, const Rows& want) {
  if (got.size() != want.size()) return "row counts differ";
  for (size_t r = 0; r < got.size(); ++r) {
    float worst = 0;
    size_t n_bad = 0;
    for (size_t i = 0; i < got[r].size(); ++i)
      if (got[r][i] != want[r][i]) {
        ++n_bad;
        worst = std::max(worst, std::fabs(got[r][i] - want[r][i]));
      }
    if (n_bad > 0)
      return "row " + std::to_string(r) + ": " + std::to_string(n_bad) +
             " logits differ, max |diff| " + std::to_string(worst);
  }
  return "";
}

// Every row of k-token evals (k = 2, 5, 17, 64) equals the one-token evals' row.
void expect_rows_invariant(const std::string& path, const std::string& what) {
  for (const Level& lv : levels()) {
    auto m = Model::load(path);  // one per level: the packed layout is the level's
    const auto toks = random_tokens(64, m->hparams().n_vocab, 5);
    const Rows one = eval_in_chunks(*m, lv.simd, toks, 1);
    for (size_t k : {2, 5, 17, 64})
      EXPECT_EQ(compare(eval_in_chunks(*m, lv.simd, toks, k), one), "")
          << what << " " << lv.name << " k=" << k;
  }
}

fs::path stories() {
  return fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
}

TEST(BatchInvariance, Stories260KRowsDoNotDependOnEvalWidth) {
  if (!fs::exists(stories())) GTEST_SKIP() << "needs " << stories();
  expect_rows_invariant(stories().string(), "stories260K");
}

// tiny-qwen3 is 256 wide (K-quants stay K-quants); tiny-qwen2 is 64 wide, so its q4_k file is
// Q5_0 throughout (llama.cpp's fallback for rows that are not whole 256-blocks).
struct GenCase {
  const char* preset;
  const char* type;
  const char* packs;  // the weight types the file's projections have
};
const GenCase kGen[] = {
    {"tiny-qwen3", "q8_0", "Q8_0"},        {"tiny-qwen3", "q4_0", "Q4_0"},
    {"tiny-qwen2", "q4_k", "Q5_0"},        {"tiny-qwen3", "q4_k", "Q4_K + Q6_K"},
    {"tiny-qwen3", "q5_k", "Q5_K + Q6_K"}, {"tiny-qwen3", "q6_k", "Q6_K"},
    {"tiny-qwen3", "f16", "F16"},
};

TEST(BatchInvariance, GenFileRowsDoNotDependOnEvalWidth) {
  for (const GenCase& c : kGen) {
    test::GenFile f(c.preset, c.type);
    expect_rows_invariant(f.path, std::string(c.preset) + " " + c.type + " (" + c.packs + ")");
  }
}

// SeqEngine: three sequences decoded together (one token each per step, after prefills of
// different lengths in one batch) give each sequence the logits it gets alone.
TEST(BatchInvariance, SequenceLogitsDoNotDependOnOtherSequences) {
  for (const GenCase& c : {kGen[0], kGen[3]}) {
    test::GenFile f(c.preset, c.type);
    for (const Level& lv : levels()) {
      auto m = Model::load(f.path);
      const int64_t V = m->hparams().n_vocab;
      std::vector<std::vector<int32_t>> seqs;
      for (uint32_t s = 0; s < 3; ++s) seqs.push_back(random_tokens(24 + 7 * s, V, 30 + s));
      std::vector<Rows> alone;
      for (const auto& t : seqs) alone.push_back(eval_in_chunks(*m, lv.simd, t, 1));
      Session sess(*m, params(lv.simd, 3));
      std::vector<size_t> done(3, 0);
      // Step 0: each sequence prefills 3 + s tokens; then one token per sequence per step.
      for (int step = 0; step < 64; ++step) {
        Batch b;
        std::vector<std::pair<size_t, size_t>> who;
        for (size_t s = 0; s < 3; ++s) {
          const size_t n = std::min(seqs[s].size() - done[s], step == 0 ? 3 + s : size_t{1});
          for (size_t i = 0; i < n; ++i) {
            const size_t p = done[s] + i;
            b.add(seqs[s][p], static_cast<int32_t>(p), static_cast<int32_t>(s), true);
            who.emplace_back(s, p);
          }
          done[s] += n;
        }
        if (b.size() == 0) break;
        const auto lg = sess.decode(b);
        for (size_t r = 0; r < who.size(); ++r) {
          const auto [s, p] = who[r];
          const Rows got{std::vector<float>(lg.begin() + r * V, lg.begin() + (r + 1) * V)};
          ASSERT_EQ(compare(got, Rows{alone[s][p]}), "")
              << c.preset << " " << c.type << " " << lv.name << " seq " << s << " pos " << p;
        }
      }
    }
  }
}

// A Model packed at one level cannot serve a Session at another (its packed copy is the only
// readable one): refused by name instead of reading released pages.
TEST(BatchInvariance, SessionAtAnotherLevelThanThePackedModelIsRefused) {
  if (levels().size() < 2) GTEST_SKIP() << "one SIMD level on this CPU";
  test::GenFile f("tiny-qwen3", "q8_0");
  auto m = Model::load(f.path);
  Session native(*m, params(cpu::SimdLevel::kBest));
  try {
    Session avx2(*m, params(cpu::SimdLevel::kAvx2));
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("packed for SIMD level"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minfer
