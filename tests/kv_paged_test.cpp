// minfer-test-libs: minfer_kv minfer_heap_counter
// kv::Cache, the paged KV cache: block tables and slots, atomic place/apply/rollback, fork with
// copy-on-write, the prefix cache (reuse, LRU eviction, no false hits), lazy commit checked
// against /proc/self/smaps, seq_shift with a recording re-rotation, and the RAM guard. The
// long random churn is in kv_paged_churn_test.cpp; the row-writing helpers in kv_paged_util.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "heap_counter/heap_counter.h"
#include "kv/cache.h"
#include "kv_paged_util.h"

namespace minfer::kv {
namespace {

using namespace test;  // NOLINT: the helpers are this test's vocabulary

// ---- geometry ----

TEST(KvPaged, GeometryIsBlockMajorAndPageAligned) {
  CacheParams p = small(100, 16, 2);
  p.type_k = GgmlType::Q8_0;
  p.type_v = GgmlType::F16;
  p.n_kv_embd = 64;
  Cache c(p);
  const long page = sysconf(_SC_PAGESIZE);
  const LayerView l0 = c.layer(0), l1 = c.layer(1);
  EXPECT_EQ(l0.k_row, 2u * 34u);  // two Q8_0 blocks
  EXPECT_EQ(l0.v_row, 128u);
  EXPECT_EQ(l0.block_stride % static_cast<size_t>(page), 0u);
  EXPECT_GE(l0.block_stride, 2u * 16u * (68u + 128u));
  EXPECT_EQ(l1.k - l0.k, 16 * (68 + 128));  // layer stride inside a block
  EXPECT_EQ(l0.v - l0.k, 16 * 68);
  EXPECT_EQ(l0.k_slot(16 * 3 + 5), l0.k + 3 * l0.block_stride + 5 * 68);
  const CacheStats s = c.stats();
  EXPECT_EQ(s.n_blocks, 7);  // ceil(100 / 16)
  EXPECT_EQ(s.reserved_bytes, 8 * l0.block_stride);
  EXPECT_EQ(cache_reserved_bytes(p), s.reserved_bytes);
  EXPECT_EQ(s.blocks_committed, 0);
  EXPECT_EQ(s.committed_bytes, l0.block_stride);  // the null block
  EXPECT_EQ(c.max_blocks_per_seq(), 7);
  EXPECT_EQ(c.n_slots(), 8 * 16);  // the null block's rows included
  c.check_invariants();
}

TEST(KvPaged, RejectsBadParams) {
  CacheParams p = small(64);
  p.type_k = GgmlType::Q4_0;
  expect_error([&] { Cache c(p); }, ErrorKind::InvalidArgument, {"K type"});
  p = small(64);
  p.type_v = GgmlType::Q8_0;  // n_kv_embd 8 is not a multiple of 32
  expect_error([&] { Cache c(p); }, ErrorKind::InvalidArgument, {"V type"});
  p = small(64);
  p.n_ctx_seq = 65;
  expect_error([&] { Cache c(p); }, ErrorKind::InvalidArgument, {"n_ctx_seq"});
  expect_error([&] { cache_reserved_bytes(p); }, ErrorKind::InvalidArgument, {"n_ctx_seq"});
  p = small(64);
  p.block_size = 0;
  expect_error([&] { Cache c(p); }, ErrorKind::InvalidArgument, {"block_size"});
}

// ---- batches ----

TEST(KvPaged, PlaceApplyMapsPositionsThroughTables) {
  Cache c(small(256, 4, 4));
  Reference ref(4);
  // Interleaved prefill of three sequences of different lengths in one batch.
  BatchBuilder b;
  for (int i = 0; i < 10; ++i) {
    b.add(100 + i, i, 0);
    if (i < 3) b.add(200 + i, i, 2);
    if (i < 7) b.add(300 + i, i, 1);
  }
  Placement pl = c.place(b.token, b.pos, b.seq);
  EXPECT_EQ(c.seq_len(0), 0);  // nothing visible before apply
  EXPECT_EQ(c.table(1).size(), 0u);
  EXPECT_TRUE(c.pending());
  ASSERT_EQ(pl.seq_ids, (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(pl.seq_lens, (std::vector<int64_t>{10, 3, 7}));
  EXPECT_EQ(pl.table(0).size(), 3u);
  EXPECT_EQ(pl.table(3).size(), 0u);
  std::vector<int32_t> sorted = pl.slots;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "slot used twice";
  for (int32_t s : pl.slots) EXPECT_GE(s, 4) << "a sequence row in the null block";
  c.check_invariants();
  write_rows(c, ref, b, pl);
  c.apply(pl);
  EXPECT_FALSE(c.pending());
  c.check_invariants();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(pl.slots[i], c.slot(b.seq[i], b.pos[i]));
  EXPECT_TRUE(contents_ok(c, ref));
  // Decode steps: every sequence one token per step, including an empty one starting.
  for (int step = 0; step < 9; ++step) {
    BatchBuilder d;
    for (int32_t s = 3; s >= 0; --s) d.add(1000 * s + step, c.seq_len(s), s);
    decode(c, ref, d);
    c.check_invariants();
    ASSERT_TRUE(contents_ok(c, ref));
  }
  EXPECT_EQ(c.stats().tokens_held, 19 + 16 + 12 + 9);
  EXPECT_EQ(c.stats().blocks_used, 5 + 4 + 3 + 3);
}

TEST(KvPaged, BadBatchesThrowAndLeaveTheCacheUnchanged) {
  CacheParams p = small(64, 4, 3);  // 16 blocks
  p.n_ctx_seq = 40;
  Cache c(p);
  Reference ref(3);
  prefill(c, ref, 0, tokens(10, 1));
  prefill(c, ref, 1, tokens(5, 50));
  const std::string before = snapshot(c);
  auto attempt = [&](BatchBuilder b, ErrorKind kind, std::vector<std::string> words) {
    expect_error([&] { c.place(b.token, b.pos, b.seq); }, kind, words);
    EXPECT_EQ(snapshot(c), before);
    EXPECT_FALSE(c.pending());
    c.check_invariants();
  };
  BatchBuilder b;
  b.add(1, 10, 0);
  b.add(1, 0, 3);  // seq id == n_seq_max
  attempt(b, ErrorKind::InvalidArgument, {"seq id 3", "[0, 3)"});
  b = {};
  b.add(1, 0, -1);
  attempt(b, ErrorKind::InvalidArgument, {"seq id -1"});
  b = {};
  b.add(1, 11, 0);  // skips position 10
  attempt(b, ErrorKind::InvalidArgument, {"position 11", "next position 10"});
  b = {};
  b.add(1, 10, 0);
  b.add(1, 12, 0);  // skip inside the batch
  attempt(b, ErrorKind::InvalidArgument, {"position 12 should be 11"});
  b = {};
  b.add(1, 5, 1);
  b.add(1, 4, 1);  // out of order
  attempt(b, ErrorKind::InvalidArgument, {"position 4 should be 6"});
  b = {};
  for (int i = 0; i < 31; ++i) b.add(1, 10 + i, 0);  // 41 > n_ctx_seq 40
  attempt(b, ErrorKind::InvalidArgument, {"41 tokens", "n_ctx_seq", "-c"});
  b = {};
  for (int i = 0; i < 30; ++i) b.add(1, 5 + i, 1);  // 35 tokens: 7 more blocks
  for (int i = 0; i < 30; ++i) b.add(1, i, 2);      // 8 blocks; 11 are left
  attempt(b, ErrorKind::OutOfMemory, {"out of blocks", "15 more blocks", "-c", "5 used", "of 16"});
  expect_error(
      [&] {
        std::vector<int32_t> t{1, 2}, q{10}, s{0, 0};
        c.place(t, q, s);
      },
      ErrorKind::InvalidArgument, {"differ in length"});
  EXPECT_EQ(snapshot(c), before);
  // Sequence operations refuse what they cannot do, unchanged too.
  expect_error([&] { c.seq_rm(0, 2, 5); }, ErrorKind::InvalidArgument, {"hole", "seq_shift"});
  expect_error([&] { c.seq_rm(0, 0, 5); }, ErrorKind::InvalidArgument, {"hole"});
  expect_error([&] { c.reuse_prefix(0, tokens(8, 1), 8); }, ErrorKind::InvalidArgument,
               {"must be empty"});
  expect_error([&] { c.seq_cp(0, 7); }, ErrorKind::InvalidArgument, {"seq id 7"});
  expect_error([&] { c.seq_shift(0, 4, 7, {}); }, ErrorKind::InvalidArgument, {"n_discard 7"});
  EXPECT_EQ(snapshot(c), before);
  EXPECT_TRUE(contents_ok(c, ref));
  // A batch that fits after all still goes through.
  b = {};
  for (int i = 0; i < 30; ++i) b.add(7, 10 + i, 0);
  decode(c, ref, b);
  EXPECT_TRUE(contents_ok(c, ref));
}

TEST(KvPaged, RollbackRestoresEvenATruncatingBatch) {
  Cache c(small(128, 4, 2));
  Reference ref(2);
  prefill(c, ref, 0, tokens(14, 1));
  c.seq_cp(0, 1);
  ref.seqs[1] = ref.seqs[0];
  const std::string before = snapshot(c);
  const Reference ref_before = ref;
  // seq 0 rewrites from position 6 (truncating 14 -> 6, inside block 1) and grows to 17;
  // seq 1 appends into its shared last block.
  BatchBuilder b;
  for (int i = 0; i < 11; ++i) b.add(90 + i, 6 + i, 0);
  b.add(77, 14, 1);
  Placement pl = c.place(b.token, b.pos, b.seq);
  c.check_invariants();
  write_rows(c, ref, b, pl);  // the forward pass wrote its rows, then failed
  c.rollback(pl);
  c.check_invariants();
  EXPECT_EQ(snapshot(c), before);
  ref = ref_before;
  EXPECT_TRUE(contents_ok(c, ref)) << "the old rows of positions 6..13 must be intact";
  // The same batch applied: truncation happens at apply.
  decode(c, ref, b);
  c.check_invariants();
  EXPECT_EQ(c.seq_len(0), 17);
  EXPECT_EQ(c.seq_len(1), 15);
  EXPECT_TRUE(contents_ok(c, ref));
}

TEST(KvPaged, RollbackOfATruncationInsideAPrivateBlockKeepsItsRows) {
  CacheParams p = small(128, 4, 1);
  p.prefix_cache = false;  // nothing keyed: every block is private and writable
  Cache c(p);
  Reference ref(1);
  prefill(c, ref, 0, tokens(14, 1));
  const std::string before = snapshot(c);
  const Reference ref_before = ref;
  for (int64_t from : {13, 9}) {  // inside the partial last block; inside a full block
    BatchBuilder b;
    b.add(90, from, 0);
    b.add(91, from + 1, 0);
    Placement pl = c.place(b.token, b.pos, b.seq);
    write_rows(c, ref, b, pl);
    c.rollback(pl);
    c.check_invariants();
    EXPECT_EQ(snapshot(c), before);
    ref = ref_before;
    EXPECT_TRUE(contents_ok(c, ref)) << "from " << from;
  }
}

// A decode step (place into a reused Placement, write, apply; blocks filling up, keyed, copied
// on write; a sequence leaving and coming back through the prefix cache) allocates nothing once
// batches of its size have been seen.
TEST(KvPaged, DecodeStepsAllocateNothingOnceWarm) {
  if (!kHeapCounting) GTEST_SKIP() << "heap counting is off under the sanitizers";
  Cache c(small(4096, 16, 4));
  std::vector<int32_t> tok, pos, seq;
  tok.reserve(4);
  pos.reserve(4);
  seq.reserve(4);
  Placement pl;
  auto step = [&](int i) {
    tok.clear();
    pos.clear();
    seq.clear();
    for (int32_t s = 0; s < 4; ++s) {
      tok.push_back(static_cast<int32_t>(c.seq_len(s) * 31 + s));
      pos.push_back(static_cast<int32_t>(c.seq_len(s)));
      seq.push_back(s);
    }
    c.place(tok, pos, seq, pl);
    for (size_t k = 0; k < tok.size(); ++k) {
      for (int32_t l = 0; l < 2; ++l) {
        fill_row(c.layer(l).k_slot(pl.slots[k]), c.layer(l).k_row, i, l, 0, 0);
        fill_row(c.layer(l).v_slot(pl.slots[k]), c.layer(l).v_row, i, l, 1, 0);
      }
    }
    c.apply(pl);
  };
  for (int i = 0; i < 120; ++i) step(i);
  std::vector<int32_t> prompt3(static_cast<size_t>(c.seq_len(3)));
  for (size_t p = 0; p < prompt3.size(); ++p) prompt3[p] = static_cast<int32_t>(p * 31 + 3);
  for (int32_t s = 0; s < 4; ++s) c.seq_rm(s, 100 + s, -1);  // into keyed blocks: COW next
  // Measured: the tables grow past anything seen so far (100 -> 300 tokens).
  const uint64_t before = heap_allocations();
  for (int i = 0; i < 200; ++i) {
    if (i == 32) {
      c.seq_rm(3, -1, -1);
      EXPECT_EQ(c.reuse_prefix(3, prompt3, 150), 112);
    }
    step(1000 + i);
  }
  EXPECT_EQ(heap_allocations() - before, 0u);
  EXPECT_GT(c.stats().cow_copies, 0u);
  EXPECT_GT(c.stats().prefix_hits, 0u);
  c.check_invariants();
}

// ---- fork ----

TEST(KvPaged, ForkOfA2000TokenSequenceCopiesAtMostOneBlock) {
  CacheParams p = small(4096, 16, 2);
  Cache c(p);
  Reference ref(2);
  std::vector<int32_t> prompt(2000);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 7 % 1000);
  prefill(c, ref, 0, prompt);
  const int64_t used = c.stats().blocks_used;  // 125
  c.seq_cp(0, 1);
  ref.seqs[1] = ref.seqs[0];
  EXPECT_EQ(c.stats().blocks_used, used) << "the fork copied blocks";
  EXPECT_EQ(c.stats().cow_copies, 0u);
  const auto t0 = c.table(0), t1 = c.table(1);
  EXPECT_TRUE(std::equal(t0.begin(), t0.end(), t1.begin(), t1.end()));
  c.check_invariants();
  // Both append; 2000 % 16 == 0, so the first append of each opens a fresh block: no copy.
  for (int step = 0; step < 5; ++step) {
    BatchBuilder b;
    b.add(5000 + step, c.seq_len(0), 0);
    b.add(6000 + step, c.seq_len(1), 1);
    decode(c, ref, b);
  }
  EXPECT_EQ(c.stats().cow_copies, 0u);
  // Fork inside a block (2005 tokens): the shared partial block is copied once, by the first
  // writer; the second writes in place.
  c.seq_cp(0, 1);
  ref.seqs[1] = ref.seqs[0];
  for (int step = 0; step < 20; ++step) {
    BatchBuilder b;
    b.add(7000 + step, c.seq_len(0), 0);
    b.add(8000 + step, c.seq_len(1), 1);
    decode(c, ref, b);
    c.check_invariants();
  }
  EXPECT_EQ(c.stats().cow_copies, 1u);
  EXPECT_TRUE(contents_ok(c, ref));
  const std::string dump = c.to_string();
  EXPECT_NE(dump.find("seq 0 len 2025:"), std::string::npos) << dump;
  EXPECT_NE(dump.find("*k"), std::string::npos) << "shared keyed blocks are marked\n" << dump;
  const auto a = c.table(0), b = c.table(1);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 125, b.begin()));  // shared history
  EXPECT_NE(a[125], b[125]);
}

TEST(KvPaged, SeqRmIntoASharedBlockCopiesOnTheNextWrite) {
  Cache c(small(128, 4, 2));
  Reference ref(2);
  prefill(c, ref, 0, tokens(12, 1));
  c.seq_cp(0, 1);
  ref.seqs[1] = ref.seqs[0];
  c.seq_rm(1, 5, -1);  // into the shared block 1
  ref.seqs[1].resize(5);
  c.check_invariants();
  prefill(c, ref, 1, tokens(6, 40));
  c.check_invariants();
  EXPECT_TRUE(contents_ok(c, ref)) << "seq 0's rows at 5..11 must survive seq 1's rewrite";
  EXPECT_EQ(c.stats().cow_copies, 1u);
  c.seq_keep(1);
  ref.seqs[0].clear();
  c.check_invariants();
  EXPECT_EQ(c.seq_len(0), 0);
  EXPECT_TRUE(contents_ok(c, ref));
}

// ---- prefix cache ----

TEST(KvPaged, PrefixReuseAfterTheOwnerLeft) {
  Cache c(small(256, 4, 3));
  Reference ref(3);
  const std::vector<int32_t> prompt = tokens(18, 10);  // 4 full blocks + 2
  prefill(c, ref, 0, prompt);
  c.seq_rm(0, -1, -1);
  ref.seqs[0].clear();
  EXPECT_EQ(c.stats().blocks_cached, 4);  // the partial block went free
  EXPECT_EQ(c.stats().blocks_used, 0);
  c.check_invariants();
  std::vector<int32_t> q = prompt;
  q.push_back(99);
  // The probe sees what reuse_prefix would attach and changes nothing: no counters, the
  // blocks still cached and unreferenced; a prompt differing in its first block finds none.
  EXPECT_EQ(c.cached_prefix(q, 15), 12);
  EXPECT_EQ(c.cached_prefix(q, static_cast<int64_t>(q.size()) - 1), 16);
  std::vector<int32_t> other = q;
  other[1] += 1;
  EXPECT_EQ(c.cached_prefix(other, 16), 0);
  EXPECT_EQ(c.stats().prefix_lookups, 0u);
  EXPECT_EQ(c.stats().blocks_cached, 4);
  EXPECT_EQ(c.stats().blocks_used, 0);
  // At most max_tokens: 17 -> 4 blocks of 4; 15 -> 3.
  EXPECT_EQ(c.reuse_prefix(1, q, 15), 12);
  EXPECT_EQ(c.stats().prefix_hits, 3u);
  EXPECT_EQ(c.stats().prefix_lookups, 3u);
  c.seq_rm(1, -1, -1);
  EXPECT_EQ(c.reuse_prefix(1, q, static_cast<int64_t>(q.size()) - 1), 16);
  EXPECT_EQ(c.stats().prefix_hits, 7u);
  EXPECT_EQ(c.stats().prefix_lookups, 7u);
  // The reference for the reused part is the prompt's own rows.
  for (int i = 0; i < 16; ++i) {
    auto& s = ref.seqs[1];
    s.push_back({q[i], Reference::next_uid(s, q[i]), 0});
  }
  EXPECT_TRUE(contents_ok(c, ref));
  prefill(c, ref, 1, std::vector<int32_t>(q.begin() + 16, q.end()));
  EXPECT_TRUE(contents_ok(c, ref));
  // A second user of the same prefix shares the blocks (refcount 2), and the first one's
  // appends after the prefix never touch them.
  EXPECT_EQ(c.cached_prefix(q, 16), 16);  // blocks a live sequence holds are found too
  EXPECT_EQ(c.reuse_prefix(2, q, 16), 16);
  const auto a = c.table(1), b = c.table(2);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 4, b.begin()));
  c.check_invariants();
}

