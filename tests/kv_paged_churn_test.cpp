// minfer-test-libs: minfer_kv
// kv::Cache under a long random workload, as a server would drive it: requests arrive (some
// sharing one of a few system prompts, reused through the prefix cache), prefill in chunks,
// decode, fork, regenerate (a batch below the length), shift, roll back, get preempted when
// the pool is full, and leave. check_invariants() after every step; every row of every
// sequence compared with the reference (kv_paged_util.h) every few steps; after a refused
// batch, a full snapshot compared with the one before.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kv/cache.h"
#include "kv_paged_util.h"

namespace minfer::kv {
namespace {

using namespace test;  // NOLINT: the helpers are this test's vocabulary

struct ChurnOptions {
  int32_t alphabet = 50;     // request tokens are drawn from [0, alphabet)
  int32_t check_every = 16;  // steps between full content checks
};

class Churn {
 public:
  Churn(const CacheParams& p, const ChurnOptions& o, uint32_t seed)
      : c_(p), o_(o), ref_(p.n_seq_max), n_(p.n_seq_max), rng_(seed) {
    want_.resize(static_cast<size_t>(n_));
    target_.assign(static_cast<size_t>(n_), 0);
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> sys(static_cast<size_t>(uni(20, 90)));
      for (auto& t : sys) t = uni(0, o_.alphabet - 1);
      systems_.push_back(sys);
    }
  }

  void step(int i) {
    arrivals();
    if (uni(0, 8) == 0) fork();
    if (uni(0, 60) == 0) shift();
    const BatchBuilder b = make_batch();
    if (b.size() > 0) run_batch(b);
    c_.check_invariants();
    if (i % o_.check_every == 0) {
      ASSERT_TRUE(contents_ok(c_, ref_)) << "step " << i;
    }
    measure(i);
  }

  Cache& cache() { return c_; }
  const Reference& ref() const { return ref_; }

  int64_t ooms = 0, rollbacks = 0, forks = 0, shifts = 0, max_used = 0;
  double worst_waste = 0;  // free committed / committed blocks, after warm-up

 private:
  int uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::vector<int32_t>& want(int32_t s) { return want_[static_cast<size_t>(s)]; }
  std::vector<Entry>& ref_seq(int32_t s) { return ref_.seqs[static_cast<size_t>(s)]; }

  void leave(int32_t s) {
    c_.seq_rm(s, -1, -1);
    ref_seq(s).clear();
    want(s).clear();
  }

  // Empty sequences may start a request (reusing what the prefix cache holds of it); finished
  // ones leave.
  void arrivals() {
    for (int32_t s = 0; s < n_; ++s) {
      if (c_.seq_len(s) == 0 && uni(0, 3) == 0) {
        auto& w = want(s);
        w = uni(0, 2) > 0 ? systems_[static_cast<size_t>(uni(0, 3))] : std::vector<int32_t>{};
        const int extra = uni(1, 300);
        for (int i = 0; i < extra; ++i) w.push_back(uni(0, o_.alphabet - 1));
        target_[static_cast<size_t>(s)] = static_cast<int64_t>(w.size()) + uni(1, 300);
        const int64_t got = c_.reuse_prefix(s, w, static_cast<int64_t>(w.size()) - 1);
        for (int64_t i = 0; i < got; ++i) {
          ref_seq(s).push_back({w[i], Reference::next_uid(ref_seq(s), w[i]), 0});
        }
      } else if (c_.seq_len(s) > 0 && c_.seq_len(s) >= target_[static_cast<size_t>(s)]) {
        leave(s);
      }
    }
  }

  void fork() {
    const int32_t src = uni(0, n_ - 1), dst = uni(0, n_ - 1);
    if (src == dst || c_.seq_len(src) == 0 || c_.seq_len(dst) != 0) return;
    c_.seq_cp(src, dst);
    ref_seq(dst) = ref_seq(src);
    want(dst) = want(src);
    want(dst).resize(static_cast<size_t>(c_.seq_len(src)));
    target_[static_cast<size_t>(dst)] = target_[static_cast<size_t>(src)];
    ++forks;
  }

  // Context shift of a long sequence; the fake re-rotation XORs the moved K rows.
  void shift() {
    const int32_t s = uni(0, n_ - 1);
    if (c_.seq_len(s) <= 40) return;
    const int64_t keep = uni(0, 20), drop = uni(1, 20);
    const size_t k_row = c_.layer(0).k_row;
    try {
      c_.seq_shift(s, keep, drop, [k_row](int32_t, uint8_t* k, int64_t n, int32_t) {
        for (size_t i = 0; i < static_cast<size_t>(n) * k_row; ++i) k[i] ^= 0x5a;
      });
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
      return;
    }
    auto& r = ref_seq(s);
    r.erase(r.begin() + keep, r.begin() + keep + drop);
    for (size_t i = static_cast<size_t>(keep); i < r.size(); ++i) r[i].kxor ^= 0x5a;
    want(s).assign(static_cast<size_t>(c_.seq_len(s)), 0);  // decode makes up the rest
    ++shifts;
  }

  // Prefill chunks of up to 48 tokens, one decode token per decoding sequence, and now and
  // then a regeneration from below the length.
  BatchBuilder make_batch() {
    BatchBuilder b;
    for (int32_t s = 0; s < n_; ++s) {
      const int64_t len = c_.seq_len(s);
      auto& w = want(s);
      if (len == 0 && w.empty()) continue;
      const int64_t from = len > 8 && uni(0, 40) == 0 ? len - uni(1, 8) : len;
      const int64_t have = static_cast<int64_t>(w.size());
      const int64_t n = from < have ? std::min<int64_t>(48, have - from) : 1;
      for (int64_t pos = from; pos < from + n; ++pos) {
        b.add(pos < have ? w[static_cast<size_t>(pos)] : uni(0, o_.alphabet - 1), pos, s);
      }
    }
    return b;
  }

