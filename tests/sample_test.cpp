// minfer-test-libs: minfer_sample minfer_grammar
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "common/error.h"
#include "grammar/grammar.h"
#include "sample/sampler.h"
#include "sample/select.h"

namespace minfer {
namespace {

std::vector<int32_t> ids_of(const Candidates& c) {
  std::vector<int32_t> out;
  for (const auto& x : c.items) out.push_back(x.id);
  return out;
}

SamplerParams greedy() {
  SamplerParams p;
  p.temperature = 0.0f;
  p.seed = 1;
  return p;
}

TEST(Sample, DefaultsMatchLlamaCpp) {
  SamplerParams p;
  EXPECT_FLOAT_EQ(p.temperature, 0.8f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_EQ(p.repeat_last_n, 64);
}

TEST(Sample, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(greedy(), 5);
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
  EXPECT_EQ(argmax(logits), 1);
}

TEST(Sample, RepeatPenaltyDividesPositiveMultipliesNegative) {
  Candidates c;
  std::vector<float> logits = {2.0f, -2.0f, 1.0f};
  c.assign(logits);
  std::vector<int32_t> scratch;
  std::vector<int32_t> hist = {0, 1, 0, 0};  // 0 repeated: penalised once, not three times
  apply_repeat_penalty(c, hist, 2.0f, scratch);
  EXPECT_FLOAT_EQ(c.items[0].logit, 1.0f);
  EXPECT_FLOAT_EQ(c.items[1].logit, -4.0f);
  EXPECT_FLOAT_EQ(c.items[2].logit, 1.0f);
}

TEST(Sample, RepeatPenaltyChangesGreedyChoice) {
  SamplerParams p = greedy();
  p.repeat_penalty = 2.0f;
  Sampler s(p, 3);
  std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(logits), 1);  // 2 / 2 = 1 < 1.5
}

TEST(Sample, RepeatPenaltyWindowForgetsOldTokens) {
  SamplerParams p = greedy();
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s(p, 3);
  std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  s.accept(0);
  s.accept(2);
  s.accept(2);  // 0 fell out of the 2-token window
  EXPECT_EQ(s.sample(logits), 0);
}

TEST(Sample, TopKKeepsBest) {
  Candidates c;
  std::vector<float> logits = {0.0f, 5.0f, 1.0f, 4.0f, 3.0f};
  c.assign(logits);
  apply_top_k(c, 3);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 3, 4}));
  apply_top_k(c, 0);  // off
  EXPECT_EQ(c.size(), 3u);
}

TEST(Sample, TopPKeepsSmallestPrefixReachingP) {
  Candidates c;
  // probabilities 0.5, 0.25, 0.125, 0.125 (logits are logs of them)
  std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.25f), std::log(0.125f)};
  c.assign(logits);
  apply_top_p(c, 0.7f);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 2}));
  c.assign(logits);
  apply_top_p(c, 0.5f);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1}));
}

TEST(Sample, MinPDropsTokensBelowFractionOfMax) {
  Candidates c;
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.02f), std::log(0.18f)};
  c.assign(logits);
  apply_min_p(c, 0.1f);  // threshold 0.05
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{0, 1, 3}));
}

TEST(Sample, StagesAlwaysKeepOne) {
  Candidates c;
  std::vector<float> logits = {1.0f, 1.0f};
  c.assign(logits);
  apply_top_p(c, 0.0f);
  EXPECT_EQ(c.size(), 1u);
  apply_min_p(c, 1.0f);
  EXPECT_EQ(c.size(), 1u);
}

TEST(Sample, SameSeedSameTokens) {
  SamplerParams p;
  p.seed = 1234;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(float(i));
  Sampler a(p, 50), b(p, 50);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 100; ++i) {
    ta.push_back(a.sample(logits));
    tb.push_back(b.sample(logits));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 99;
  Sampler c(p, 50);
  std::vector<int32_t> tc;
  for (int i = 0; i < 100; ++i) tc.push_back(c.sample(logits));
  EXPECT_NE(ta, tc);
}