// reuse_prefix stops a block short of a cached prompt (the last token must be decoded); the
// recomputed block is swapped for the cached one at apply(), so the chain goes on and what the
// sequence generates after it is cached too.
TEST(KvPaged, ARecomputedCachedBlockIsDeduplicatedAndTheChainGoesOn) {
  Cache c(small(256, 4, 3));
  Reference ref(3);
  const auto prompt = tokens(8, 10);
  prefill(c, ref, 0, prompt);
  const int32_t cached_b1 = c.table(0)[1];
  c.seq_rm(0, -1, -1);
  ref.seqs[0].clear();
  EXPECT_EQ(c.reuse_prefix(1, prompt, 7), 4);
  for (int i = 0; i < 4; ++i) {
    ref.seqs[1].push_back({prompt[i], Reference::next_uid(ref.seqs[1], prompt[i]), 0});
  }
  prefill(c, ref, 1, std::vector<int32_t>(prompt.begin() + 4, prompt.end()));
  EXPECT_EQ(c.table(1)[1], cached_b1);
  EXPECT_EQ(c.stats().dedup_blocks, 1u);
  EXPECT_EQ(c.stats().blocks_used, 2);
  prefill(c, ref, 1, tokens(5, 50));  // generated: block 2 is keyed under the cached block
  EXPECT_TRUE(contents_ok(c, ref));
  c.check_invariants();
  std::vector<int32_t> turn2 = prompt;
  for (int32_t t : tokens(5, 50)) turn2.push_back(t);
  c.seq_rm(1, -1, -1);
  EXPECT_EQ(c.reuse_prefix(2, turn2, 13), 12);
  c.check_invariants();
}

