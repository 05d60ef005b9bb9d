// minfer-test-libs: minfer_sample
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "common/error.h"
#include "sample/sampler.h"

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

}  // namespace
}  // namespace minfer