// With only temperature, draws follow softmax(logits / T): chi-square against the exact
// probabilities with a generous threshold (deterministic with a fixed seed).
TEST(Sample, DrawsFollowTemperedSoftmax) {
  SamplerParams p;
  p.seed = 42;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 0.5f;
  std::vector<float> logits = {0.0f, 0.5f, 1.0f, -0.5f};
  Sampler s(p, 4);
  std::vector<double> expect(4);
  double z = 0;
  for (int i = 0; i < 4; ++i) z += expect[i] = std::exp(logits[i] / 0.5);
  const int n = 20000;
  std::vector<int> count(4);
  for (int i = 0; i < n; ++i) count[s.sample(logits)]++;
  double chi2 = 0;
  for (int i = 0; i < 4; ++i) {
    const double e = n * expect[i] / z;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_LT(chi2, 16.3);  // 3 degrees of freedom, p = 0.001
}

// top-k then temperature: tokens outside the k best are never drawn, and the survivors come
// in the renormalised proportions.
TEST(Sample, TopKRestrictsDraws) {
  SamplerParams p;
  p.seed = 7;
  p.top_k = 2;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f};
  Sampler s(p, 4);
  std::map<int, int> count;
  const int n = 10000;
  for (int i = 0; i < n; ++i) count[s.sample(logits)]++;
  EXPECT_EQ(count.size(), 2u);
  const double p2 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0));
  EXPECT_NEAR(count[2] / double(n), p2, 0.02);
}

TEST(Sample, BadParamsAreErrors) {
  SamplerParams p;
  p.top_p = 1.5f;
  EXPECT_THROW(Sampler(p, 10), Error);
  p = SamplerParams{};
  p.repeat_penalty = 0.0f;
  EXPECT_THROW(Sampler(p, 10), Error);
  Sampler ok(greedy(), 10);
  std::vector<float> wrong(5);
  EXPECT_THROW(ok.sample(wrong), Error);
}

TEST(Sample, RandomSeedIsResolved) {
  SamplerParams p;
  Sampler s(p, 10);
  EXPECT_NE(s.seed(), kRandomSeed);
}

// ---- the fast paths against the plain chain ----

// Rows with what model logits have (a few standouts over a broad bulk) and what breaks
// shortcuts: exact ties (values rounded to a grid), -inf (masked tokens), ascending runs (every
// value beats the running k-th best), lengths that are not a multiple of the 64-float block.
std::vector<float> test_row(std::mt19937& rng, int64_t n, int kind) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  switch (kind % 5) {
    case 0:
      break;
    case 1:  // coarse grid: many exact ties, the maximum among them
      for (auto& v : x) v = std::round(v);
      break;
    case 2:  // ascending: the worst case of the k-best scan
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 997) * 0.01f;
      break;
    case 3:  // masked tokens and a few standouts
      for (size_t i = 0; i < x.size(); i += 7) x[i] = -INFINITY;
      for (int j = 0; j < 5; ++j) x[rng() % x.size()] = 12.0f + float(j);
      break;
    case 4:  // every value equal: ties decide everything
      std::fill(x.begin(), x.end(), 0.25f);
      break;
  }
  return x;
}

TEST(SampleFast, ArgmaxMatchesReference) {
  std::mt19937 rng(5);
  for (int64_t n : {1, 2, 63, 64, 65, 127, 128, 1000, 4099}) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<float> x = test_row(rng, n, kind);
      EXPECT_EQ(argmax_fast(x), argmax(x)) << "n " << n << " kind " << kind;
      // The maximum only in the tail, only in the last block, and NaN away from index 0.
      x[static_cast<size_t>(n - 1)] = 100.0f;
      EXPECT_EQ(argmax_fast(x), argmax(x)) << "n " << n << " kind " << kind;
      if (n > 3) x[1] = NAN;
      EXPECT_EQ(argmax_fast(x), argmax(x)) << "n " << n << " kind " << kind;
    }
  }
  std::vector<float> nan0 = {NAN, 5.0f, 7.0f};
  EXPECT_EQ(argmax_fast(nan0), 0);  // as the plain loop: nothing compares greater than NaN
  std::vector<float> zeros(130, 0.0f);
  zeros[0] = -0.0f;
  zeros[100] = 0.0f;
  EXPECT_EQ(argmax_fast(zeros), 0);  // -0 == +0: the first one
}