TEST(KvPaged, NoFalseHits) {
  Cache c(small(256, 4, 3));
  Reference ref(3);
  prefill(c, ref, 0, {1, 2, 3, 4, 5, 6, 7, 8});
  prefill(c, ref, 1, {9, 9, 9, 9, 5, 6, 7, 8});  // the same second block after another first
  c.seq_rm(0, -1, -1);
  c.seq_rm(1, -1, -1);
  EXPECT_EQ(c.stats().blocks_cached, 4);
  // Same length, different tokens (last token, first token, a permutation): no hit.
  EXPECT_EQ(c.reuse_prefix(2, std::vector<int32_t>{1, 2, 3, 5, 5, 6, 7, 8, 0}, 8), 0);
  EXPECT_EQ(c.reuse_prefix(2, std::vector<int32_t>{0, 2, 3, 4, 5, 6, 7, 8, 0}, 8), 0);
  EXPECT_EQ(c.reuse_prefix(2, std::vector<int32_t>{4, 3, 2, 1, 5, 6, 7, 8, 0}, 8), 0);
  // The second block matches by tokens but its parent differs: only the first block.
  EXPECT_EQ(c.reuse_prefix(2, std::vector<int32_t>{1, 2, 3, 4, 9, 9, 9, 9, 0}, 8), 4);
  c.seq_rm(2, -1, -1);
  EXPECT_EQ(c.reuse_prefix(2, std::vector<int32_t>{9, 9, 9, 9, 1, 2, 3, 4}, 8), 4);
  c.seq_rm(2, -1, -1);
  EXPECT_EQ(c.reuse_prefix(2, std::vector<int32_t>{9, 9, 9, 9, 5, 6, 7, 8}, 8), 8);
  EXPECT_EQ(c.stats().prefix_hits, 1u + 1u + 2u);
  EXPECT_EQ(c.stats().prefix_lookups, 6u * 2u);
  c.check_invariants();
}

