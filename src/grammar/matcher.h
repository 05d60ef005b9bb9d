// Incremental matching of bytes against a Grammar.
//
// A pushdown recogniser in llama.cpp's design: the state is a set of stacks of positions in
// the grammar, each stack's top a character element still to match (or the empty stack:
// "the grammar may end here"); a code point advances every stack whose top matches it and
// expands rule references until each top is a character element again. Bytes are decoded as
// UTF-8 on the way, and a code point may be split across calls (tokens): the decoder's partial
// state is part of the matcher's state, and a partial sequence is kept only while some stack
// may still match a code point that starts with those bytes.
//
// Unlike llama.cpp, stacks are hash-consed: a stack is a node id (position, parent node), so a
// set of stacks is a small sorted vector of ids, equal stacks are equal ids, and the expansion
// after a stack's top matches is computed once per node and memoised. A tail position (a rule
// reference at the end of an alternative) pushes no continuation, so `x*` (right-recursive)
// keeps the stacks' depth constant.
//
// Ownership: a Matcher owns its node pool and memos and shares the Grammar. Thread safety:
// none (one per generation). Failure: rejected input returns false and leaves the state as
// it was. Cost: a code point is a lookup per live stack once its node was seen; the pool grows
// with the distinct stacks met and is compacted to the live ones past kCompactNodes (at an
// accept, so a long generation's memory stays bounded).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace minfer::grammar {

// A UTF-8 sequence begun but not finished: the bits so far, the bytes still to come and the
// sequence's continuation bytes in all (which bounds the code point from below: no overlongs).
struct Partial {
  uint32_t value = 0;
  uint8_t remain = 0;
  uint8_t len = 0;
};

enum class Step : uint8_t { Dead, Same, New };

class Matcher {
 public:
  using Set = std::vector<uint32_t>;  // sorted node ids; 0 = the empty stack (may end here)

  // `compact_nodes`: the pool size past which an accept compacts it (tests lower it).
  explicit Matcher(std::shared_ptr<const Grammar> grammar, size_t compact_nodes = kCompactNodes);

  // Feeds `bytes`; false (state unchanged) when the grammar rejects them.
  bool accept(std::string_view bytes);
  // Whether accept(bytes) would succeed, without changing the state.
  bool check(std::string_view bytes);
  // The input so far is a complete sentence of the grammar.
  bool is_complete() const { return partial_.remain == 0 && !set_.empty() && set_[0] == 0; }
  // Some longer input may still match.
  bool can_continue() const { return !set_.empty() && set_.back() != 0; }
  void reset();

  // ---- the step the vocabulary walk (token_filter.h) drives byte by byte ----
  // One byte from (`in`, `p`): Dead (rejected), Same (a code point is still partial: the set
  // is unchanged, `np` updated) or New (`out` holds the new set).
  Step step(const Set& in, Partial p, uint8_t byte, Partial& np, Set& out);
  const Set& set() const { return set_; }
  Partial partial() const { return partial_; }
  size_t n_nodes() const { return nodes_.size(); }

  // The same step over interned sets, for walks that meet the same sets again and again (the
  // vocabulary trie): a byte starting a character is a table lookup once seen, a finished
  // multi-byte character a hash lookup. Returns the new
  // set's id, `sid` itself while a code point is partial, or kDeadSet. Ids stay valid until
  // clear_set_cache() or a compaction.
  static constexpr int32_t kDeadSet = -1;
  uint32_t set_id(const Set& s);
  int32_t step_set(uint32_t sid, Partial p, uint8_t byte, Partial& np);
  // Drops the interned sets and their transitions past kMaxCachedSets sets or
  // kMaxCachedCodePoints multi-byte transitions (call between walks): at most ~16 MB + ~64 MB.
  void trim_set_cache();
  static constexpr size_t kMaxCachedSets = size_t{1} << 14;
  static constexpr size_t kMaxCachedCodePoints = size_t{1} << 20;

  static constexpr size_t kCompactNodes = size_t{1} << 20;

 private:
  struct Node {
    uint32_t pos;     // index in Grammar::elems: a Chars or a Rule element
    uint32_t parent;  // the stack below (0: none)
  };
  struct Memo {
    uint32_t off = kNone, len = 0;
  };
  static constexpr uint32_t kNone = 0xFFFFFFFFu;

  uint32_t intern(uint32_t pos, uint32_t parent);
  void expand(uint32_t pos, uint32_t parent, Set& out);
  void closure_of(uint32_t id, Set& out);
  std::span<const uint32_t> after(uint32_t id);
  void advance(const Set& in, uint32_t cp, Set& out);
  bool feasible(const Set& in, Partial p) const;
  bool run(std::string_view bytes, bool commit);
  void compact();

  std::shared_ptr<const Grammar> g_;
  size_t compact_nodes_;
  std::vector<Node> nodes_;  // [0] is the empty stack
  std::unordered_map<uint64_t, uint32_t> index_;
  std::vector<Memo> closure_, after_;  // per node: its expansion, and after its top matched
  std::vector<uint32_t> memo_data_;
  Set set_;
  Partial partial_;
  Set tmp_[2];
  // Interned sets and their ASCII transitions (kUnknown: not computed yet).
  static constexpr int32_t kUnknown = -2;
  std::vector<Set> sets_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> set_index_;  // hash -> ids
  // Per set: an ASCII byte's next set, or whether a lead byte may start a character here.
  std::vector<std::array<int32_t, 256>> byte_next_;
  std::unordered_map<uint64_t, int32_t> cp_next_;  // (set, length, code point) -> set
  Set step_out_;
};

}  // namespace minfer::grammar
