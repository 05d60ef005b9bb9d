// Byte-level BPE (tokenizer.ggml.model = "gpt2").
//
// The pre-tokenizer's regexes cut the text into words. Each word starts as one symbol per byte
// (the token of that byte's byte-level character); adjacent pairs with a merge rule are queued
// by rank, and the lowest rank (ties: leftmost) merges first, re-queuing the new neighbours.
// Symbols carry token ids, so a merge is a table lookup on the id pair rather than a string
// concatenation. O(n log n) per word. No per-word cache: the state stays immutable and
// thread-safe, and the merge table lookup is already cheap.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace minfer::tok {

namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  TokenId id;  // kNoToken once merged into its left neighbour
};

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  TokenId left_id;
  TokenId right_id;
  TokenId result;
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    // Min-heap on rank, then on position.
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

void emit_symbol(const Tokenizer::Impl& t, TokenId id, std::vector<TokenId>& out) {
  if (id != kNoToken) {
    out.push_back(id);
  } else if (t.vocab.unk != kNoToken) {
    out.push_back(t.vocab.unk);  // a byte without a byte-level token (incomplete vocab)
  }
}

void bpe_word(const Tokenizer::Impl& t, std::string_view word, std::vector<Symbol>& sym,
              std::vector<Bigram>& heap, std::vector<TokenId>& out) {
  if (word.size() == 1) {
    emit_symbol(t, t.bpe_byte_token[static_cast<uint8_t>(word[0])], out);
    return;
  }
  sym.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    const auto idx = static_cast<int32_t>(i);
    sym.push_back({idx - 1, idx + 1, t.bpe_byte_token[static_cast<uint8_t>(word[i])]});
  }
  sym.back().next = -1;

  heap.clear();
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const MergeTable::Merge* m = t.merges.find(sym[l].id, sym[r].id);
    if (!m) return;
    heap.push_back({m->rank, l, r, sym[l].id, sym[r].id, m->result});
    std::push_heap(heap.begin(), heap.end(), BigramOrder{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramOrder{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    // Stale when either side merged since queuing: ids only ever grow into longer tokens.
    if (l.id != b.left_id || r.id != b.right_id || l.next != b.right) continue;
    l.id = b.result;
    r.id = kNoToken;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) emit_symbol(t, sym[i].id, out);
}

}  // namespace

void bpe_tokenize(const Tokenizer::Impl& t, std::string_view text, std::vector<TokenId>& out) {
  std::vector<std::string_view> words;
  t.splitter->split(text, words);
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
  std::string encoded;
  const ByteLevelTables& bl = byte_level_tables();
  for (std::string_view w : words) {
    if (t.vocab.ignore_merges) {
      // Llama 3: a whole pre-token that is a token is taken as is, even if merges would
      // build it differently.
      encoded.clear();
      for (char c : w) encoded += bl.byte_to_utf8[static_cast<uint8_t>(c)];
      const TokenId id = t.find(encoded);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
    }
    bpe_word(t, w, sym, heap, out);
  }
}

}  // namespace minfer::tok