TEST(SampleFast, TopKSelectionMatchesPartialSort) {
  std::mt19937 rng(11);
  for (int64_t n : {1, 5, 64, 200, 3001}) {
    for (int kind = 0; kind < 5; ++kind) {
      const std::vector<float> x = test_row(rng, n, kind);
      for (int32_t k : {1, 2, 40, 64, 65, 199, 5000}) {
        for (int n_over : {0, 3}) {
          // Reference: the row copied, overrides written in, partial_sort's k best.
          std::vector<Candidate> over;
          for (int j = 0; j < n_over && n > 0; ++j) {
            const int32_t id = static_cast<int32_t>(rng() % n);
            if (std::any_of(over.begin(), over.end(), [&](auto& c) { return c.id == id; }))
              continue;
            over.push_back({id, (j % 2 ? 20.0f : -3.0f) + float(j), 0.0f});
          }
          std::sort(over.begin(), over.end(), [](auto& a, auto& b) { return a.id < b.id; });
          Candidates ref;
          ref.assign(x);
          for (const auto& o : over) ref.items[size_t(o.id)].logit = o.logit;
          if (k < n) {
            apply_top_k(ref, k);
          } else {
            softmax(ref);  // sorts all: the k >= n case keeps everything, best first
          }
          std::vector<Candidate> out;
          select_top_k(x, k, over, out);
          ASSERT_EQ(out.size(), ref.size()) << "n " << n << " kind " << kind << " k " << k;
          for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_EQ(out[i].id, ref.items[i].id)
                << "n " << n << " kind " << kind << " k " << k << " rank " << i;
            ASSERT_EQ(out[i].logit, ref.items[i].logit);
          }
        }
      }
    }
  }
}

TEST(SampleFast, RadixSortMatchesComparisonSort) {
  std::mt19937 rng(3);
  for (int64_t n : {1, 2, 100, 5000}) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<float> x = test_row(rng, n, kind);
      if (n > 10) {
        x[3] = -0.0f;  // equal to +0: ordered by id
        x[9] = 0.0f;
        x[5] = -1e30f;
        x[6] = 1e-40f;  // a denormal
      }
      Candidates ref, fast;
      ref.assign(x);
      fast.assign(x);
      softmax(ref);  // std::sort under the chain's order
      std::vector<Candidate> tmp;
      sort_by_logit_desc(fast.items, tmp);
      ASSERT_EQ(ids_of(fast), ids_of(ref)) << "n " << n << " kind " << kind;
    }
  }
}

// Token by token, sample() and sample_reference() of two samplers with the same seed and the
// same accepted history must agree for every setting: greedy, top-k on/off/past the
// vocabulary, top-p, min-p, penalties above and below 1.
TEST(SampleFast, ChainMatchesReferenceManySeedsAndSettings) {
  std::mt19937 rng(2024);
  const int64_t n = 1031;  // not a multiple of the 64-float block
  std::vector<std::vector<float>> rows;
  for (int kind = 0; kind < 5; ++kind) rows.push_back(test_row(rng, n, kind));
  int cases = 0;
  for (float temp : {0.0f, 0.8f, 1.5f})
    for (int32_t k : {0, 1, 2, 40, int32_t(n - 1), int32_t(n), int32_t(n + 5)})
      for (float top_p : {1.0f, 0.9f})
        for (float min_p : {0.0f, 0.1f})
          for (float pen : {1.0f, 1.3f, 0.8f}) {
            if (temp <= 0.0f && (k != 40 || top_p != 1.0f || min_p != 0.0f)) continue;
            SamplerParams p;
            p.temperature = temp;
            p.top_k = k;
            p.top_p = top_p;
            p.min_p = min_p;
            p.repeat_penalty = pen;
            p.repeat_last_n = 16;
            p.seed = static_cast<uint32_t>(1000 + cases);
            Sampler fast(p, int32_t(n)), ref(p, int32_t(n));
            for (int t = 0; t < 12; ++t) {
              const std::vector<float>& row = rows[size_t(t) % rows.size()];
              const int32_t a = fast.sample(row);
              const int32_t b = ref.sample_reference(row);
              ASSERT_EQ(a, b) << "temp " << temp << " k " << k << " top_p " << top_p << " min_p "
                              << min_p << " penalty " << pen << " step " << t;
              fast.accept(a);
              ref.accept(b);
            }
            ++cases;
          }
  EXPECT_GT(cases, 150);
}

