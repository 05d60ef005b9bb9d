// Token sampling: llama.cpp's default chain and defaults.
//
// Chain order (as llama.cpp's common sampler): repetition penalty -> top-k -> top-p -> min-p
// -> temperature -> draw. top-p and min-p therefore see the untempered distribution, and
// temperature only reshapes what survived. temperature <= 0 means greedy: the penalty is still
// applied, then argmax (ties go to the lowest token id).
//
// Each stage is also a free function over a Candidates buffer so tests can check one stage at
// a time. The Sampler owns its buffers; after the first sample() (warm-up) it performs no heap
// allocation per token.
//
// Ownership: Sampler owns its candidate buffer, history ring and RNG; the logits span is
// borrowed for the duration of sample().
// Thread safety: none; one Sampler per generation stream.
// Failure: bad parameters (negative top-k other than the "off" values, p outside [0, 1],
// repeat penalty <= 0, empty logits) throw Error(InvalidArgument) naming the parameter.
// Cost: sample() with greedy or top-k on (the default, 40) is one read of the row (~20 us for
// 151,936 logits) plus O(k log k); with top-k off, the later stages see a sorted copy of the
// whole vocabulary (a radix sort plus a softmax over every token: ~3 ms for 151,936).
// sample_reference() always copies the row and sorts with std::sort. With a grammar, a drawn
// token the grammar allows costs one walk of its bytes on top; a rejected one a copy of the
// row, the grammar's mask and a second draw (docs/GRAMMAR.md).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "grammar/token_filter.h"

namespace minfer {

constexpr int32_t kNoTokenAllowed = -1;

// llama.cpp's LLAMA_DEFAULT_SEED: "pick a random seed".
constexpr uint32_t kRandomSeed = 0xFFFFFFFFu;

struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;   // tokens of history the penalty looks at (0: off)
  uint32_t seed = kRandomSeed;  // kRandomSeed: resolve with resolve_seed() before use
  void validate() const;        // throws Error(InvalidArgument)
};

// kRandomSeed -> a fresh seed from std::random_device; anything else is returned unchanged.
uint32_t resolve_seed(uint32_t seed);

struct Candidate {
  int32_t id;
  float logit;
  float p;  // filled by softmax(); meaningful only after it
};

// A working set of candidates. `sorted` records that items are in descending logit order, so
// later stages can skip sorting again (as llama.cpp's token_data_array does).
struct Candidates {
  std::vector<Candidate> items;
  bool sorted = false;

  void assign(std::span<const float> logits);  // reuses capacity
  size_t size() const { return items.size(); }
};

// ---- stages (each keeps at least one candidate) ----
// For every distinct token in `history`: logit > 0 -> logit / penalty, else logit * penalty.
// `scratch` is reused to deduplicate the history without allocating after warm-up.
void apply_repeat_penalty(Candidates& c, std::span<const int32_t> history, float penalty,
                          std::vector<int32_t>& scratch);
void apply_top_k(Candidates& c, int32_t k);         // sorts; keeps the k best
void softmax(Candidates& c);                        // sorts; fills p
void apply_top_p(Candidates& c, float p);           // smallest prefix with cumulative p >= p
void apply_min_p(Candidates& c, float min_p);       // keeps p >= min_p * p_max
void apply_temperature(Candidates& c, float temp);  // logit /= temp
int32_t argmax(std::span<const float> logits);      // lowest id among ties
// Draws from softmax(c) with a uniform variate u in [0, 1).
int32_t draw(Candidates& c, double u);

class Sampler {
 public:
  // `params.seed` must already be resolved (not kRandomSeed) for reproducible runs; a
  // kRandomSeed is resolved here.
  Sampler(const SamplerParams& params, int32_t n_vocab);

  // Picks the next token from one row of logits (size n_vocab). Does not record it: call
  // accept() with the token actually emitted (the prompt's tokens too, as llama.cpp does).
  // The fast chain: greedy is one argmax scan; top-k (0 < k < n_vocab) selects the k best in
  // one pass over the row in place (sample/select.h), so softmax, top-p, min-p and the draw
  // see only those k; the penalty overrides its few tokens instead of copying the row.
  // Identical to sample_reference() for the same seed, history and logits (no NaN).
  int32_t sample(std::span<const float> logits);
  // The plain chain, stage by stage over a full Candidates copy of the row (the stage
  // functions above): the reference sample() is tested against, and the benchmark's baseline.
  int32_t sample_reference(std::span<const float> logits);
  // Grammar-constrained (llama.cpp's order): draws from the unconstrained chain and returns
  // the token when `grammar` allows it (one walk of its bytes); only when it is rejected, masks
  // a copy of the row (grammar::TokenFilter::mask, a walk of the vocabulary trie) and draws
  // again from the allowed tokens, so the chain sees the renormalised distribution. Greedy +
  // grammar is therefore the most likely allowed token. kNoTokenAllowed when the grammar allows
  // none. Does not advance the grammar: call grammar.accept() with the token emitted.
  int32_t sample(std::span<const float> logits, grammar::TokenFilter& grammar);
  // Tokens sampled with a grammar, and how many of them needed the full mask.
  int64_t n_grammar_samples() const { return n_grammar_samples_; }
  int64_t n_grammar_masks() const { return n_grammar_masks_; }
  void accept(int32_t token);
  void reset();  // clears the history (new conversation); the RNG keeps its state

  const SamplerParams& params() const { return params_; }
  uint32_t seed() const { return params_.seed; }

 private:
  void check_row(std::span<const float> logits) const;
  void unroll_history();
  double next_uniform();
  int32_t finish_chain();

  SamplerParams params_;
  int32_t n_vocab_;
  std::mt19937 rng_;
  Candidates cand_;
  std::vector<int32_t> history_;  // ring of the last repeat_last_n accepted tokens
  size_t history_head_ = 0;
  size_t history_len_ = 0;
  std::vector<int32_t> hist_view_;  // the ring unrolled (reused)
  std::vector<int32_t> scratch_;
  std::vector<Candidate> overrides_;  // penalised tokens (sorted by id) and their logits
  std::vector<Candidate> sort_tmp_;   // the radix sort's second buffer (top-k off)
  std::vector<float> masked_;         // the row with the grammar's mask (when it was needed)
  int64_t n_grammar_samples_ = 0;
  int64_t n_grammar_masks_ = 0;
};

}  // namespace minfer
