// minfer-test-libs: minfer_model minfer_tokenizer minfer_heap_counter
// Multi-sequence decode over the paged KV cache (Session::decode, SeqEngine): every sequence of
// a batch gets the logits it would get alone, the goldens hold under batching, forks and
// prefix reuse are exact, steady decode with sequences joining and leaving builds no graph and
// allocates nothing, and bad batches leave the cache unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "heap_counter/heap_counter.h"
#include "model/model.h"
#include "model/session.h"
#include "numeric_test_util.h"
#include "tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;
using test::max_abs_diff;
using testing::load_tiny_model;
using testing::TinySpec;

const fs::path kShared = MINFER_SHARED_DIR;
const fs::path kStories = kShared / "models" / "stories260K.gguf";

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

SessionParams params(int64_t n_ctx, int32_t n_seq, GgmlType kv = GgmlType::F32) {
  SessionParams p;
  p.n_ctx = n_ctx;
  p.n_seq_max = n_seq;
  p.n_threads = 2;
  p.type_k = p.type_v = kv;
  return p;
}

TinySpec spec_for(GgmlType kv) {
  TinySpec s;
  s.n_ctx_train = 1024;
  if (kv == GgmlType::Q8_0) {  // q8_0 needs head_dim a multiple of 32
    s.n_embd = 64;
    s.n_head = 2;
    s.n_head_kv = 1;
  }
  s.weight_std = 0.15f;
  return s;
}

// Logits of every position of `toks` when the sequence runs alone (prefill in one call).
std::vector<std::vector<float>> alone(Model& m, GgmlType kv, const std::vector<int32_t>& toks) {
  Session s(m, params(256, 1, kv));
  std::vector<int32_t> rows(toks.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(i);
  const auto lg = s.eval(toks, 0, rows);
  const auto V = static_cast<size_t>(s.n_vocab());
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < toks.size(); ++i)
    out.emplace_back(lg.begin() + i * V, lg.begin() + (i + 1) * V);
  return out;
}

class BatchKv : public ::testing::TestWithParam<GgmlType> {};

// Four sequences of different lengths: prefill chunks of two of them share a batch with the
// decode steps of the others; each token's logits must equal the sequence run alone.
void expect_four_sequences_match_alone(const TinySpec& spec, GgmlType kv) {
  auto l = load_tiny_model(spec);
  Model& m = *l->model;
  const int64_t V = m.hparams().n_vocab;
  std::vector<std::vector<int32_t>> seqs;
  for (uint32_t s = 0; s < 4; ++s) seqs.push_back(random_tokens(20 + 9 * s, V, 10 + s));
  std::vector<std::vector<std::vector<float>>> ref;
  for (const auto& t : seqs) ref.push_back(alone(m, kv, t));

  Session sess(m, params(512, 4, kv));
  std::vector<size_t> done(4, 0);
  double worst = 0;
  for (int step = 0; step < 100; ++step) {
    Batch b;
    std::vector<std::pair<size_t, size_t>> who;  // (seq, position) per logits row
    for (size_t s = 0; s < 4; ++s) {
      // Sequence s feeds 1 + (step + s) % 3 tokens this step (prefill and decode mixed).
      const size_t n = std::min(seqs[s].size() - done[s], 1 + (step + s) % 3);
      for (size_t i = 0; i < n; ++i) {
        const size_t p = done[s] + i;
        b.add(seqs[s][p], static_cast<int32_t>(p), static_cast<int32_t>(s), true);
        who.emplace_back(s, p);
      }
      done[s] += n;
    }
    if (b.size() == 0) break;
    const auto lg = sess.decode(b);
    ASSERT_EQ(lg.size(), who.size() * static_cast<size_t>(V));
    for (size_t r = 0; r < who.size(); ++r) {
      const auto [s, p] = who[r];
      const std::span<const float> row = lg.subspan(r * V, V);
      worst = std::max(worst, max_abs_diff(row, ref[s][p]));
      ASSERT_EQ(argmax(row), argmax(ref[s][p])) << "seq " << s << " pos " << p;
    }
  }
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(sess.seq_len(static_cast<int32_t>(s)), seqs[s].size());
  // f16 / q8_0 rows round differently when written in another batch shape? No: the same rows
  // are written; only the summation order of the batched matmul may differ.
  EXPECT_LT(worst, 2e-3f) << spec.arch << " " << type_name(kv);
  sess.kv_cache().check_invariants();
}

