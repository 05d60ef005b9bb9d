// Which tokens a grammar allows next: the bridge between a Matcher (bytes) and a sampler
// (token ids).
//
// VocabIndex is the vocabulary as the grammar sees it, built once per tokenizer and shared by
// every generation: each token's bytes (its piece) and whether it ends generation, plus a
// byte trie of the pieces in pre-order (a node's subtree is the index range [node + 1, end)).
// Tokens with an empty piece (control tokens) are never allowed; end-of-generation tokens are
// allowed exactly when the grammar can end.
//
// TokenFilter holds one generation's Matcher. allows(t) walks t's bytes (the sampler's fast
// path: check the token it drew). mask() walks the trie once with the matcher, pruning a
// subtree at the first byte no stack accepts, so shared prefixes are matched once and rejected
// prefixes cost nothing below them; the walk steps over interned stack sets
// (Matcher::step_set), so an ASCII byte from a set seen before is one table lookup.
//
// Ownership: TokenFilter shares the Grammar and the VocabIndex (shared_ptr) and owns its
// Matcher and scratch. Thread safety: VocabIndex is immutable (share it across threads);
// TokenFilter is one per generation. Failure: none (accept() of a rejected token returns
// false and changes nothing). Cost: VocabIndex ~20 bytes per trie node (151,936 tokens: a few
// MB, tens of ms to build); allows() is O(bytes of the token); mask() is O(visited trie nodes
// x live stacks) plus one pass over the logits (docs/GRAMMAR.md has figures).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/matcher.h"

namespace minfer::grammar {

class VocabIndex {
 public:
  // pieces[id] = token id's bytes; eog_ids may come in any order.
  VocabIndex(std::vector<std::string> pieces, std::span<const int32_t> eog_ids);

  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  std::string_view piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  bool is_eog(int32_t id) const { return eog_[static_cast<size_t>(id)] != 0; }
  size_t n_trie_nodes() const { return nodes_.size(); }

 private:
  friend class TokenFilter;
  struct TrieNode {
    uint32_t end;        // one past this node's subtree
    uint32_t tok_first;  // tokens whose piece ends here: trie_tokens_[tok_first, + tok_count)
    uint32_t tok_count;
    uint8_t byte;
  };
  std::vector<std::string> pieces_;
  std::vector<uint8_t> eog_;
  std::vector<int32_t> eog_ids_;
  std::vector<TrieNode> nodes_;  // [0] is the root (empty prefix)
  std::vector<int32_t> trie_tokens_;
  size_t max_depth_ = 0;
};

class TokenFilter {
 public:
  TokenFilter(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabIndex> vocab);

  // Whether the grammar allows `token` next (ids outside the vocabulary: no).
  bool allows(int32_t token);
  // Sets the logit of every token the grammar rejects to -inf; returns how many remain with a
  // logit above -inf (0: no token can continue, e.g. the grammar is complete and the end
  // tokens are missing or banned).
  size_t mask(std::span<float> logits);
  // Advances past `token`; false (nothing changes) when the grammar rejects it. An
  // end-of-generation token is accepted only when the grammar is complete.
  bool accept(int32_t token);
  // Advances past `text` (bytes that did not come as tokens through this filter, e.g. the
  // trigger of a lazy grammar); false (nothing changes) when the grammar rejects them.
  bool accept_text(std::string_view text) { return m_.accept(text); }
  bool is_complete() const { return m_.is_complete(); }
  bool can_continue() const { return m_.can_continue(); }
  void reset() { m_.reset(); }
  const VocabIndex& vocab() const { return *v_; }

 private:
  void walk(uint32_t node, uint32_t sid, Partial p);

  std::shared_ptr<const VocabIndex> v_;
  Matcher m_;
  std::vector<uint8_t> allowed_;
};

}  // namespace minfer::grammar