TEST(KvPaged, EvictsLeastRecentlyUsedCachedBlocksFirst) {
  Cache c(small(32, 4, 3));  // 8 blocks
  Reference ref(3);
  const auto a = tokens(8, 100), b = tokens(8, 200);
  prefill(c, ref, 0, a);
  prefill(c, ref, 1, b);
  c.seq_rm(0, -1, -1);  // LRU: a1 a0
  c.seq_rm(1, -1, -1);  // LRU: a1 a0 b1 b0
  EXPECT_EQ(c.stats().blocks_cached, 4);
  // Touch a: reuse and release again -> LRU: b1 b0 a1 a0.
  EXPECT_EQ(c.reuse_prefix(2, a, 8), 8);
  c.seq_rm(2, -1, -1);
  ref.seqs.assign(3, {});
  // 4 uncommitted blocks are taken before any eviction, then b1, then b0.
  prefill(c, ref, 0, tokens(16, 500));
  EXPECT_EQ(c.stats().evictions, 0u);
  prefill(c, ref, 0, tokens(4, 600));
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.reuse_prefix(1, b, 8), 4) << "b's tail block went first";
  c.seq_rm(1, -1, -1);
  EXPECT_EQ(c.reuse_prefix(1, a, 8), 8) << "a was used more recently";
  c.seq_rm(1, -1, -1);
  c.check_invariants();
  EXPECT_TRUE(contents_ok(c, ref));
}