TEST_P(BatchKv, FourSequencesMatchRunningAlone) {
  expect_four_sequences_match_alone(spec_for(GetParam()), GetParam());
}

// Gemma through the paged cache: windows of 5 positions (crossed by every sequence), the
// soft-capped scores of gemma2, gemma3's local rope base, in mixed prefill / decode batches.
TEST_P(BatchKv, GemmaSequencesMatchRunningAlone) {
  for (const char* arch : {"gemma2", "gemma3"}) {
    TinySpec spec = spec_for(GetParam());
    spec.arch = arch;
    expect_four_sequences_match_alone(spec, GetParam());
  }
}

// Fork: a sequence forked after its prompt continues exactly like the original.
TEST_P(BatchKv, ForkContinuesLikeTheOriginal) {
  auto l = load_tiny_model(spec_for(GetParam()));
  Model& m = *l->model;
  const int64_t V = m.hparams().n_vocab;
  const auto toks = random_tokens(70, V, 3);
  const auto ref = alone(m, GetParam(), toks);
  Session sess(m, params(512, 3, GetParam()));
  sess.eval(std::span<const int32_t>(toks.data(), 37), 0, {});
  sess.seq_cp(0, 1);
  sess.seq_cp(0, 2);
  double worst = 0;
  for (size_t p = 37; p < toks.size(); ++p) {
    Batch b;
    for (int32_t s = 0; s < 3; ++s) b.add(toks[p], static_cast<int32_t>(p), s, true);
    const auto lg = sess.decode(b);
    for (size_t s = 0; s < 3; ++s) worst = std::max(worst, max_abs_diff(lg.subspan(s * V, V), ref[p]));
  }
  EXPECT_LT(worst, 2e-3f);
  EXPECT_LE(sess.kv_cache().stats().cow_copies, 2u);  // the partial block, once per fork
  sess.kv_cache().check_invariants();
}

// Prefix reuse: a second sequence with the same 48-token start reuses 3 blocks of 16 and
// decodes the rest to the same logits.
TEST_P(BatchKv, PrefixReuseGivesTheSameLogits) {
  auto l = load_tiny_model(spec_for(GetParam()));
  Model& m = *l->model;
  const int64_t V = m.hparams().n_vocab;
  auto toks = random_tokens(60, V, 5);
  const auto ref = alone(m, GetParam(), toks);
  Session sess(m, params(512, 2, GetParam()));
  sess.eval(toks, 0, {});
  sess.seq_rm(0, 0, -1);  // the owner leaves; its full blocks stay cached
  const int64_t reused = sess.reuse_prefix(1, toks, static_cast<int64_t>(toks.size()) - 1);
  EXPECT_EQ(reused, 48);
  Batch b;
  for (size_t p = static_cast<size_t>(reused); p < toks.size(); ++p)
    b.add(toks[p], static_cast<int32_t>(p), 1, true);
  const auto lg = sess.decode(b);
  double worst = 0;
  for (size_t r = 0; r < b.size(); ++r)
    worst = std::max(worst, max_abs_diff(lg.subspan(r * V, V), ref[static_cast<size_t>(reused) + r]));
  EXPECT_LT(worst, 2e-3f);
  EXPECT_GE(sess.kv_report().prefix_hits, 3u);
}

