// minfer-test-libs: minfer_kv
// kv::Cache, the paged KV cache: block tables and slots, atomic place/apply/rollback, fork with
// copy-on-write, the prefix cache (reuse, LRU eviction, no false hits), lazy commit checked
// against /proc/self/smaps, a long random churn with check_invariants() after every step,
// seq_shift with a recording re-rotation, and the RAM guard.
//
// Rows are written as a real model would: the bytes of position p's K and V rows are a
// function of the token prefix [0, p] (a rolling hash `uid`), so a wrong table, a bad copy or
// a false prefix hit shows up as wrong bytes. A Reference keeps, per sequence, the uid of
// every position and the XOR a fake re-rotation applied to its K rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "kv/cache.h"

namespace minfer::kv {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The bytes of one row: uid, layer and K/V decide them.
void fill_row(uint8_t* row, size_t n, uint64_t uid, int32_t layer, int kind, uint8_t x) {
  uint64_t h = mix(uid * 8 + static_cast<uint64_t>(layer) * 2 + static_cast<uint64_t>(kind));
  for (size_t i = 0; i < n; ++i) {
    if (i % 8 == 0) h = mix(h + i);
    row[i] = static_cast<uint8_t>(h >> (8 * (i % 8))) ^ x;
  }
}

bool row_is(const uint8_t* row, size_t n, uint64_t uid, int32_t layer, int kind, uint8_t x) {
  std::vector<uint8_t> want(n);
  fill_row(want.data(), n, uid, layer, kind, x);
  return std::memcmp(row, want.data(), n) == 0;
}

struct Entry {
  int32_t token = 0;
  uint64_t uid = 0;
  uint8_t kxor = 0;  // what the fake re-rotation XORed into the K row
};

struct Reference {
  std::vector<std::vector<Entry>> seqs;
  explicit Reference(int n) : seqs(static_cast<size_t>(n)) {}
  static uint64_t next_uid(const std::vector<Entry>& s, int32_t token) {
    return mix((s.empty() ? 0x1234 : s.back().uid) ^ (static_cast<uint64_t>(token) + 0x9e37));
  }
};

struct BatchBuilder {
  std::vector<int32_t> token, pos, seq;
  void add(int32_t t, int64_t p, int32_t s) {
    token.push_back(t);
    pos.push_back(static_cast<int32_t>(p));
    seq.push_back(s);
  }
  size_t size() const { return token.size(); }
};

// The forward pass: writes every batch token's rows through the placement's slots. Positions
// below a sequence's length truncate its reference first.
void write_rows(Cache& c, Reference& ref, const BatchBuilder& b, const Placement& pl) {
  for (size_t i = 0; i < b.size(); ++i) {
    auto& s = ref.seqs[static_cast<size_t>(b.seq[i])];
    if (static_cast<size_t>(b.pos[i]) < s.size()) s.resize(static_cast<size_t>(b.pos[i]));
    ASSERT_EQ(s.size(), static_cast<size_t>(b.pos[i]));
    const uint64_t uid = Reference::next_uid(s, b.token[i]);
    s.push_back({b.token[i], uid, 0});
    for (int32_t l = 0; l < c.params().n_layer; ++l) {
      const LayerView v = c.layer(l);
      fill_row(v.k_slot(pl.slots[i]), v.k_row, uid, l, 0, 0);
      fill_row(v.v_slot(pl.slots[i]), v.v_row, uid, l, 1, 0);
    }
  }
}

// place + write + apply; the reference follows.
void decode(Cache& c, Reference& ref, const BatchBuilder& b) {
  Placement pl = c.place(b.token, b.pos, b.seq);
  write_rows(c, ref, b, pl);
  for (size_t k = 0; k < pl.seq_ids.size(); ++k) {
    EXPECT_EQ(pl.seq_lens[k], static_cast<int64_t>(ref.seqs[pl.seq_ids[k]].size()));
  }
  c.apply(pl);
  for (size_t k = 0; k < pl.seq_ids.size(); ++k) {
    const auto t = c.table(pl.seq_ids[k]);
    const auto want = pl.table(pl.seq_ids[k]);
    EXPECT_TRUE(std::equal(t.begin(), t.end(), want.begin(), want.end()));
  }
}

void prefill(Cache& c, Reference& ref, int32_t seq, const std::vector<int32_t>& toks,
             int64_t from = -1) {
  BatchBuilder b;
  const int64_t start = from < 0 ? c.seq_len(seq) : from;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], start + static_cast<int64_t>(i), seq);
  decode(c, ref, b);
}

