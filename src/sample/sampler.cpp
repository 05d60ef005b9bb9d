#include "sample/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "sample/select.h"

namespace minfer {

void SamplerParams::validate() const {
  if (!std::isfinite(temperature))
    fail(ErrorKind::InvalidArgument, "--temp {} is not finite", temperature);
  if (!(top_p >= 0.0f && top_p <= 1.0f))
    fail(ErrorKind::InvalidArgument, "--top-p {} is outside [0, 1]", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    fail(ErrorKind::InvalidArgument, "--min-p {} is outside [0, 1]", min_p);
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty))
    fail(ErrorKind::InvalidArgument, "--repeat-penalty {} must be > 0", repeat_penalty);
  if (repeat_last_n < 0)
    fail(ErrorKind::InvalidArgument, "repeat_last_n {} must be >= 0", repeat_last_n);
}

uint32_t resolve_seed(uint32_t seed) {
  if (seed != kRandomSeed) return seed;
  std::random_device rd;
  uint32_t s = rd();
  return s == kRandomSeed ? 0u : s;
}

void Candidates::assign(std::span<const float> logits) {
  items.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) items[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
  sorted = false;
}

namespace {

bool by_logit_desc(const Candidate& a, const Candidate& b) {
  // Ties by id so every stage is deterministic whatever the sort algorithm does.
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void sort_all(Candidates& c) {
  if (c.sorted) return;
  std::sort(c.items.begin(), c.items.end(), by_logit_desc);
  c.sorted = true;
}

}  // namespace

void apply_repeat_penalty(Candidates& c, std::span<const int32_t> history, float penalty,
                          std::vector<int32_t>& scratch) {
  if (penalty == 1.0f || history.empty()) return;
  scratch.assign(history.begin(), history.end());  // capacity reused after warm-up
  std::sort(scratch.begin(), scratch.end());
  scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
  // Candidates are indexed by id until the first sorting stage; the penalty runs first, so
  // a direct index is valid. Fall back to a search if a caller reordered them.
  for (int32_t tok : scratch) {
    Candidate* cand = nullptr;
    if (tok >= 0 && static_cast<size_t>(tok) < c.items.size() && c.items[tok].id == tok) {
      cand = &c.items[tok];
    } else {
      for (auto& x : c.items)
        if (x.id == tok) cand = &x;
    }
    if (!cand) continue;
    cand->logit = cand->logit > 0.0f ? cand->logit / penalty : cand->logit * penalty;
  }
  c.sorted = false;
}

void apply_top_k(Candidates& c, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size()) {
    return;
  }
  if (!c.sorted) {
    std::partial_sort(c.items.begin(), c.items.begin() + k, c.items.end(), by_logit_desc);
    c.sorted = true;
  }
  c.items.resize(k);
}

void softmax(Candidates& c) {
  MINFER_ASSERT(!c.items.empty());
  sort_all(c);
  const float max_l = c.items[0].logit;
  double sum = 0.0;
  for (auto& x : c.items) {
    x.p = std::exp(x.logit - max_l);
    sum += x.p;
  }
  for (auto& x : c.items) x.p = static_cast<float>(x.p / sum);
}

void apply_top_p(Candidates& c, float p) {
  if (p >= 1.0f) return;
  softmax(c);
  double cum = 0.0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    cum += c.items[i].p;
    if (cum >= p) {
      keep = i + 1;
      break;
    }
  }
  c.items.resize(std::max<size_t>(keep, 1));
}

void apply_min_p(Candidates& c, float min_p) {
  if (min_p <= 0.0f) return;
  softmax(c);
  const float threshold = c.items[0].p * min_p;
  size_t keep = 1;  // sorted descending: keep the prefix at or above the threshold
  while (keep < c.size() && c.items[keep].p >= threshold) ++keep;
  c.items.resize(keep);
}

void apply_temperature(Candidates& c, float temp) {
  MINFER_ASSERT(temp > 0.0f);
  for (auto& x : c.items) x.logit /= temp;
}

