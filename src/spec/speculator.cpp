#include "spec/speculator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace minfer::spec {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE and SPEC_VOCAB_CHECK_START_TOKEN_ID: vocabularies
// padded differently still match, and the first ids (control tokens) may be named differently.
constexpr int32_t kMaxVocabDifference = 128;
constexpr int32_t kCheckStartId = 5;

}  // namespace

void SpecParams::validate() const {
  if (n_max < 0) fail(ErrorKind::InvalidArgument, "--draft-max {} must be >= 0", n_max);
  if (n_min < 0) fail(ErrorKind::InvalidArgument, "--draft-min {} must be >= 0", n_min);
  if (!(p_min >= 0.0f && p_min <= 1.0f))
    fail(ErrorKind::InvalidArgument, "--draft-p-min {} must be in [0, 1]", p_min);
  if (n_batch < 1) fail(ErrorKind::InvalidArgument, "draft batch size {} must be >= 1", n_batch);
}

TopToken top_token(std::span<const float> logits) {
  TopToken t;
  if (logits.empty()) return t;
  float best = logits[0];
  int32_t id = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > best) {
      best = logits[i];
      id = static_cast<int32_t>(i);
    }
  }
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - best);
  t.id = id;
  t.p = static_cast<float>(1.0 / sum);
  return t;
}

AcceptOutcome accept_draft(std::span<const float> rows, int64_t n_vocab,
                           std::span<const int32_t> draft, TokenSink& sink) {
  MINFER_ASSERT(n_vocab > 0 && rows.size() == static_cast<size_t>(n_vocab) * (draft.size() + 1));
  AcceptOutcome o;
  for (size_t i = 0;; ++i) {
    const int32_t tok =
        sink.sample(rows.subspan(i * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab)));
    const bool agrees = i < draft.size() && tok == draft[i];
    if (agrees) ++o.n_accepted;
    o.last = tok;
    ++o.n_emitted;
    if (!sink.emit(tok)) {
      o.ended = true;
      return o;
    }
    if (!agrees) return o;
    ++o.n_kept;  // draft[i] was evaluated at its position and stays; row i + 1 follows from it
  }
}

void check_vocab_compatible(const tok::Vocab& t, const tok::Vocab& d, std::string_view t_path,
                            std::string_view d_path) {
  auto refuse = [&](const std::string& what) {
    fail(ErrorKind::InvalidArgument,
         "draft model {} cannot draft for {}: {} (speculative decoding needs the same "
         "vocabulary)",
         d_path, t_path, what);
  };
  if (t.type != d.type)
    refuse(fmt::format("tokenizer types differ (target {}, draft {})", static_cast<int>(t.type),
                       static_cast<int>(d.type)));
  if (t.add_bos != d.add_bos || (t.add_bos && t.bos != d.bos))
    refuse(fmt::format("BOS differs (target add {} id {}, draft add {} id {})", t.add_bos, t.bos,
                       d.add_bos, d.bos));
  if (t.add_eos != d.add_eos || (t.add_eos && t.eos != d.eos))
    refuse(fmt::format("EOS differs (target add {} id {}, draft add {} id {})", t.add_eos, t.eos,
                       d.add_eos, d.eos));
  const auto nt = static_cast<int32_t>(t.tokens.size());
  const auto nd = static_cast<int32_t>(d.tokens.size());
  if (std::abs(nt - nd) > kMaxVocabDifference)
    refuse(fmt::format("vocabulary sizes {} (target) and {} (draft) differ by more than {}", nt, nd,
                       kMaxVocabDifference));
  for (int32_t i = kCheckStartId; i < std::min(nt, nd); ++i) {
    if (t.tokens[static_cast<size_t>(i)] != d.tokens[static_cast<size_t>(i)])
      refuse(fmt::format("token {} differs (target '{}', draft '{}')", i,
                         t.tokens[static_cast<size_t>(i)], d.tokens[static_cast<size_t>(i)]));
  }
}

Speculator::Speculator(Engine& target, Engine& draft, const SpecParams& params)
    : target_(target), draft_engine_(draft), params_(params) {
  params_.validate();
  draft_.reserve(static_cast<size_t>(params_.n_max));
  batch_.reserve(static_cast<size_t>(params_.n_max) + 1);
  rows_.reserve(static_cast<size_t>(params_.n_max) + 1);
}