// Context shift: dropping [n_keep, n_keep + n_discard) and re-rotating the moved K rows gives
// the logits of a sequence that only ever held the kept tokens at their new positions. One
// layer: deeper layers' rows also remember the dropped tokens (that is what a shift keeps), so
// only a single-layer model's cache equals the shortened sequence's.
TEST_P(BatchKv, ContextShiftMatchesTheShortenedSequence) {
  TinySpec spec = spec_for(GetParam());
  spec.n_layer = 1;
  // Normal and NeoX rope; gemma3's one layer is a windowed one with its own rope base (10000,
  // not the global 1e6), which the re-rotation must use.
  for (const char* arch : {"llama", "qwen2", "gemma3"}) {
    spec.arch = arch;
    auto l = load_tiny_model(spec);
    Model& m = *l->model;
    const int64_t V = m.hparams().n_vocab;
    const auto toks = random_tokens(90, V, 9);
    const int64_t n_keep = 5, n_discard = 37;
    std::vector<int32_t> shortened(toks.begin(), toks.begin() + n_keep);
    shortened.insert(shortened.end(), toks.begin() + n_keep + n_discard, toks.end());
    const auto ref = alone(m, GetParam(), shortened);
    Session sess(m, params(512, 1, GetParam()));
    const int64_t held = 70;
    sess.eval(std::span<const int32_t>(toks.data(), held), 0, {});
    sess.seq_shift(0, n_keep, n_discard);
    ASSERT_EQ(sess.seq_len(0), held - n_discard);
    double worst = 0;
    for (int64_t p = held; p < static_cast<int64_t>(toks.size()); ++p) {
      const int64_t np = p - n_discard;
      const auto lg = sess.eval_last(std::span<const int32_t>(&toks[p], 1), np);
      worst = std::max(worst, max_abs_diff(lg, ref[static_cast<size_t>(np)]));
    }
    // f32 K: rotation by -n_discard is exact up to float rounding; f16 / q8_0 round the
    // re-rotated rows once more (q8_0: a second quantization, ~amax/254 per value, the bound
    // of the q8_0-vs-f16 model tests).
    const double bound = GetParam() == GgmlType::F32 ? 1e-3 : GetParam() == GgmlType::F16 ? 2e-2 : 8e-2;
    EXPECT_LT(worst, bound) << arch;
    sess.kv_cache().check_invariants();
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BatchKv,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0),
                         [](const auto& info) { return std::string(type_name(info.param)); });