// ---- element types ----

// The same life (prefill, fork, appends on both sides, truncation into a shared block, prefix
// reuse, shift) with q8_0 K and f16 V rows, and f16 K with q8_0 V: rows are bytes to the cache,
// copied and moved whole.
TEST(KvPaged, QuantizedAndHalfRowsMoveWhole) {
  for (auto [tk, tv] :
       {std::pair{GgmlType::Q8_0, GgmlType::F16}, std::pair{GgmlType::F16, GgmlType::Q8_0}}) {
    SCOPED_TRACE(std::string(type_name(tk)) + "/" + std::string(type_name(tv)));
    CacheParams p = small(512, 8, 3);
    p.n_kv_embd = 64;
    p.type_k = tk;
    p.type_v = tv;
    Cache c(p);
    Reference ref(3);
    const auto prompt = tokens(37, 5);
    prefill(c, ref, 0, prompt);
    c.seq_cp(0, 1);
    ref.seqs[1] = ref.seqs[0];
    prefill(c, ref, 0, tokens(6, 100));
    prefill(c, ref, 1, tokens(9, 200));
    c.seq_rm(1, 20, -1);
    ref.seqs[1].resize(20);
    prefill(c, ref, 1, tokens(3, 300));
    ASSERT_TRUE(contents_ok(c, ref));
    EXPECT_EQ(c.reuse_prefix(2, prompt, 36), 32);
    for (int i = 0; i < 32; ++i) {
      ref.seqs[2].push_back({prompt[i], Reference::next_uid(ref.seqs[2], prompt[i]), 0});
    }
    c.seq_shift(0, 3, 10, [&](int32_t, uint8_t* k, int64_t n, int32_t) {
      for (size_t i = 0; i < static_cast<size_t>(n) * c.layer(0).k_row; ++i) k[i] ^= 0x33;
    });
    auto& s0 = ref.seqs[0];
    s0.erase(s0.begin() + 3, s0.begin() + 13);
    for (size_t i = 3; i < s0.size(); ++i) s0[i].kxor ^= 0x33;
    EXPECT_TRUE(contents_ok(c, ref));
    c.check_invariants();
  }
}