int32_t argmax(std::span<const float> logits) {
  MINFER_ASSERT(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

int32_t draw(Candidates& c, double u) {
  softmax(c);
  double cum = 0.0;
  for (const auto& x : c.items) {
    cum += x.p;
    if (u < cum) return x.id;
  }
  return c.items.back().id;  // rounding left u just above the total
}

Sampler::Sampler(const SamplerParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(n_vocab) {
  params_.validate();
  if (n_vocab <= 0) fail(ErrorKind::InvalidArgument, "sampler: n_vocab {} must be > 0", n_vocab);
  params_.seed = resolve_seed(params_.seed);
  rng_.seed(params_.seed);
  cand_.items.reserve(n_vocab);
  history_.assign(params_.repeat_last_n, 0);
  hist_view_.reserve(params_.repeat_last_n);
  scratch_.reserve(params_.repeat_last_n);
  overrides_.reserve(params_.repeat_last_n);
}

void Sampler::accept(int32_t token) {
  if (history_.empty()) return;
  history_[history_head_] = token;
  history_head_ = (history_head_ + 1) % history_.size();
  history_len_ = std::min(history_len_ + 1, history_.size());
}

void Sampler::reset() {
  history_head_ = 0;
  history_len_ = 0;
}

void Sampler::check_row(std::span<const float> logits) const {
  if (logits.size() != static_cast<size_t>(n_vocab_))
    fail(ErrorKind::InvalidArgument, "sampler: got {} logits, vocabulary has {}", logits.size(),
         n_vocab_);
}

void Sampler::unroll_history() {
  hist_view_.clear();
  for (size_t i = 0; i < history_len_; ++i) hist_view_.push_back(history_[i]);
}

double Sampler::next_uniform() {
  // 32 random bits -> [0, 1): portable across standard libraries (unlike the distributions).
  return static_cast<double>(rng_()) * (1.0 / 4294967296.0);
}

// The tail of the chain, shared by both paths: top-p, min-p, temperature, draw.
int32_t Sampler::finish_chain() {
  apply_top_p(cand_, params_.top_p);
  apply_min_p(cand_, params_.min_p);
  apply_temperature(cand_, params_.temperature);
  return draw(cand_, next_uniform());
}

int32_t Sampler::sample(std::span<const float> logits) {
  check_row(logits);
  const bool penalize = params_.repeat_penalty != 1.0f && history_len_ > 0;
  if (params_.temperature <= 0.0f && !penalize) return argmax_fast(logits);

  // The penalised tokens as overrides of the row, which is read in place: each distinct
  // history token inside the vocabulary once, with apply_repeat_penalty's arithmetic.
  overrides_.clear();
  if (penalize) {
    unroll_history();
    scratch_.assign(hist_view_.begin(), hist_view_.end());
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
    const float pen = params_.repeat_penalty;
    for (int32_t tok : scratch_) {
      if (tok < 0 || tok >= n_vocab_) continue;
      const float l = logits[static_cast<size_t>(tok)];
      overrides_.push_back({tok, l > 0.0f ? l / pen : l * pen, 0.0f});
    }
  }
  if (params_.temperature <= 0.0f) {
    select_top_k(logits, 1, overrides_, cand_.items);
    return cand_.items[0].id;
  }
  const int32_t k = params_.top_k;
  if (k > 0 && k < n_vocab_) {
    // apply_top_k's result (its partial_sort's k best, sorted) without a vocabulary-sized copy.
    select_top_k(logits, k, overrides_, cand_.items);
    cand_.sorted = true;
  } else {
    // top-k off: the later stages need the whole row in order; a radix sort gives
    // std::sort's order (sort_all) in a tenth of the time.
    cand_.assign(logits);
    for (const Candidate& o : overrides_) cand_.items[static_cast<size_t>(o.id)].logit = o.logit;
    sort_by_logit_desc(cand_.items, sort_tmp_);
    cand_.sorted = true;
  }
  return finish_chain();
}

int32_t Sampler::sample(std::span<const float> logits, grammar::TokenFilter& grammar) {
  ++n_grammar_samples_;
  const int32_t first = sample(logits);
  if (grammar.allows(first)) return first;
  ++n_grammar_masks_;
  masked_.assign(logits.begin(), logits.end());
  if (grammar.mask(masked_) == 0) return kNoTokenAllowed;
  const int32_t t = sample(masked_);
  // The draw's rounding fallback (draw(): u just above the total) may land on a masked token
  // of probability 0; the best allowed token stands in for it.
  return grammar.allows(t) ? t : argmax(masked_);
}

int32_t Sampler::sample_reference(std::span<const float> logits) {
  check_row(logits);
  const bool penalize = params_.repeat_penalty != 1.0f && history_len_ > 0;
  if (params_.temperature <= 0.0f && !penalize) return argmax(logits);

  cand_.assign(logits);
  if (penalize) {
    unroll_history();
    apply_repeat_penalty(cand_, hist_view_, params_.repeat_penalty, scratch_);
  }
  if (params_.temperature <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < cand_.size(); ++i)
      if (cand_.items[i].logit > cand_.items[best].logit) best = i;
    return cand_.items[best].id;
  }
  apply_top_k(cand_, params_.top_k);
  return finish_chain();
}

}  // namespace minfer
