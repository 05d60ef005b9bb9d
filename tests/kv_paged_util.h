// Helpers of the kv::Cache tests (kv_paged_test.cpp, kv_paged_churn_test.cpp).
//
// Rows are written as a real model would: the bytes of position p's K and V rows are a
// function of the token prefix [0, p] (a rolling hash `uid`), so a wrong table, a bad copy or
// a false prefix hit shows up as wrong bytes. A Reference keeps, per sequence, the uid of
// every position and the XOR a fake re-rotation applied to its K rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "kv/cache.h"

namespace minfer::kv::test {

inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The bytes of one row: uid, layer and K/V decide them.
inline void fill_row(uint8_t* row, size_t n, uint64_t uid, int32_t layer, int kind, uint8_t x) {
  uint64_t h = mix(uid * 8 + static_cast<uint64_t>(layer) * 2 + static_cast<uint64_t>(kind));
  for (size_t i = 0; i < n; ++i) {
    if (i % 8 == 0) h = mix(h + i);
    row[i] = static_cast<uint8_t>(h >> (8 * (i % 8))) ^ x;
  }
}

inline bool row_is(const uint8_t* row, size_t n, uint64_t uid, int32_t layer, int kind, uint8_t x) {
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
inline void write_rows(Cache& c, Reference& ref, const BatchBuilder& b, const Placement& pl) {
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
inline void decode(Cache& c, Reference& ref, const BatchBuilder& b) {
  Placement pl = c.place(b.token, b.pos, b.seq);
  write_rows(c, ref, b, pl);
  for (size_t k = 0; k < pl.seq_ids.size(); ++k) {
    EXPECT_EQ(pl.seq_lens[k], static_cast<int64_t>(ref.seqs[pl.seq_ids[k]].size()));
  }
  const uint64_t dedup = c.stats().dedup_blocks;
  c.apply(pl);
  if (c.stats().dedup_blocks != dedup) return;  // apply() swapped blocks for cached ones
  for (size_t k = 0; k < pl.seq_ids.size(); ++k) {
    const auto t = c.table(pl.seq_ids[k]);
    const auto want = pl.table(pl.seq_ids[k]);
    EXPECT_TRUE(std::equal(t.begin(), t.end(), want.begin(), want.end()));
  }
}

inline void prefill(Cache& c, Reference& ref, int32_t seq, const std::vector<int32_t>& toks,
                    int64_t from = -1) {
  BatchBuilder b;
  const int64_t start = from < 0 ? c.seq_len(seq) : from;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], start + static_cast<int64_t>(i), seq);
  decode(c, ref, b);
}

// Every position of every sequence holds its reference rows.
inline ::testing::AssertionResult contents_ok(const Cache& c, const Reference& ref) {
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
inline std::string snapshot(const Cache& c) {
  std::ostringstream o;
  o << c.to_string();
  const CacheStats s = c.stats();
  o << s.n_blocks << ' ' << s.blocks_used << ' ' << s.blocks_cached << ' ' << s.blocks_free << ' '
    << s.blocks_committed << ' ' << s.blocks_free_committed << ' ' << s.committed_bytes << ' '
    << s.tokens_held << ' ' << s.prefix_hits << ' ' << s.prefix_lookups << ' ' << s.cow_copies
    << ' ' << s.evictions << ' ' << s.dedup_blocks << '\n';
  for (int32_t q = 0; q < c.params().n_seq_max; ++q) {
    o << q << ':' << c.seq_len(q) << ':';
    for (int32_t b : c.table(q)) o << b << ',';
    o << '\n';
  }
  return o.str();
}

inline CacheParams small(int64_t n_ctx, int32_t B = 4, int32_t n_seq = 4) {
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

inline std::vector<int32_t> tokens(size_t n, int32_t base) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = base + static_cast<int32_t>(i);
  return t;
}

template <typename F>
inline void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " not in: " << e.what();
  }
}

}  // namespace minfer::kv::test