// ---- lazy commit ----

// Bytes resident in [base, base + len) according to /proc/self/smaps (all VMAs inside it).
uint64_t resident_bytes(const uint8_t* base, uint64_t len) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base), hi = lo + len;
  bool inside = false;
  uint64_t total = 0;
  while (std::getline(f, line)) {
    uintptr_t a = 0, b = 0;
    char dash = 0;
    std::istringstream in(line);
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && (in >> std::hex >> a >> dash >> b) &&
        dash == '-') {
      inside = a >= lo && b <= hi;
      continue;
    }
    if (inside && line.rfind("Rss:", 0) == 0) total += std::stoull(line.substr(4)) * 1024;
  }
  return total;
}

TEST(KvPaged, LazyCommitTracksTokensHeld) {
  CacheParams p = small(32768, 16, 8);
  p.n_layer = 4;
  p.n_kv_embd = 256;  // a block is 4 * 16 * 2 KiB = 128 KiB: RSS is measurable
  Cache c(p);
  Reference ref(8);
  const CacheStats s0 = c.stats();
  EXPECT_EQ(s0.reserved_bytes, (2048u + 1u) * s0.block_bytes);
  prefill(c, ref, 3, tokens(100, 1));
  const CacheStats s = c.stats();
  const int64_t for_tokens = (100 + 15) / 16;  // 7
  EXPECT_LE(s.blocks_committed, for_tokens + 2);
  EXPECT_LE(s.committed_bytes, static_cast<uint64_t>(for_tokens + 2 + 1) * s.block_bytes);
  const uint8_t* base = c.layer(0).k;
  const uint64_t rss = resident_bytes(base, s.reserved_bytes);
  EXPECT_LE(rss, s.committed_bytes);
  // 6 full blocks and 4 rows of each layer of the 7th were written: they are resident.
  EXPECT_GE(rss, 6 * s.block_bytes) << "the rows were written, so they are resident";
  // Decode to 400 tokens, then drop the sequence: committed falls back to the slack.
  for (int i = 100; i < 400; ++i) prefill(c, ref, 3, {i});
  EXPECT_LE(c.stats().blocks_committed, 25 + 2);
  c.seq_rm(3, -1, -1);
  c.clear();  // drops the cached prefix blocks too
  const CacheStats e = c.stats();
  EXPECT_EQ(e.blocks_used + e.blocks_cached, 0);
  EXPECT_LE(e.blocks_committed, 2);
  EXPECT_LE(resident_bytes(base, e.reserved_bytes), e.committed_bytes);
  c.check_invariants();
}

