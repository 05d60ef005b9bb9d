// Slot: one sequence of the SeqEngine (seq id = slot id) and the request it is serving.
//
// A slot remembers `cache`, the tokens whose K/V the engine holds for its sequence (positions
// 0..cache.size()-1), also after its request ended: the next request whose prompt extends
// them starts from there (llama-server's cache_prompt). While prefilling, `cache` is a prefix
// of the prompt; while generating, `pending` is the sampled token the next step decodes.
//
// on_logits() is the per-token work: penalties, sampling (the request's own Sampler and
// seed, constrained by its grammar when it has one), logprobs, text hold-back (text_stream.h), stop
// strings, end-of-generation and length limits; it fills the TaskEvent the scheduler posts. A
// grammar that follows a reasoning model's thinking (GenParams::think) waits while the slot
// reads the thinking with a ReasoningSplitter of its own (docs/SERVER.md "Grammars after the
// thinking").
//
// Ownership: owned by the Scheduler; shares its Task with the HTTP handler. Thread safety:
// used only by the decode loop. Failure: none thrown (a bad request was rejected at parse
// time). Cost: on_logits is O(n_vocab) (a copy of the row for penalties and the sampler's
// O(n_vocab) pass; logprobs add a log-sum-exp and a partial sort; a grammar adds a walk of the
// drawn token's bytes, and the vocabulary mask when it rejects that token: docs/GRAMMAR.md).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sample/sampler.h"
#include "server/constrain.h"
#include "server/reasoning.h"
#include "server/task.h"
#include "server/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

using Clock = std::chrono::steady_clock;

class Slot {
 public:
  enum class State { Idle, Prefill, Generate };

  // `grammar_vocab` (shared by the slots, may be null: then requests carry no grammar) gives
  // the vocabulary index a constrained request's TokenFilter walks.
  Slot(int32_t id, const tok::Tokenizer& tk, int32_t n_vocab, GrammarVocab* grammar_vocab = nullptr)
      : id_(id), tk_(tk), n_vocab_(n_vocab), grammar_vocab_(grammar_vocab) {}

  int32_t id() const { return id_; }
  State state() const { return state_; }
  bool busy() const { return state_ != State::Idle; }
  const std::shared_ptr<Task>& task() const { return task_; }

  // Starts `task`; the engine's sequence already holds cache[0..n_cached) (the caller trimmed
  // it). default_seed replaces a request's random seed when the server was given -s.
  void begin(std::shared_ptr<Task> task, int64_t n_cached, uint32_t default_seed);
  // Prompt tokens still to evaluate (Prefill).
  int64_t prompt_left() const;
  // After the step decoded `n` more prompt tokens (or the pending token): cache grows.
  void on_decoded_prompt(int64_t n);
  void on_decoded_pending();
  // A logits row for this slot's last batch token. Returns the event to post; event.final
  // means the request is over (the slot is then idle again).
  TaskEvent on_logits(std::span<const float> row, int64_t n_ctx_seq, bool context_shift);
  // Ends the request now: an error, or a clean end (shutdown) with finish_reason "length".
  TaskEvent finish_error(const ApiError& err);
  TaskEvent finish_interrupted();
  // The request is gone (cancelled): the slot is idle, its cache kept.
  void release();

  std::vector<int32_t> cache;  // tokens in the engine's sequence
  int32_t pending = -1;        // Generate: sampled, not yet decoded
  uint64_t last_used = 0;      // step of the last admission (LRU among idle slots)
  int32_t batch_row = -1;      // this step: index of its logits row, -1 none
  int64_t n_batch_tokens = 0;  // this step: tokens it put in the batch
  std::vector<float> embd_rows;  // embedding task: the hidden-state rows gathered so far

  int64_t n_prompt() const;
  int64_t n_generated() const { return static_cast<int64_t>(generated_.size()); }
  int64_t n_cached() const { return n_cached_; }

 private:
  TaskEvent finish(TaskEvent ev, const char* reason, const char* stop_type);
  TokenLogprob logprob_of(std::span<const float> row, int32_t id) const;
  void apply_penalties(std::vector<float>& w) const;

  const int32_t id_;
  const tok::Tokenizer& tk_;
  const int32_t n_vocab_;
  State state_ = State::Idle;
  std::shared_ptr<Task> task_;
  std::unique_ptr<Sampler> sampler_;
  GrammarVocab* grammar_vocab_;
  std::unique_ptr<grammar::TokenFilter> grammar_;  // the request's grammar, if any
  // A lazy grammar (GenParams::grammar_trigger): whether it constrains now, and while it does
  // not, the text since it last did (kept to the trigger's length less one when no trigger).
  bool grammar_on_ = false;
  std::string lazy_text_;
  void watch_trigger(std::string_view text);
  // A grammar that follows the thinking (GenParams::think): the thinking is read as the
  // response's splitter reads it, until the answer starts; then the lazy trigger is watched in
  // the answer's text, or the strict grammar takes the answer from the close marker on.
  std::optional<ReasoningSplitter> think_;
  void follow_thinking(int32_t token);
  std::unique_ptr<TextStream> text_;
  std::vector<int32_t> generated_;
  std::vector<float> work_;  // the row with penalties / masks applied (only when some apply)
  int64_t n_cached_ = 0;
  Clock::time_point t_start_, t_prompt_done_;
};

}  // namespace minfer::server