// Every position of every sequence holds its reference rows.
::testing::AssertionResult contents_ok(const Cache& c, const Reference& ref) {
  for (int32_t s = 0; s < c.params().n_seq_max; ++s) {
    const auto& want = ref.seqs[static_cast<size_t>(s)];
    if (c.seq_len(s) != static_cast<int64_t>(want.size())) {
      return ::testing::AssertionFailure()
             << "seq " << s << " len " << c.seq_len(s) << " want " << want.size();
    }
    for (size_t p = 0; p < want.size(); ++p) {
      const int32_t slot = c.slot(s, static_cast<int64_t>(p));
      for (int32_t l = 0; l < c.params().n_layer; ++l) {
        const LayerView v = c.layer(l);
        if (!row_is(v.k_slot(slot), v.k_row, want[p].uid, l, 0, want[p].kxor) ||
            !row_is(v.v_slot(slot), v.v_row, want[p].uid, l, 1, 0)) {
          return ::testing::AssertionFailure() << "seq " << s << " pos " << p << " layer " << l
                                               << " slot " << slot << " holds the wrong rows\n"
                                               << c.to_string();
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Everything observable, for "the cache is unchanged" checks.
std::string snapshot(const Cache& c) {
  std::ostringstream o;
  o << c.to_string();
  const CacheStats s = c.stats();
  o << s.n_blocks << ' ' << s.blocks_used << ' ' << s.blocks_cached << ' ' << s.blocks_free << ' '
    << s.blocks_committed << ' ' << s.blocks_free_committed << ' ' << s.committed_bytes << ' '
    << s.tokens_held << ' ' << s.prefix_hits << ' ' << s.prefix_lookups << ' ' << s.cow_copies
    << ' ' << s.evictions << '\n';
  for (int32_t q = 0; q < c.params().n_seq_max; ++q) {
    o << q << ':' << c.seq_len(q) << ':';
    for (int32_t b : c.table(q)) o << b << ',';
    o << '\n';
  }
  return o.str();
}

CacheParams small(int64_t n_ctx, int32_t B = 4, int32_t n_seq = 4) {
  CacheParams p;
  p.n_layer = 2;
  p.n_kv_embd = 8;
  p.type_k = GgmlType::F32;
  p.type_v = GgmlType::F32;
  p.n_ctx = n_ctx;
  p.block_size = B;
  p.n_seq_max = n_seq;
  return p;
}

std::vector<int32_t> tokens(size_t n, int32_t base) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = base + static_cast<int32_t>(i);
  return t;
}

template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " not in: " << e.what();
  }
}

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
  EXPECT_EQ(s.blocks_committed, 0);
  EXPECT_EQ(s.committed_bytes, l0.block_stride);  // the null block
  EXPECT_EQ(c.max_blocks_per_seq(), 7);
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
  EXPECT_EQ(c.reuse_prefix(2, q, 16), 16);
  const auto a = c.table(1), b = c.table(2);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 4, b.begin()));
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

// ---- churn ----