// The default chain on a vocabulary of Qwen2's size, many seeds.
TEST(SampleFast, DefaultChainMatchesReferenceAtFullVocabulary) {
  std::mt19937 rng(7);
  const int64_t n = 151936;
  std::vector<float> row = test_row(rng, n, 0);
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    SamplerParams p;
    p.seed = seed;
    p.repeat_penalty = seed % 2 ? 1.1f : 1.0f;
    Sampler fast(p, int32_t(n)), ref(p, int32_t(n));
    for (int t = 0; t < 8; ++t) {
      const int32_t a = fast.sample(row);
      ASSERT_EQ(a, ref.sample_reference(row)) << "seed " << seed << " step " << t;
      fast.accept(a);
      ref.accept(a);
      row[static_cast<size_t>(a)] += 3.0f;  // a moving distribution
    }
  }
}

// ---- grammar-constrained sampling (toy vocabulary) ----

std::shared_ptr<const grammar::VocabIndex> toy_vocab() {
  // 0 end, 1 "a", 2 "b", 3 "ab", 4 "c", 5 "ba"
  std::vector<std::string> pieces = {"", "a", "b", "ab", "c", "ba"};
  const int32_t eog[] = {0};
  return std::make_shared<const grammar::VocabIndex>(std::move(pieces), eog);
}

grammar::TokenFilter filter_for(const char* gbnf) {
  return grammar::TokenFilter(std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf)),
                              toy_vocab());
}

TEST(SampleGrammar, AllowedDrawCostsNoMask) {
  auto f = filter_for("root ::= \"c\" \"a\"");
  Sampler s(greedy(), 6);
  const std::vector<float> logits = {0, 1, 2, 3, 9, 5};  // argmax 4 ("c") is allowed
  EXPECT_EQ(s.sample(logits, f), 4);
  EXPECT_EQ(s.n_grammar_masks(), 0);
  EXPECT_EQ(s.n_grammar_samples(), 1);
}

TEST(SampleGrammar, GreedyPicksTheBestAllowedToken) {
  auto f = filter_for("root ::= (\"a\" | \"b\")+");
  Sampler s(greedy(), 6);
  std::vector<float> logits = {9, 1, 2, 3, 8, 5};  // end and "c" are best, both rejected
  EXPECT_EQ(s.sample(logits, f), 5);               // "ba"
  EXPECT_EQ(s.n_grammar_masks(), 1);
  ASSERT_TRUE(f.accept(5));
  EXPECT_EQ(s.sample(logits, f), 0);  // now the end is allowed and best
  logits[0] = -1;
  EXPECT_EQ(s.sample(logits, f), 5);
}

TEST(SampleGrammar, DrawsOnlyAllowedTokensAcrossSeeds) {
  for (uint32_t seed = 0; seed < 200; ++seed) {
    auto f = filter_for("root ::= \"a\" \"b\"*");
    SamplerParams p;
    p.seed = seed;
    p.top_k = 0;
    p.temperature = 1.5f;
    Sampler s(p, 6);
    const std::vector<float> logits = {1, 0.5f, 2, 3, 2.5f, 1};
    for (int i = 0; i < 6; ++i) {
      const int32_t t = s.sample(logits, f);
      ASSERT_TRUE(f.allows(t)) << seed;
      ASSERT_TRUE(f.accept(t));
      if (t == 0) break;
    }
  }
}

TEST(SampleGrammar, NoAllowedTokenIsReported) {
  std::vector<std::string> pieces = {"a", "b"};  // no end token in this vocabulary
  grammar::TokenFilter g(
      std::make_shared<const grammar::Grammar>(grammar::parse_gbnf("root ::= \"a\"")),
      std::make_shared<const grammar::VocabIndex>(pieces, std::span<const int32_t>{}));
  ASSERT_TRUE(g.accept(0));
  Sampler s(greedy(), 2);
  EXPECT_EQ(s.sample(std::vector<float>{1, 2}, g), kNoTokenAllowed);
}

}  // namespace
}  // namespace minfer