// ---- seq_shift ----

struct RotateCall {
  int32_t layer;
  const uint8_t* k;
  int64_t n_rows;
  int32_t delta;
};

TEST(KvPaged, ShiftMovesRowsAndReRotatesTheMovedKRows) {
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "with a forked copy holding the blocks" : "sole holder");
    Cache c(small(256, 4, 2));
    Reference ref(2);
    prefill(c, ref, 0, tokens(30, 1));
    if (shared) {
      c.seq_cp(0, 1);
      ref.seqs[1] = ref.seqs[0];
    }
    std::vector<RotateCall> calls;
    const size_t k_row = c.layer(0).k_row;
    auto rot = [&](int32_t l, uint8_t* k, int64_t n, int32_t delta) {
      calls.push_back({l, k, n, delta});
      for (size_t i = 0; i < static_cast<size_t>(n) * k_row; ++i)
        k[i] ^= static_cast<uint8_t>(delta);
    };
    c.seq_shift(0, 5, 7, rot);  // drop 5..11; 12..29 -> 5..22
    c.check_invariants();
    auto& s = ref.seqs[0];
    s.erase(s.begin() + 5, s.begin() + 12);
    for (size_t i = 5; i < s.size(); ++i) s[i].kxor ^= static_cast<uint8_t>(-7);
    EXPECT_TRUE(contents_ok(c, ref));
    EXPECT_EQ(c.seq_len(0), 23);
    int64_t rows[2] = {0, 0};
    for (const RotateCall& r : calls) {
      EXPECT_EQ(r.delta, -7);
      rows[r.layer] += r.n_rows;
      // Each call covers rows of this sequence at positions >= n_keep.
      const int32_t first = static_cast<int32_t>((r.k - c.layer(r.layer).k) /
                                                 static_cast<ptrdiff_t>(c.layer(0).block_stride));
      EXPECT_NE(std::find(c.table(0).begin(), c.table(0).end(), first), c.table(0).end());
    }
    EXPECT_EQ(rows[0], 18);
    EXPECT_EQ(rows[1], 18);
    if (shared) {
      EXPECT_GE(c.stats().cow_copies, 5u);
    }  // blocks 1..5 rewritten into fresh ones
    // Appends after the shift land right after the moved rows.
    prefill(c, ref, 0, tokens(6, 70));
    EXPECT_TRUE(contents_ok(c, ref));
    c.check_invariants();
  }
}

TEST(KvPaged, ShiftOutOfBlocksLeavesTheCacheUnchanged) {
  Cache c(small(32, 4, 2));  // 8 blocks
  Reference ref(2);
  prefill(c, ref, 0, tokens(24, 1));  // 6 blocks
  c.seq_cp(0, 1);
  ref.seqs[1] = ref.seqs[0];
  prefill(c, ref, 1, tokens(4, 50));  // seq 1's own 7th block; 1 block left
  const std::string before = snapshot(c);
  // Every block seq 0 would rewrite is shared with seq 1: 6 fresh blocks needed.
  expect_error([&] { c.seq_shift(0, 1, 2, {}); }, ErrorKind::OutOfMemory,
               {"seq_shift", "needs 6 fresh blocks", "-c"});
  EXPECT_EQ(snapshot(c), before);
  EXPECT_TRUE(contents_ok(c, ref));
  c.check_invariants();
}

// A sequence that fills the pool holds every block, and the prefix cache keys each one as it
// fills: nothing is free to copy into, so the shift rewrites its own blocks in place after
// dropping their keys (it used to fail "out of blocks", which is why run and chat turned the
// prefix cache off). With room to spare, the keyed blocks are copied and stay findable.
TEST(KvPaged, ShiftOfAFullPoolDropsKeysInsteadOfFailing) {
  Cache c(small(32, 4, 2));  // 8 blocks
  Reference ref(2);
  const std::vector<int32_t> prompt = tokens(32, 1);
  prefill(c, ref, 0, prompt);
  ASSERT_EQ(c.stats().blocks_free, 0);
  ASSERT_EQ(c.cached_prefix(prompt, 32), 32);  // every block keyed
  c.seq_shift(0, 4, 8, {});  // drop 4..11; blocks 1..5 rewritten in place
  c.check_invariants();
  auto& s = ref.seqs[0];
  s.erase(s.begin() + 4, s.begin() + 12);
  EXPECT_TRUE(contents_ok(c, ref));
  EXPECT_EQ(c.stats().cow_copies, 0u);
  // The first block was not rewritten and keeps its key; the rewritten ones lost theirs.
  EXPECT_EQ(c.cached_prefix(prompt, 32), 4);
  prefill(c, ref, 0, tokens(8, 90));  // the two freed blocks take new rows
  EXPECT_TRUE(contents_ok(c, ref));
  c.check_invariants();
}

