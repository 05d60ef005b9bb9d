// minfer-test-libs: minfer_spec minfer_gen
// Speculative decoding (src/spec, `minfer run -md`): the accept loop over fake rows, the
// Speculator over fake engines (what each cache holds), KV rollback on the real graph Session,
// and the CLI: output identical to plain decoding, greedy and seeded, whatever the draft.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "common/error.h"
#include "gen/gen.h"
#include "gen_file_util.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/session.h"
#include "sample/sampler.h"
#include "spec/speculator.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kVocab = 8;

// n one-hot rows: row i peaks at tokens[i].
std::vector<float> one_hot_rows(const std::vector<int32_t>& tokens) {
  std::vector<float> rows(tokens.size() * kVocab, 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i) rows[i * kVocab + static_cast<size_t>(tokens[i])] = 5;
  return rows;
}

// Greedy; token 7 is end-of-generation (not emitted); stops after `limit` tokens.
struct GreedySink : spec::TokenSink {
  int64_t limit = 1 << 30;
  std::vector<int32_t> out;
  int n_samples = 0;
  int32_t sample(std::span<const float> row) override {
    ++n_samples;
    return argmax(row);
  }
  bool emit(int32_t t) override {
    if (t == 7) return false;
    out.push_back(t);
    return static_cast<int64_t>(out.size()) < limit;
  }
};

