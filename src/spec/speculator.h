// Speculative decoding with a draft model (llama.cpp's -md): a small model proposes tokens
// greedily, the target evaluates them all in one forward pass, and the target's own samples
// decide what is emitted.
//
// Exactness: every emitted token is a sample of the target's sampler from the target's logits
// at that token's position, drawn in order, one sample() per emitted token (the draft only
// decides how many positions one target pass covers). Greedy output is therefore the target's
// greedy output, and a seeded sampler consumes its RNG exactly as a plain decode loop would.
// The only difference from plain decoding is numeric: a row of a k+1-token pass may differ in
// the last bits from the same row of a 1-token pass (batched vs one-column matmul kernels).
//
// Layering: this layer knows engines (model/engine.h) and vocabularies, not the sampler's
// state: the caller samples and emits through a TokenSink, so grammar, --ignore-eos, -n, EOS and
// stop strings stay the caller's rules, applied identically with and without a draft.
//
// Ownership: a Speculator borrows both engines (they must outlive it) and owns its buffers and
// the list of tokens the draft engine holds. Thread safety: none (one generation stream).
// Failure: bad parameters throw Error(InvalidArgument); engine errors propagate unchanged.
// Cost per step: k + 1 draft evals of one token (after catching the draft up with what the
// target accepted: usually one token), one target eval of k + 1 tokens with k + 1 logits rows,
// and one softmax denominator over the draft's row per proposed token.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "model/engine.h"
#include "tokenizer/vocab.h"

namespace minfer::spec {

// Defaults: llama.cpp's long-standing common_params_speculative (16 / 0 / 0.75; its 2026
// sources changed them to 3 / 0 / 0.0 under --spec-draft-n-max/-n-min/-p-min).
struct SpecParams {
  int32_t n_max = 16;      // --draft-max: most tokens proposed per step
  int32_t n_min = 0;       // --draft-min: fewer proposed than this -> a plain one-token step
  float p_min = 0.75f;     // --draft-p-min: stop proposing when the draft's top p is below this
  int32_t n_batch = 2048;  // most tokens per draft eval when it catches up (a prompt, a shift)
  void validate() const;   // throws Error(InvalidArgument) naming the flag
};

struct SpecStats {
  int64_t n_steps = 0;     // target passes
  int64_t n_drafted = 0;   // tokens proposed (and evaluated by the target)
  int64_t n_accepted = 0;  // proposed tokens the target sampled too
  int64_t n_emitted = 0;   // tokens emitted through the sink
  double draft_ms = 0;     // time in the draft engine (catch-up included)
  double target_ms = 0;    // time in the target engine
};

// The caller's side of a step. sample() draws from one target logits row (n_vocab floats) and
// must consume the sampler exactly as the plain loop does. emit() gets that token and returns
// whether generation goes on: false ends the step and the generation (an end-of-generation
// token, which the sink may leave unprinted, -n reached, a stop string, kNoTokenAllowed).
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual int32_t sample(std::span<const float> row) = 0;
  virtual bool emit(int32_t token) = 0;
};

struct AcceptOutcome {
  int32_t n_kept = 0;      // proposed tokens that precede the last sampled one (now in the cache)
  int32_t n_accepted = 0;  // proposed tokens equal to the target's sample at their position
  int32_t n_emitted = 0;   // tokens given to emit()
  int32_t last = -1;       // the last sampled token (not evaluated yet)
  bool ended = false;      // emit() returned false
};

// The accept loop over one target pass (plain data: unit-tested with fake rows). `rows` holds
// draft.size() + 1 rows of n_vocab logits: row i is the target's prediction after the pending
// token and draft[0..i). Samples row 0; while the sample equals draft[i] and emit() goes on,
// moves to row i + 1. Stops at the first disagreement (that sample is emitted: it is the
// target's), at the bonus row after a fully accepted draft, or when emit() says stop.
AcceptOutcome accept_draft(std::span<const float> rows, int64_t n_vocab,
                           std::span<const int32_t> draft, TokenSink& sink);

// llama.cpp's common_speculative_are_compatible, made an error: same tokenizer type, same BOS
// and EOS (and whether they are added), sizes within 128 tokens, identical token texts from id 5
// on. Throws Error(InvalidArgument) naming both files and the first difference.
void check_vocab_compatible(const tok::Vocab& target, const tok::Vocab& draft,
                            std::string_view target_path, std::string_view draft_path);

// Index of the largest logit (lowest id among ties) and its softmax probability.
struct TopToken {
  int32_t id = -1;
  float p = 0;
};
TopToken top_token(std::span<const float> logits);

// One generation stream's speculative decoding over a target and a draft Engine. The caller
// owns the token history (`ctx`: what the target's cache holds, positions 0..ctx.size()) and
// the pending token (sampled, not evaluated), as in its plain loop; the Speculator keeps the
// tokens the draft holds and catches it up with `ctx` at each step (after a context shift too:
// it re-evaluates from the first token that differs).
// A server slot would hold one Speculator per sequence; see docs/SPECULATIVE.md for what a
// batched (SeqEngine) version needs.
class Speculator {
 public:
  Speculator(Engine& target, Engine& draft, const SpecParams& params);

  struct Step {
    bool ended = false;  // the sink ended the generation
    int32_t last = -1;   // the new pending token (when !ended)
    int32_t n_drafted = 0, n_accepted = 0, n_emitted = 0;
  };
  // One step: the draft proposes up to min(n_max, max_emit - 1, room in both contexts) tokens
  // after ctx + [last]; the target evaluates [last, proposals...] at position ctx.size() with
  // every row's logits; accept_draft decides. Appends the evaluated tokens that stay (last and
  // the proposals before the final sample) to `ctx`. Needs ctx.size() < target.n_ctx() and
  // max_emit >= 1. Rejected positions in either cache are overwritten by the next eval (the
  // Engine contract: a graph Session drops them with seq_rm first).
  Step step(std::vector<int32_t>& ctx, int32_t last, int64_t max_emit, TokenSink& sink);

  const SpecStats& stats() const { return stats_; }
  const SpecParams& params() const { return params_; }

 private:
  // Proposes into draft_ (possibly none); `max` bounds the count.
  void propose(std::span<const int32_t> ctx, int32_t last, int64_t max);
  // Evaluates the tokens of ctx + [last] the draft lacks; returns the last row's logits.
  std::span<const float> catch_up(std::span<const int32_t> ctx, int32_t last);

  Engine& target_;
  Engine& draft_engine_;
  SpecParams params_;
  SpecStats stats_;
  std::vector<int32_t> draft_held_;  // tokens in the draft's cache, positions 0..
  std::vector<int32_t> draft_;       // this step's proposals
  std::vector<int32_t> batch_;       // [last, proposals...]
  std::vector<int32_t> rows_;        // 0..k
};

}  // namespace minfer::spec