struct Snapshot {
  std::vector<int64_t> lens;
  std::vector<std::vector<int32_t>> tables;
  int64_t used = 0, free = 0;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(const Session& s) {
  Snapshot r;
  for (int32_t q = 0; q < s.n_seq_max(); ++q) {
    r.lens.push_back(s.seq_len(q));
    auto t = s.kv_cache().table(q);
    r.tables.emplace_back(t.begin(), t.end());
  }
  const auto st = s.kv_cache().stats();
  r.used = st.blocks_used;
  r.free = st.blocks_free;
  return r;
}

// Bad batches: an error naming the problem, and the cache exactly as before.
TEST(BatchDecode, BadBatchesLeaveTheCacheUnchanged) {
  auto l = load_tiny_model(spec_for(GgmlType::F16));
  Session sess(*l->model, params(64, 2, GgmlType::F16));
  const auto toks = random_tokens(20, 64, 1);
  sess.eval(toks, 0, {});
  const Snapshot before = snapshot(sess);
  auto expect_error = [&](const Batch& b, ErrorKind kind, const char* what) {
    try {
      sess.decode(b);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << what << ": " << e.what();
    }
    EXPECT_TRUE(snapshot(sess) == before) << what << " changed the cache";
    sess.kv_cache().check_invariants();
  };
  Batch b;
  b.add(1, 20, 7, true);  // seq id past n_seq_max
  expect_error(b, ErrorKind::InvalidArgument, "seq id past the maximum");
  b.clear();
  b.add(1, 22, 0, true);  // skips position 20, 21
  expect_error(b, ErrorKind::InvalidArgument, "skipped position");
  b.clear();
  b.add(1, 20, 0, true);
  b.add(99, 21, 0, true);  // token outside the vocabulary
  expect_error(b, ErrorKind::InvalidArgument, "token outside the vocabulary");
  b.clear();
  for (int32_t p = 0; p < 60; ++p) b.add(1, p, 1, false);  // 60 more tokens: 20 + 60 > 64
  expect_error(b, ErrorKind::OutOfMemory, "more tokens than free blocks");
}

// Steady decode with sequences joining and leaving: after warm-up, no graph builds and no heap
// allocations (the bucketed shapes absorb the changing batch size).
TEST(BatchDecode, JoinAndLeaveWithoutBuildsOrAllocations) {
  auto l = load_tiny_model(spec_for(GgmlType::F16));
  const int32_t n_seq = 6;
  Session sess(*l->model, params(1024, n_seq, GgmlType::F16));
  std::vector<int32_t> next(n_seq, 1);
  Batch b;
  b.token.reserve(64);
  b.pos.reserve(64);
  b.seq.reserve(64);
  b.logits.reserve(64);
  auto step = [&](int i) {
    b.clear();
    // Sequence s is active on steps where (i / (s + 2)) is even: they join and leave.
    for (int32_t s = 0; s < n_seq; ++s) {
      if ((i / (s + 2)) % 2 != 0) continue;
      const int64_t len = sess.seq_len(s);
      if (len >= 140) sess.seq_rm(s, 0, -1);  // leave: start over
      b.add(next[static_cast<size_t>(s)], static_cast<int32_t>(sess.seq_len(s)), s, true);
    }
    if (b.size() == 0) return;
    const auto lg = sess.decode(b);
    for (size_t r = 0; r < b.size(); ++r)
      next[static_cast<size_t>(b.seq[r])] = argmax(lg.subspan(r * 64, 64));
  };
  for (int i = 0; i < 60; ++i) step(i);  // warm-up: every bucket seen
  const uint64_t builds = sess.n_graph_builds();
  const uint64_t before = heap_allocations();
  for (int i = 60; i < 160; ++i) step(i);
  const uint64_t news = heap_allocations() - before;
  EXPECT_EQ(sess.n_graph_builds(), builds);
  if (!kHeapCounting) GTEST_SKIP() << "allocation counting needs our operator new";
  EXPECT_EQ(news, 0u) << "heap allocations in 100 decode steps";
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The three stories260K goldens decoded together, greedily, in one engine: each must match
// llama.cpp's text as when run alone.
TEST(BatchDecode, StoriesGoldensTogether) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "needs " << kStories;
  auto model = Model::load(kStories.string());
  auto tk = tok::Tokenizer::from_gguf(model->file());
  SessionParams p = params(3 * 2048, 3, GgmlType::F32);
  p.n_ctx_seq = 2048;
  Session sess(*model, p);
  const fs::path dir = kShared / "golden" / "stories260K";
  std::vector<std::string> expected, got(3);
  std::vector<int32_t> next(3);
  Batch b;
  for (int32_t c = 0; c < 3; ++c) {
    const std::string stem = "case" + std::to_string(c + 1);
    std::string e = read_file(dir / (stem + ".expected"));
    while (!e.empty() && e.back() == '\n') e.pop_back();
    expected.push_back(e);
    const auto ids = tk.tokenize(read_file(dir / (stem + ".prompt")));
    for (size_t i = 0; i < ids.size(); ++i)
      b.add(ids[i], static_cast<int32_t>(i), c, i + 1 == ids.size());
  }
  for (int step = 0; step < 96; ++step) {
    const auto lg = sess.decode(b);
    const auto V = static_cast<size_t>(sess.n_vocab());
    std::vector<int32_t> seqs;
    for (size_t i = 0; i < b.size(); ++i)
      if (b.logits[i]) seqs.push_back(b.seq[i]);
    b.clear();
    for (size_t r = 0; r < seqs.size(); ++r) {
      const int32_t t = argmax(lg.subspan(r * V, V));
      got[static_cast<size_t>(seqs[r])] += tk.token_to_piece(t);
      b.add(t, static_cast<int32_t>(sess.seq_len(seqs[r])), seqs[r], true);
    }
  }
  for (size_t c = 0; c < 3; ++c)
    EXPECT_EQ(got[c].substr(0, expected[c].size()), expected[c]) << "case " << c + 1;
}

}  // namespace
}  // namespace minfer