TEST(AcceptDraft, AllRightTakesTheBonusRow) {
  GreedySink s;
  const auto rows = one_hot_rows({1, 2, 3, 4});
  const std::vector<int32_t> draft = {1, 2, 3};
  const spec::AcceptOutcome a = spec::accept_draft(rows, kVocab, draft, s);
  EXPECT_EQ(a.n_accepted, 3);
  EXPECT_EQ(a.n_kept, 3);
  EXPECT_EQ(a.n_emitted, 4);
  EXPECT_EQ(a.last, 4);
  EXPECT_FALSE(a.ended);
  EXPECT_EQ(s.out, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(s.n_samples, 4);  // one sample per emitted token
}

TEST(AcceptDraft, FirstWrongEmitsTheTargetsToken) {
  GreedySink s;
  const auto rows = one_hot_rows({5, 2, 3});
  const std::vector<int32_t> draft = {1, 2};
  const spec::AcceptOutcome a = spec::accept_draft(rows, kVocab, draft, s);
  EXPECT_EQ(a.n_accepted, 0);
  EXPECT_EQ(a.n_kept, 0);
  EXPECT_EQ(a.last, 5);
  EXPECT_EQ(s.out, (std::vector<int32_t>{5}));
  EXPECT_EQ(s.n_samples, 1);
}

TEST(AcceptDraft, EndOfGenerationInTheMiddleEnds) {
  GreedySink s;
  const auto rows = one_hot_rows({1, 7, 3, 4});
  const std::vector<int32_t> draft = {1, 7, 3};  // the draft even agrees on the EOS
  const spec::AcceptOutcome a = spec::accept_draft(rows, kVocab, draft, s);
  EXPECT_TRUE(a.ended);
  EXPECT_EQ(s.out, (std::vector<int32_t>{1}));
  EXPECT_EQ(s.n_samples, 2);
}

TEST(AcceptDraft, LimitInTheMiddleEnds) {
  GreedySink s;
  s.limit = 2;
  const auto rows = one_hot_rows({1, 2, 3, 4});
  const std::vector<int32_t> draft = {1, 2, 3};
  const spec::AcceptOutcome a = spec::accept_draft(rows, kVocab, draft, s);
  EXPECT_TRUE(a.ended);
  EXPECT_EQ(s.out, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(s.n_samples, 2);
}

TEST(AcceptDraft, NoDraftIsAPlainStep) {
  GreedySink s;
  const auto rows = one_hot_rows({6});
  const spec::AcceptOutcome a = spec::accept_draft(rows, kVocab, {}, s);
  EXPECT_EQ(a.n_emitted, 1);
  EXPECT_EQ(a.last, 6);
}

// A deterministic "model": the next token is f(previous token, position). It keeps what its
// cache holds per position, and checks the Engine contract (no position skipped).
class FakeEngine final : public Engine {
 public:
  FakeEngine(int64_t n_ctx, std::function<int32_t(int32_t, int64_t)> next, float peak = 10)
      : n_ctx_(n_ctx), next_(std::move(next)), peak_(peak) {}
  std::span<const float> eval(std::span<const int32_t> tokens, int64_t start_pos,
                              std::span<const int32_t> out_rows) override {
    EXPECT_LE(start_pos, static_cast<int64_t>(held.size()));
    EXPECT_LE(start_pos + static_cast<int64_t>(tokens.size()), n_ctx_);
    held.resize(static_cast<size_t>(start_pos));
    held.insert(held.end(), tokens.begin(), tokens.end());
    ++n_evals;
    out_.assign(out_rows.size() * kVocab, 0.0f);
    for (size_t r = 0; r < out_rows.size(); ++r) {
      const auto i = static_cast<size_t>(out_rows[r]);
      out_[r * kVocab + static_cast<size_t>(next_(tokens[i], start_pos + int64_t(i)))] = peak_;
    }
    return out_;
  }
  int64_t n_ctx() const override { return n_ctx_; }
  int64_t n_vocab() const override { return kVocab; }
  MemReport mem_report() const override { return {}; }
  std::string name() const override { return "fake"; }

  std::vector<int32_t> held;
  int n_evals = 0;

 private:
  int64_t n_ctx_;
  std::function<int32_t(int32_t, int64_t)> next_;
  float peak_;
  std::vector<float> out_;
};

int32_t cycle(int32_t t, int64_t) {
  return (t + 1) % 7;
}  // never 7 (the sink's EOS)

// The prompt's prefill: the target holds ctx before the first step.
void prefill(Engine& target, const std::vector<int32_t>& ctx) {
  const int32_t last_row = static_cast<int32_t>(ctx.size()) - 1;
  target.eval(ctx, 0, std::span<const int32_t>(&last_row, 1));
}

// Runs the speculative loop until `n` tokens are emitted; returns them.
std::vector<int32_t> run_spec(spec::Speculator& sp, std::vector<int32_t>& ctx, int32_t first,
                              int64_t n) {
  GreedySink s;
  s.limit = n;
  s.out.push_back(first);
  int32_t last = first;
  while (static_cast<int64_t>(s.out.size()) < n) {
    const auto st = sp.step(ctx, last, n - static_cast<int64_t>(s.out.size()), s);
    if (st.ended) break;
    last = st.last;
  }
  return s.out;
}

TEST(Speculator, PerfectDraftIsAcceptedAndCachesHoldTheText) {
  FakeEngine target(64, cycle), draft(64, cycle);
  spec::SpecParams p;
  p.n_max = 4;
  spec::Speculator sp(target, draft, p);
  std::vector<int32_t> ctx = {0, 1};
  prefill(target, ctx);
  const auto out = run_spec(sp, ctx, 2, 12);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(sp.stats().n_accepted, sp.stats().n_drafted);
  EXPECT_GT(sp.stats().n_drafted, 0);
  // 11 tokens after the first in steps of at most 5 (4 proposals + the bonus), the last
  // step bounded by the limit: 3 target passes.
  EXPECT_EQ(sp.stats().n_steps, 3);
  // The target's cache holds ctx (the pending token is never evaluated).
  EXPECT_EQ(std::vector<int32_t>(target.held.begin(), target.held.begin() + long(ctx.size())), ctx);
}

TEST(Speculator, WrongDraftStillEmitsTheTargetsText) {
  FakeEngine target(64, cycle);
  // Right except after token 4, where it proposes 0.
  FakeEngine draft(64, [](int32_t t, int64_t) { return t == 4 ? 0 : (t + 1) % 7; });
  spec::SpecParams p;
  p.n_max = 3;
  spec::Speculator sp(target, draft, p);
  std::vector<int32_t> ctx = {0};
  prefill(target, ctx);
  const auto out = run_spec(sp, ctx, 1, 15);
  std::vector<int32_t> want;
  for (int i = 0; i < 15; ++i) want.push_back((1 + i) % 7);
  EXPECT_EQ(out, want);
  EXPECT_LT(sp.stats().n_accepted, sp.stats().n_drafted);
  EXPECT_EQ(std::vector<int32_t>(target.held.begin(), target.held.begin() + long(ctx.size())), ctx);
  // The draft caught up: it holds ctx as far as it evaluated.
  const size_t n = std::min(ctx.size(), draft.held.size());
  EXPECT_EQ(std::vector<int32_t>(draft.held.begin(), draft.held.begin() + long(n)),
            std::vector<int32_t>(ctx.begin(), ctx.begin() + long(n)));
}

TEST(Speculator, LowConfidenceAndDraftMinSkipDrafting) {
  FakeEngine target(64, cycle);
  FakeEngine draft(64, cycle, /*peak=*/0.5f);  // top p = e^.5 / (e^.5 + 7) ~ 0.19
  spec::SpecParams p;
  spec::Speculator sp(target, draft, p);  // p_min 0.75
  std::vector<int32_t> ctx = {0};
  prefill(target, ctx);
  run_spec(sp, ctx, 1, 6);
  EXPECT_EQ(sp.stats().n_drafted, 0);
  EXPECT_EQ(sp.stats().n_steps, 5);

  FakeEngine confident(64, cycle);
  p.n_max = 2;
  p.n_min = 3;  // n_max < n_min: never drafts
  spec::Speculator sp2(target, confident, p);
  std::vector<int32_t> ctx2 = {0};
  prefill(target, ctx2);
  run_spec(sp2, ctx2, 1, 6);
  EXPECT_EQ(sp2.stats().n_drafted, 0);
  EXPECT_EQ(confident.n_evals, 0);
}

TEST(Speculator, NeverEvaluatesPastTheContext) {
  FakeEngine target(10, cycle), draft(10, cycle);  // FakeEngine checks the bound
  spec::SpecParams p;
  spec::Speculator sp(target, draft, p);
  std::vector<int32_t> ctx = {0, 1, 2, 3, 4, 5};
  prefill(target, ctx);
  GreedySink s;
  int32_t last = 6;
  while (static_cast<int64_t>(ctx.size()) < target.n_ctx()) {
    const auto st = sp.step(ctx, last, 100, s);
    ASSERT_FALSE(st.ended);
    last = st.last;
  }
  EXPECT_EQ(ctx.size(), 10u);
}

TEST(SpecParams, BadValuesAreRefused) {
  spec::SpecParams p;
  p.n_max = -1;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.p_min = 1.5f;
  EXPECT_THROW(p.validate(), Error);
}

// ---- the real model ----

fs::path stories() {
  return fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
}
fs::path qwen2_vocab() {
  return fs::path(MINFER_SHARED_DIR) / "vocab" / "ggml-vocab-qwen2.gguf";
}

// A random-weight model in the stories260K vocabulary (or another): a draft whose proposals
// differ from the target's. Removed at scope exit.
struct DraftFile : test::GenFile {
  DraftFile(const std::string& preset, const fs::path& vocab)
      : test::GenFile(preset, "f32", vocab.string()) {}
};

SessionParams session_params(int64_t n_ctx) {
  SessionParams p;
  p.n_ctx = n_ctx;
  p.n_threads = 2;
  p.prefix_cache = false;
  return p;
}

// After speculative steps with a draft that is mostly wrong, the target's cache is exactly the
// accepted text: the next step's logits equal a plain session's fed the same tokens.
TEST(SpecSession, RollbackLeavesTheCacheAsIfOnlyAcceptedTokensRan) {
  if (!fs::exists(stories())) GTEST_SKIP() << "../shared absent";
  DraftFile df("tiny-llama", stories());
  auto tm = Model::load(stories().string());
  auto dm = Model::load(df.path);
  Session target(*tm, session_params(256));
  Session draft(*dm, session_params(256));
  spec::SpecParams p;
  p.p_min = 0;  // always propose n_max: most are rejected
  p.n_max = 6;
  spec::Speculator sp(target, draft, p);
  std::vector<int32_t> ctx =
      tok::Tokenizer::from_gguf(gguf::File::open(stories().string())).tokenize("Once upon a time");
  const std::span<const float> first = target.eval_last(ctx, 0);
  const int32_t t0 = argmax(first);
  const auto out = run_spec(sp, ctx, t0, 40);
  ASSERT_EQ(out.size(), 40u);
  EXPECT_GT(sp.stats().n_drafted, sp.stats().n_accepted);
  const int32_t last = out.back();
  const std::span<const float> got =
      target.eval_last(std::span<const int32_t>(&last, 1), static_cast<int64_t>(ctx.size()));
  const std::vector<float> next(got.begin(), got.end());

  Session plain(*tm, session_params(256));
  std::vector<int32_t> all = ctx;
  all.push_back(last);
  const std::span<const float> want = plain.eval_last(all, 0);
  ASSERT_EQ(want.size(), next.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(next[i], want[i], 1e-3f) << i;
  EXPECT_EQ(target.seq_len(0), static_cast<int64_t>(all.size()));
}

TEST(SpecVocab, DifferentVocabulariesAreRefusedNamingBothFiles) {
  if (!fs::exists(stories()) || !fs::exists(qwen2_vocab())) GTEST_SKIP() << "../shared absent";
  const auto t = tok::Vocab::from_gguf(gguf::File::open(stories().string()));
  const auto d = tok::Vocab::from_gguf(gguf::File::open(qwen2_vocab().string()));
  try {
    spec::check_vocab_compatible(t, d, "target.gguf", "draft.gguf");
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("target.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("draft.gguf"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(spec::check_vocab_compatible(t, t, "a", "b"));
}

// ---- minfer run -md ----

test::CliResult run(const std::string& args) {
  return test::run_captured(std::string(MINFER_BINARY) + " run " + args, "spec");
}

// n_drafted / n_accept from the summary.
std::pair<int64_t, int64_t> drafted_accepted(const std::string& err) {
  std::smatch m;
  const std::regex re(R"(n_drafted = (\d+)\nn_accept  = (\d+))");
  if (!std::regex_search(err, m, re)) return {-1, -1};
  return {std::stoll(m[1]), std::stoll(m[2])};
}

const char* kPrompt = "-p 'Once upon a time' -n 80";

TEST(SpecCli, SelfDraftGreedyIsPlainGreedyAndAllAccepted) {
  if (!fs::exists(stories())) GTEST_SKIP() << "../shared absent";
  const std::string m = "-m " + stories().string();
  for (const char* exec : {"graph", "eager"}) {
    const std::string common = m + " " + kPrompt + " --temp 0 --exec " + exec;
    const auto plain = run(common);
    const auto sp = run(common + " -md " + stories().string() + " --draft-p-min 0");
    ASSERT_EQ(plain.status, 0) << plain.err;
    ASSERT_EQ(sp.status, 0) << sp.err;
    EXPECT_EQ(sp.out, plain.out) << exec;
    const auto [drafted, accepted] = drafted_accepted(sp.err);
    EXPECT_GT(drafted, 0) << sp.err;
    EXPECT_EQ(accepted, drafted) << exec << " " << sp.err;
  }
}

// A random-weight Q8_0 file whose greedy choices are near ties (151,936-token vocabulary, weights
// of std 0.25): its self-draft is accepted only if a token's row of the k + 1-token verify pass
// has the bits of its one-token decode step (batch invariance, docs/NUMERICS.md). Before the
// decode GEMV summed like the batched gemm, 91% (72 of 79) were accepted and the text differed.
TEST(SpecCli, SelfDraftOfANearTiedQ8_0FileIsAllAccepted) {
  if (!fs::exists(qwen2_vocab())) GTEST_SKIP() << "../shared absent";
  const fs::path f =
      fs::temp_directory_path() / ("minfer_spec_q8_" + std::to_string(::getpid()) + ".gguf");
  gen::GenOptions o;
  o.preset = "tiny-qwen3";
  o.type = "q8_0";
  o.vocab_path = qwen2_vocab().string();
  o.out_path = f.string();
  o.n_threads = 2;
  o.weight_std = 0.25f;
  gen::generate(o);
  const std::string common = "-m " + f.string() + " " + kPrompt + " --temp 0";
  const auto plain = run(common);
  const auto sp = run(common + " -md " + f.string() + " --draft-p-min 0");
  std::error_code ec;
  fs::remove(f, ec);
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(sp.status, 0) << sp.err;
  EXPECT_EQ(sp.out, plain.out);
  const auto [drafted, accepted] = drafted_accepted(sp.err);
  EXPECT_GT(drafted, 0) << sp.err;
  EXPECT_EQ(accepted, drafted) << sp.err;
}

TEST(SpecCli, OtherDraftGreedyIsStillPlainGreedy) {
  if (!fs::exists(stories())) GTEST_SKIP() << "../shared absent";
  DraftFile df("tiny-llama", stories());
  const std::string common = "-m " + stories().string() + " " + kPrompt + " --temp 0";
  const auto plain = run(common);
  const auto sp = run(common + " -md " + df.path + " --draft-p-min 0 --draft-max 5");
  ASSERT_EQ(sp.status, 0) << sp.err;
  EXPECT_EQ(sp.out, plain.out);
  const auto [drafted, accepted] = drafted_accepted(sp.err);
  EXPECT_GT(drafted, 0) << sp.err;
  EXPECT_LT(accepted, drafted) << sp.err;
}

// One sample() per emitted token on both paths, in order: the same seed gives the same text.
TEST(SpecCli, SeededSamplingIsPlainSampling) {
  if (!fs::exists(stories())) GTEST_SKIP() << "../shared absent";
  DraftFile df("tiny-llama", stories());
  const std::string common =
      "-m " + stories().string() + " " + kPrompt + " --temp 0.9 --repeat-penalty 1.1 -s 7";
  const auto plain = run(common);
  for (const std::string& d : {stories().string(), df.path}) {
    const auto sp = run(common + " -md " + d + " --draft-p-min 0");
    ASSERT_EQ(sp.status, 0) << sp.err;
    EXPECT_EQ(sp.out, plain.out) << d;
  }
}

// -n, a stop string and a full context inside an accepted run end exactly where plain does; a
// grammar constrains the target's samples as in plain decoding (the draft proposes freely).
TEST(SpecCli, LimitsInsideAnAcceptedRunAreExact) {
  if (!fs::exists(stories())) GTEST_SKIP() << "../shared absent";
  const std::string m = "-m " + stories().string() + " -p 'Once upon a time' --temp 0 ";
  const std::string md = " -md " + stories().string() + " --draft-p-min 0";
  for (const std::string& extra :
       {std::string("-n 7"), std::string("-n 23"), std::string("-n 80 -r 'park'"),
        std::string("-c 40"), std::string("-c 40 -n 100"),
        std::string("-n 40 --grammar 'root ::= [a-z ]+'")}) {
    const auto plain = run(m + extra);
    const auto sp = run(m + extra + md);
    ASSERT_EQ(plain.status, 0) << plain.err;
    ASSERT_EQ(sp.status, 0) << sp.err;
    EXPECT_EQ(sp.out, plain.out) << extra;
  }
}

TEST(SpecCli, VocabularyMismatchIsRefused) {
  if (!fs::exists(stories()) || !fs::exists(qwen2_vocab())) GTEST_SKIP() << "../shared absent";
  DraftFile df("tiny-qwen2", qwen2_vocab());
  const auto r = run("-m " + stories().string() + " -p hi -n 4 -md " + df.path);
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("cannot draft for"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(df.path), std::string::npos) << r.err;
}

TEST(SpecCli, BadDraftFlagsAreErrors) {
  if (!fs::exists(stories())) GTEST_SKIP() << "../shared absent";
  for (const char* bad : {"--draft-max -1", "--draft-min -2", "--draft-p-min 2", "-td -1"}) {
    const auto r = run("-m " + stories().string() + " -p hi -md " + stories().string() + " " + bad);
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_NE(r.err.find(std::string(bad).substr(0, 3)), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace minfer
