#include "server/slot.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "common/error.h"

namespace minfer::server {

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

void Slot::begin(std::shared_ptr<Task> task, int64_t n_cached, uint32_t default_seed) {
  MINFER_ASSERT(n_cached < static_cast<int64_t>(task->prompt().size()));
  task_ = std::move(task);
  const GenParams& g = task_->gen();
  SamplerParams sp = g.sampling;
  if (sp.seed == kRandomSeed) sp.seed = default_seed;
  sp.seed = resolve_seed(sp.seed);
  sampler_ = std::make_unique<Sampler>(sp, n_vocab_);
  for (int32_t t : task_->prompt()) sampler_->accept(t);
  grammar_.reset();
  think_.reset();
  if (g.grammar) {
    MINFER_ASSERT(grammar_vocab_ != nullptr);
    // A strict grammar after a thinking the prompt did not open starts as the grammar that
    // lets the model open it (GenParams::think_start_grammar).
    const bool start = !g.think.empty() && g.think_start_grammar;
    grammar_ = std::make_unique<grammar::TokenFilter>(start ? g.think_start_grammar : g.grammar,
                                                      grammar_vocab_->get());
    if (!g.think.empty()) think_.emplace(g.think, g.think_open);
  }
  grammar_on_ = grammar_ && g.grammar_trigger.empty() && !(think_ && g.think_open);
  lazy_text_.clear();
  text_ = std::make_unique<TextStream>(tk_, g.stop, g.keep_special);
  generated_.clear();
  embd_rows.clear();
  n_cached_ = n_cached;
  pending = -1;
  state_ = State::Prefill;
  t_start_ = Clock::now();
}

int64_t Slot::n_prompt() const {
  return task_ ? static_cast<int64_t>(task_->prompt().size()) : 0;
}

int64_t Slot::prompt_left() const {
  return state_ == State::Prefill ? n_prompt() - static_cast<int64_t>(cache.size()) : 0;
}

void Slot::on_decoded_prompt(int64_t n) {
  const auto& p = task_->prompt();
  const size_t at = cache.size();
  cache.insert(cache.end(), p.begin() + at, p.begin() + at + n);
}

void Slot::on_decoded_pending() {
  cache.push_back(pending);
  pending = -1;
}

void Slot::apply_penalties(std::vector<float>& w) const {
  const GenParams& g = task_->gen();
  if (g.presence_penalty != 0.0f || g.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> count;
    for (int32_t t : generated_) ++count[t];
    for (const auto& [t, c] : count)
      w[size_t(t)] -= g.presence_penalty + g.frequency_penalty * float(c);
  }
  for (const auto& [id, bias] : g.logit_bias)  // ids were checked against the vocabulary
    if (size_t(id) < w.size()) w[size_t(id)] += bias;
  if (g.ignore_eos)
    for (int32_t id : tk_.eog_ids()) w[size_t(id)] = -INFINITY;
}

TokenLogprob Slot::logprob_of(std::span<const float> row, int32_t id) const {
  float mx = -INFINITY;
  for (float v : row) mx = std::max(mx, v);
  double sum = 0;
  for (float v : row) sum += std::exp(double(v - mx));
  const float lse = mx + float(std::log(sum));
  TokenLogprob lp;
  lp.id = id;
  lp.logprob = row[size_t(id)] - lse;
  const int32_t k = std::min<int32_t>(task_->gen().top_logprobs, n_vocab_);
  if (k > 0) {
    std::vector<int32_t> idx(row.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return row[size_t(a)] > row[size_t(b)] || (row[size_t(a)] == row[size_t(b)] && a < b);
    });
    for (int32_t i = 0; i < k; ++i)
      lp.top.emplace_back(idx[size_t(i)], row[size_t(idx[size_t(i)])] - lse);
  }
  return lp;
}