// Thousands of steps: requests arrive (some sharing one of a few system prompts, reused through
// the prefix cache), prefill in chunks, decode, fork, regenerate (a batch below the length),
// shift, roll back and leave; check_invariants() after every step, contents every 16 steps.
// Waste is measured as free committed blocks / committed blocks (cached prefix blocks count as
// used cache: they hold reusable rows).
TEST(KvPaged, ChurnKeepsInvariantsAndCommittedTracksUse) {
  CacheParams p = small(16 * 160, 16, 8);  // 160 blocks: 8 long sequences overflow it
  p.n_layer = 1;
  Cache c(p);
  Reference ref(8);
  std::mt19937 rng(12345);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> systems;
  for (int i = 0; i < 4; ++i)
    systems.push_back(tokens(static_cast<size_t>(uni(20, 90)), 1000 * (i + 1)));
  std::vector<std::vector<int32_t>> want(8);  // the tokens each sequence will hold
  std::vector<int64_t> target(8, 0);
  const int steps = 3000;
  double worst_waste = 0;
  int64_t max_used = 0;
  int64_t ooms = 0, rollbacks = 0, forks = 0, shifts = 0;
  auto leave = [&](int32_t s) {
    c.seq_rm(s, -1, -1);
    ref.seqs[static_cast<size_t>(s)].clear();
    want[static_cast<size_t>(s)].clear();
  };
  for (int step = 0; step < steps; ++step) {
    // Arrivals and departures.
    for (int32_t s = 0; s < 8; ++s) {
      auto& w = want[static_cast<size_t>(s)];
      if (c.seq_len(s) == 0 && uni(0, 3) == 0) {
        w = uni(0, 2) > 0 ? systems[static_cast<size_t>(uni(0, 3))] : std::vector<int32_t>{};
        const int extra = uni(1, 300);
        for (int i = 0; i < extra; ++i) w.push_back(uni(0, 50));
        target[static_cast<size_t>(s)] = static_cast<int64_t>(w.size()) + uni(1, 300);
        const int64_t got = c.reuse_prefix(s, w, static_cast<int64_t>(w.size()) - 1);
        for (int64_t i = 0; i < got; ++i) {
          auto& r = ref.seqs[static_cast<size_t>(s)];
          r.push_back({w[i], Reference::next_uid(r, w[i]), 0});
        }
      } else if (c.seq_len(s) > 0 && c.seq_len(s) >= target[static_cast<size_t>(s)]) {
        leave(s);
      }
    }
    if (uni(0, 8) == 0) {  // fork an active sequence into an empty slot
      int32_t src = uni(0, 7), dst = uni(0, 7);
      if (src != dst && c.seq_len(src) > 0 && c.seq_len(dst) == 0) {
        c.seq_cp(src, dst);
        ref.seqs[static_cast<size_t>(dst)] = ref.seqs[static_cast<size_t>(src)];
        want[static_cast<size_t>(dst)] = want[static_cast<size_t>(src)];
        want[static_cast<size_t>(dst)].resize(static_cast<size_t>(c.seq_len(src)));
        target[static_cast<size_t>(dst)] = target[static_cast<size_t>(src)];
        ++forks;
      }
    }
    if (uni(0, 60) == 0) {  // context shift of a long sequence
      const int32_t s = uni(0, 7);
      if (c.seq_len(s) > 40) {
        const int64_t keep = uni(0, 20), drop = uni(1, 20);
        try {
          c.seq_shift(s, keep, drop, [](int32_t, uint8_t* k, int64_t n, int32_t) {
            for (int64_t i = 0; i < n * 32; ++i) k[i] ^= 0x5a;
          });
          auto& r = ref.seqs[static_cast<size_t>(s)];
          r.erase(r.begin() + keep, r.begin() + keep + drop);
          for (size_t i = static_cast<size_t>(keep); i < r.size(); ++i) r[i].kxor ^= 0x5a;
          auto& w = want[static_cast<size_t>(s)];
          w.assign(static_cast<size_t>(c.seq_len(s)), 0);  // tokens from here on are decode's
          ++shifts;
        } catch (const Error& e) {
          ASSERT_EQ(e.kind(), ErrorKind::OutOfMemory);
        }
      }
    }
    // One batch: prefill chunks of up to 48 tokens, decode tokens, sometimes a regeneration.
    BatchBuilder b;
    for (int32_t s = 0; s < 8; ++s) {
      const int64_t len = c.seq_len(s);
      if (len == 0 && want[static_cast<size_t>(s)].empty()) continue;
      int64_t from = len;
      if (len > 8 && uni(0, 40) == 0) from = len - uni(1, 8);  // regenerate the last tokens
      auto& w = want[static_cast<size_t>(s)];
      const int64_t n = from < static_cast<int64_t>(w.size())
                            ? std::min<int64_t>(48, static_cast<int64_t>(w.size()) - from)
                            : 1;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = from + i;
        const int32_t t =
            pos < static_cast<int64_t>(w.size()) ? w[static_cast<size_t>(pos)] : uni(0, 50);
        b.add(t, pos, s);
      }
    }
    if (b.size() == 0) continue;
    const std::string before = snapshot(c);
    Placement pl;
    try {
      pl = c.place(b.token, b.pos, b.seq);
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
      if (!before.empty()) {
        EXPECT_EQ(snapshot(c), before);
      }
      ++ooms;
      int32_t big = 0;  // preempt the longest sequence
      for (int32_t s = 1; s < 8; ++s) big = c.seq_len(s) > c.seq_len(big) ? s : big;
      leave(big);
      c.check_invariants();
      continue;
    }
    c.check_invariants();
    Reference saved = ref;
    write_rows(c, ref, b, pl);
    if (uni(0, 25) == 0) {
      c.rollback(pl);
      ref = saved;
      ++rollbacks;
    } else {
      c.apply(pl);
      for (size_t i = 0; i < b.size(); ++i) {  // decode tokens extend the wanted tokens
        auto& w = want[static_cast<size_t>(b.seq[i])];
        if (static_cast<size_t>(b.pos[i]) >= w.size()) w.push_back(b.token[i]);
      }
    }
    c.check_invariants();
    if (step % 16 == 0) {
      ASSERT_TRUE(contents_ok(c, ref)) << "step " << step;
    }
    const CacheStats s = c.stats();
    max_used = std::max(max_used, s.blocks_used);
    if (step >= 300 && s.blocks_committed > 0) {
      worst_waste = std::max(worst_waste, static_cast<double>(s.blocks_free_committed) /
                                              static_cast<double>(s.blocks_committed));
    }
  }
  const CacheStats s = c.stats();
  RecordProperty("worst_waste_percent", std::to_string(worst_waste * 100));
  std::printf(
      "churn: max used %ld, worst free-committed/committed %.2f%%, ooms %ld, rollbacks %ld, "
      "forks %ld, shifts %ld, prefix hits %lu/%lu, cow %lu, evictions %lu\n",
      static_cast<long>(max_used), worst_waste * 100, static_cast<long>(ooms),
      static_cast<long>(rollbacks), static_cast<long>(forks), static_cast<long>(shifts),
      static_cast<unsigned long>(s.prefix_hits), static_cast<unsigned long>(s.prefix_lookups),
      static_cast<unsigned long>(s.cow_copies), static_cast<unsigned long>(s.evictions));
  EXPECT_LE(worst_waste, 0.04);
  EXPECT_GT(s.prefix_hits, 0u);
  EXPECT_GT(forks, 0);
  EXPECT_GT(ooms, 0);
  EXPECT_GT(rollbacks, 0);
  EXPECT_GT(shifts, 0);
  EXPECT_GT(s.cow_copies, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_TRUE(contents_ok(c, ref));
  c.clear();
  c.check_invariants();
  const CacheStats e = c.stats();
  EXPECT_EQ(e.blocks_used, 0);
  EXPECT_EQ(e.blocks_cached, 0);
  EXPECT_EQ(e.blocks_free, e.n_blocks) << "a block leaked";
  EXPECT_LE(e.blocks_committed, p.commit_slack);
  EXPECT_EQ(e.tokens_held, 0);
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