std::span<const float> Speculator::catch_up(std::span<const int32_t> ctx, int32_t last) {
  // The draft's cache is valid up to the first token that differs from ctx + [last].
  const size_t n_want = ctx.size() + 1;
  size_t p = 0;
  const size_t n_cmp = std::min(draft_held_.size(), ctx.size());
  while (p < n_cmp && draft_held_[p] == ctx[p]) ++p;
  if (p == ctx.size() && draft_held_.size() > p && draft_held_[p] == last) ++p;
  // Always evaluate at least `last`: its logits are the first proposal's.
  if (p == n_want) --p;
  draft_held_.resize(p);
  std::span<const float> logits;
  while (p < n_want) {
    const size_t n = std::min(n_want - p, static_cast<size_t>(params_.n_batch));
    for (size_t i = p; i < p + n; ++i) draft_held_.push_back(i < ctx.size() ? ctx[i] : last);
    logits = draft_engine_.eval_last(std::span<const int32_t>(draft_held_).subspan(p, n),
                                     static_cast<int64_t>(p));
    p += n;
  }
  return logits;
}

void Speculator::propose(std::span<const int32_t> ctx, int32_t last, int64_t max) {
  draft_.clear();
  // The draft evaluates `last` at ctx.size() and proposals up to ctx.size() + max - 1.
  max = std::min<int64_t>(max, draft_engine_.n_ctx() - static_cast<int64_t>(ctx.size()));
  if (max <= 0 || max < params_.n_min) return;
  const auto t0 = Clock::now();
  std::span<const float> logits = catch_up(ctx, last);
  const int64_t n_vocab_target = target_.n_vocab();
  for (;;) {
    const TopToken top = top_token(logits);
    if (top.p < params_.p_min || top.id >= n_vocab_target) break;
    draft_.push_back(top.id);
    if (static_cast<int64_t>(draft_.size()) >= max) break;
    draft_held_.push_back(top.id);
    logits = draft_engine_.eval_last(std::span<const int32_t>(&draft_held_.back(), 1),
                                     static_cast<int64_t>(draft_held_.size()) - 1);
  }
  if (static_cast<int64_t>(draft_.size()) < params_.n_min) draft_.clear();
  stats_.draft_ms += ms_since(t0);
}

Speculator::Step Speculator::step(std::vector<int32_t>& ctx, int32_t last, int64_t max_emit,
                                  TokenSink& sink) {
  const auto pos = static_cast<int64_t>(ctx.size());
  MINFER_ASSERT(max_emit >= 1 && pos < target_.n_ctx());
  // k proposals: the target evaluates positions pos..pos + k, and k + 1 tokens may be emitted.
  const int64_t room = std::min<int64_t>(max_emit - 1, target_.n_ctx() - 1 - pos);
  propose(ctx, last, std::min<int64_t>(params_.n_max, room));

  batch_.assign(1, last);
  batch_.insert(batch_.end(), draft_.begin(), draft_.end());
  rows_.resize(batch_.size());
  for (size_t i = 0; i < rows_.size(); ++i) rows_[i] = static_cast<int32_t>(i);
  const auto t0 = Clock::now();
  const std::span<const float> rows = target_.eval(batch_, pos, rows_);
  stats_.target_ms += ms_since(t0);

  const AcceptOutcome a = accept_draft(rows, target_.n_vocab(), draft_, sink);
  ctx.insert(ctx.end(), batch_.begin(), batch_.begin() + 1 + a.n_kept);
  ++stats_.n_steps;
  stats_.n_drafted += static_cast<int64_t>(draft_.size());
  stats_.n_accepted += a.n_accepted;
  stats_.n_emitted += a.n_emitted;
  Step s;
  s.ended = a.ended;
  s.last = a.last;
  s.n_drafted = static_cast<int32_t>(draft_.size());
  s.n_accepted = a.n_accepted;
  s.n_emitted = a.n_emitted;
  return s;
}

}  // namespace minfer::spec