  void run_batch(const BatchBuilder& b) {
    const std::string before = snapshot(c_);
    Placement pl;
    try {
      c_.place(b.token, b.pos, b.seq, pl);
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
      ASSERT_EQ(snapshot(c_), before);
      ++ooms;
      int32_t big = 0;  // preempt the longest sequence
      for (int32_t s = 1; s < n_; ++s) big = c_.seq_len(s) > c_.seq_len(big) ? s : big;
      leave(big);
      return;
    }
    c_.check_invariants();
    const Reference saved = ref_;
    write_rows(c_, ref_, b, pl);
    if (uni(0, 25) == 0) {
      c_.rollback(pl);
      ref_ = saved;
      ++rollbacks;
      return;
    }
    c_.apply(pl);
    for (size_t i = 0; i < b.size(); ++i) {  // decoded tokens extend the wanted ones
      auto& w = want(b.seq[i]);
      if (static_cast<size_t>(b.pos[i]) >= w.size()) w.push_back(b.token[i]);
    }
  }

  void measure(int i) {
    const CacheStats s = c_.stats();
    max_used = std::max(max_used, s.blocks_used);
    if (i >= 300 && s.blocks_committed > 0) {
      worst_waste = std::max(worst_waste, static_cast<double>(s.blocks_free_committed) /
                                              static_cast<double>(s.blocks_committed));
    }
  }

  Cache c_;
  ChurnOptions o_;
  Reference ref_;
  int32_t n_;
  std::mt19937 rng_;
  std::vector<std::vector<int32_t>> systems_;
  std::vector<std::vector<int32_t>> want_;  // the tokens each sequence will hold
  std::vector<int64_t> target_;             // the length at which it leaves
};

void expect_nothing_leaked(Cache& c) {
  c.clear();
  c.check_invariants();
  const CacheStats e = c.stats();
  EXPECT_EQ(e.blocks_used, 0);
  EXPECT_EQ(e.blocks_cached, 0);
  EXPECT_EQ(e.blocks_free, e.n_blocks) << "a block leaked";
  EXPECT_LE(e.blocks_committed, c.params().commit_slack);
  EXPECT_EQ(e.tokens_held, 0);
}

// Waste = committed free blocks / committed blocks. Cached prefix blocks count as used: they
// hold reusable rows. (The unused rows of each sequence's partial last block, under B per
// sequence, are not counted.)
TEST(KvPagedChurn, KeepsInvariantsAndCommittedTracksUse) {
  CacheParams p = small(16 * 160, 16, 8);  // 160 blocks: 8 long sequences overflow it
  p.n_layer = 1;
  Churn ch(p, ChurnOptions{}, 12345);
  for (int i = 0; i < 3000; ++i) {
    ch.step(i);
    if (HasFatalFailure()) return;
  }
  const CacheStats s = ch.cache().stats();
  RecordProperty("worst_waste_percent", std::to_string(ch.worst_waste * 100));
  std::printf(
      "churn: max used %ld, worst free-committed/committed %.2f%%, ooms %ld, rollbacks %ld, "
      "forks %ld, shifts %ld, prefix hits %lu/%lu, cow %lu, evictions %lu\n",
      static_cast<long>(ch.max_used), ch.worst_waste * 100, static_cast<long>(ch.ooms),
      static_cast<long>(ch.rollbacks), static_cast<long>(ch.forks), static_cast<long>(ch.shifts),
      static_cast<unsigned long>(s.prefix_hits), static_cast<unsigned long>(s.prefix_lookups),
      static_cast<unsigned long>(s.cow_copies), static_cast<unsigned long>(s.evictions));
  EXPECT_LE(ch.worst_waste, 0.04);
  EXPECT_GT(s.prefix_hits, 0u);
  EXPECT_GT(ch.forks, 0);
  EXPECT_GT(ch.ooms, 0);
  EXPECT_GT(ch.rollbacks, 0);
  EXPECT_GT(ch.shifts, 0);
  EXPECT_GT(s.cow_copies, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_TRUE(contents_ok(ch.cache(), ch.ref()));
  expect_nothing_leaked(ch.cache());
}

// With 3-bit keys nearly every lookup meets a block with the same key but other tokens or
// another parent (blocks of 2 tokens from a 3-token alphabet recur under many parents), and
// evicted parents come back under new generations. A false hit would attach rows of another
// prefix: the content check after every step would see them.
TEST(KvPagedChurn, NoFalseHitsWhenKeysCollide) {
  CacheParams p = small(2 * 200, 2, 6);
  p.n_layer = 1;
  p.prefix_key_bits = 3;
  ChurnOptions o;
  o.alphabet = 3;
  o.check_every = 1;
  Churn ch(p, o, 777);
  for (int i = 0; i < 800; ++i) {
    ch.step(i);
    if (HasFatalFailure()) return;
  }
  const CacheStats s = ch.cache().stats();
  std::printf(
      "collisions: prefix hits %lu/%lu, evictions %lu\n", static_cast<unsigned long>(s.prefix_hits),
      static_cast<unsigned long>(s.prefix_lookups), static_cast<unsigned long>(s.evictions));
  EXPECT_GT(s.prefix_hits, 0u);
  expect_nothing_leaked(ch.cache());
}

}  // namespace
}  // namespace minfer::kv