TaskEvent Slot::on_logits(std::span<const float> row, int64_t n_ctx_seq, bool context_shift) {
  TaskEvent ev;
  ev.slot_id = id_;
  const GenParams& g = task_->gen();
  if (state_ == State::Prefill) {
    state_ = State::Generate;
    t_prompt_done_ = Clock::now();
    if (g.n_predict == 0) return finish(std::move(ev), "length", "limit");
  }
  // The sampler reads the engine's row in place; only penalties and masks need a copy.
  std::span<const float> logits = row;
  // A strict grammar waits for the thinking to end: the answer it requires must still come.
  const bool thinking = think_ && g.grammar_trigger.empty() && !grammar_on_;
  if (g.presence_penalty != 0.0f || g.frequency_penalty != 0.0f || g.ignore_eos ||
      !g.logit_bias.empty() || thinking) {
    work_.assign(row.begin(), row.end());
    apply_penalties(work_);
    if (thinking)
      for (int32_t id : tk_.eog_ids()) work_[size_t(id)] = -INFINITY;
    logits = work_;
  }
  const int32_t next = grammar_on_ ? sampler_->sample(logits, *grammar_) : sampler_->sample(logits);
  // No token can continue the grammar (it is complete and the end tokens are banned).
  if (next == kNoTokenAllowed) return finish(std::move(ev), "stop", "eos");
  if (tk_.is_eog(next) && !g.ignore_eos) return finish(std::move(ev), "stop", "eos");
  if (grammar_on_) {
    const bool allowed = grammar_->accept(next);
    MINFER_ASSERT(allowed);  // the constrained sampler returns allowed tokens only
    // A lazy grammar's block is complete: free again until the next trigger.
    if (!g.grammar_trigger.empty() && grammar_->is_complete() && !grammar_->can_continue()) {
      grammar_on_ = false;
      grammar_->reset();
    }
  } else if (grammar_ && !think_) {
    watch_trigger(tk_.token_to_piece(next, /*special=*/true));
  }
  if (think_) follow_thinking(next);
  sampler_->accept(next);
  generated_.push_back(next);
  ev.tokens.push_back(next);
  if (g.logprobs) ev.logprobs.push_back(logprob_of(row, next));
  ev.text = text_->push_token(next);
  if (text_->stopped()) {
    ev.stopping_word = text_->stop_word();
    return finish(std::move(ev), "stop", "word");
  }
  if (g.n_predict >= 0 && n_generated() >= g.n_predict)
    return finish(std::move(ev), "length", "limit");
  // The next step decodes `next` at position cache.size(): it must fit the sequence.
  if (static_cast<int64_t>(cache.size()) + 1 > n_ctx_seq && !context_shift)
    return finish(std::move(ev), "length", "limit");
  pending = next;
  return ev;
}

// The trigger may arrive split over tokens, or as a control token whose piece is only its
// special text; from the trigger on, the text (trigger included) goes through the grammar.
void Slot::watch_trigger(std::string_view text) {
  const std::string& trigger = task_->gen().grammar_trigger;
  lazy_text_ += text;
  const size_t at = lazy_text_.find(trigger);
  if (at == std::string::npos) {
    if (lazy_text_.size() >= trigger.size())
      lazy_text_.erase(0, lazy_text_.size() - trigger.size() + 1);
    return;
  }
  grammar_->reset();
  grammar_on_ = grammar_->accept_text(std::string_view(lazy_text_).substr(at));
  if (!grammar_on_) grammar_->reset();
  lazy_text_.clear();
}

// Control tokens count with their special text, as the response's splitter sees the markers
// (GenParams::keep_special). The start grammar has read the answer's first tokens when they
// were no thinking; after a thinking, the strict grammar starts at the close marker, its
// whitespace after it allowed, and takes the text of the same token after that (if it refuses
// that text, which a token that runs on past the marker can hold, the answer is free).
void Slot::follow_thinking(int32_t token) {
  const GenParams& g = task_->gen();
  const ReasoningPiece p = think_->push(tk_.token_to_piece(token, /*special=*/true));
  switch (think_->phase()) {
    case ReasoningSplitter::Phase::Start:
      return;
    case ReasoningSplitter::Phase::Thinking:
      grammar_on_ = false;
      return;
    case ReasoningSplitter::Phase::Answer:
      break;
  }
  const bool thought = think_->thought();
  think_.reset();
  if (!g.grammar_trigger.empty()) {
    watch_trigger(p.content);
  } else if (thought) {
    grammar_ = std::make_unique<grammar::TokenFilter>(g.grammar, grammar_vocab_->get());
    grammar_on_ = grammar_->accept_text(p.content);
  }
}

TaskEvent Slot::finish(TaskEvent ev, const char* reason, const char* stop_type) {
  const auto now = Clock::now();
  if (state_ == State::Prefill) t_prompt_done_ = now;
  if (text_) ev.text += text_->finish();
  ev.final = true;
  ev.finish_reason = reason;
  ev.stop_type = stop_type;
  ev.slot_id = id_;
  ev.usage.prompt_tokens = n_prompt();
  ev.usage.completion_tokens = n_generated();
  ev.usage.cached_tokens = n_cached_;
  ev.timings.prompt_n = n_prompt() - n_cached_;
  ev.timings.prompt_ms = ms_between(t_start_, t_prompt_done_);
  ev.timings.predicted_n = n_generated();
  ev.timings.predicted_ms = ms_between(t_prompt_done_, now);
  release();
  return ev;
}

TaskEvent Slot::finish_error(const ApiError& err) {
  TaskEvent ev = finish(TaskEvent{}, "stop", "none");
  ev.text.clear();
  ev.error = err;
  return ev;
}

TaskEvent Slot::finish_interrupted() {
  return finish(TaskEvent{}, "length", "limit");
}

void Slot::release() {
  // The prompt's partial prefill stays in `cache` (valid K/V); a pending token was never
  // decoded, so it is not part of the cache.
  pending = -1;
  state_ = State::Idle;
  task_.reset();
  sampler_.reset();
  grammar_.reset();
  think_.reset();
  text_.reset();
}

}  // namespace minfer::server