TEST(KvPaged, ShiftWithRoomCopiesKeyedBlocksAndKeepsThePrefix) {
  Cache c(small(64, 4, 2));  // 16 blocks
  Reference ref(2);
  const std::vector<int32_t> prompt = tokens(24, 1);
  prefill(c, ref, 0, prompt);
  c.seq_shift(0, 4, 8, {});
  c.check_invariants();
  auto& s = ref.seqs[0];
  s.erase(s.begin() + 4, s.begin() + 12);
  EXPECT_TRUE(contents_ok(c, ref));
  EXPECT_EQ(c.stats().cow_copies, 3u);  // blocks 1..3 of the shifted rows into fresh ones
  EXPECT_EQ(c.cached_prefix(prompt, 24), 24);  // the old rows are still cached
  EXPECT_EQ(c.reuse_prefix(1, prompt, 24), 24);  // and attach to a new sequence
  c.check_invariants();
}

// ---- misuse ----

TEST(KvPagedDeathTest, SequenceOperationWhilePlacementPendingAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto misuse = [] {
    Cache c(small(64, 4, 2));
    std::vector<int32_t> t{1}, q{0}, s{0};
    Placement pl = c.place(t, q, s);
    c.seq_rm(0, -1, -1);
  };
  EXPECT_DEATH(misuse(), "seq_rm while a placement is pending");
}

// ---- RAM guard ----

TEST(KvRamGuard, CheckRamNamesEveryTerm) {
  const uint64_t MiB = 1024 * 1024;
  RamNeed need{.weights = 600 * MiB, .kv = 3072 * MiB, .compute = 40 * MiB, .margin = 256 * MiB};
  expect_error([&] { check_ram(need, 2048 * MiB, false); }, ErrorKind::OutOfMemory,
               {"weights 600.0 MiB", "KV cache 3072.0 MiB", "compute 40.0 MiB", "margin 256.0 MiB",
                "3968.0 MiB", "2048.0 MiB is available", "-c", "-ctk/-ctv", "--kv-overcommit"});
  EXPECT_NO_THROW(check_ram(need, 2048 * MiB, true));   // overcommit
  EXPECT_NO_THROW(check_ram(need, 0, false));           // unknown
  EXPECT_NO_THROW(check_ram(need, 3968 * MiB, false));  // exactly fits
  EXPECT_GT(available_memory_bytes(), 0u);
}

TEST(KvRamGuard, AvailableIsTheLowerOfMemAvailableAndTheCgroupHeadroom) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("kv_ram_" + std::to_string(getpid()));
  fs::remove_all(root);
  auto put = [&](const fs::path& f, const std::string& text) {
    fs::create_directories(f.parent_path());
    std::ofstream(f) << text;
  };
  const uint64_t MiB = 1024 * 1024;
  put(root / "meminfo", "MemTotal: 8000000 kB\nMemAvailable: 4194304 kB\n");  // 4096 MiB
  put(root / "cgroup_none", "0::/\n");
  EXPECT_EQ(available_memory_bytes((root / "meminfo").string(), (root / "cgroup_none").string(),
                                   (root / "sys").string()),
            4096 * MiB);
  // v2: a limit on an ancestor (1 GiB, 256 MiB in use) and "max" on the leaf.
  put(root / "cgroup_v2", "0::/a/b\n");
  put(root / "sys/a/b/memory.max", "max\n");
  put(root / "sys/a/b/memory.current", "1000\n");
  put(root / "sys/a/memory.max", std::to_string(1024 * MiB) + "\n");
  put(root / "sys/a/memory.current", std::to_string(256 * MiB) + "\n");
  EXPECT_EQ(available_memory_bytes((root / "meminfo").string(), (root / "cgroup_v2").string(),
                                   (root / "sys").string()),
            768 * MiB);
  // v1 memory controller, and usage above the limit -> 0 room.
  put(root / "cgroup_v1", "4:cpu,memory:/x\n1:cpu:/\n");
  put(root / "sys/memory/x/memory.limit_in_bytes", std::to_string(512 * MiB));
  put(root / "sys/memory/x/memory.usage_in_bytes", std::to_string(500 * MiB));
  EXPECT_EQ(available_memory_bytes((root / "meminfo").string(), (root / "cgroup_v1").string(),
                                   (root / "sys").string()),
            12 * MiB);
  put(root / "sys/memory/memory.limit_in_bytes", "9223372036854771712");  // v1's "none"
  EXPECT_EQ(available_memory_bytes((root / "meminfo").string(), (root / "cgroup_v1").string(),
                                   (root / "sys").string()),
            12 * MiB);
  EXPECT_EQ(available_memory_bytes((root / "nothing").string(), (root / "nothing").string(),
                                   (root / "nothing").string()),
            0u);
  fs::remove_all(root);
}

}  // namespace
}  // namespace minfer::kv
