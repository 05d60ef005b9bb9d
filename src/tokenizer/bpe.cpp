// BPE (tokenizer.ggml.model = "gpt2", byte-level; or "gemma4", raw UTF-8).
//
// The pre-tokenizer's regexes cut the text into words. Each word starts as one symbol per byte
// (the token of that byte's byte-level character) or, for gemma4, per UTF-8 character (its
// token, with spaces written "▁"); adjacent pairs with a merge rule are queued
// by rank, and the lowest rank (ties: leftmost) merges first, re-queuing the new neighbours.
// Symbols carry token ids, so a merge is a table lookup on the id pair rather than a string
// concatenation. O(n log n) per word. No per-word cache: the state stays immutable and
// thread-safe, and the merge table lookup is already cheap. A gemma4 symbol left without a
// token falls back to one <0xNN> token per byte, as in SentencePiece.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace minfer::tok {

namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  TokenId id;      // kNoToken: merged into its left neighbour, or a character without a token
  uint32_t start;  // bytes of the word this symbol covers (for the byte fallback)
  uint32_t len;
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

// Unknown bytes: the byte-fallback token (gemma4) or the unknown token; nothing if neither.
void emit_bytes(const Tokenizer::Impl& t, std::string_view bytes, std::vector<TokenId>& out) {
  for (char c : bytes) {
    const TokenId b =
        t.vocab.byte_level ? kNoToken : t.byte_fallback_token[static_cast<uint8_t>(c)];
    if (b != kNoToken) {
      out.push_back(b);
    } else if (t.vocab.unk != kNoToken) {
      out.push_back(t.vocab.unk);  // a byte without a token (incomplete vocab)
    }
  }
}

// One symbol per byte (byte-level) or per UTF-8 character (gemma4).
void init_symbols(const Tokenizer::Impl& t, std::string_view word, std::vector<Symbol>& sym) {
  sym.clear();
  for (size_t i = 0; i < word.size();) {
    const auto idx = static_cast<int32_t>(sym.size());
    size_t n = 1;
    TokenId id;
    if (t.vocab.byte_level) {
      id = t.bpe_byte_token[static_cast<uint8_t>(word[i])];
    } else {
      n = std::min(utf8_len_from_lead(static_cast<uint8_t>(word[i])), word.size() - i);
      id = t.find(word.substr(i, n));
    }
    sym.push_back({idx - 1, idx + 1, id, static_cast<uint32_t>(i), static_cast<uint32_t>(n)});
    i += n;
  }
  sym.back().next = -1;
}

void bpe_word(const Tokenizer::Impl& t, std::string_view word, std::vector<Symbol>& sym,
              std::vector<Bigram>& heap, std::vector<TokenId>& out) {
  init_symbols(t, word, sym);
  if (sym.size() == 1) {
    if (sym[0].id != kNoToken) {
      out.push_back(sym[0].id);
    } else {
      emit_bytes(t, word, out);
    }
    return;
  }

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
    l.len += r.len;
    r.id = kNoToken;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].id != kNoToken) {
      out.push_back(sym[i].id);
    } else {
      emit_bytes(t, word.substr(sym[i].start, sym[i].len), out);
    }
  }
}

}  // namespace

void bpe_tokenize(const Tokenizer::Impl& t, std::string_view raw, std::vector<TokenId>& out) {
  std::string escaped;
  std::string_view text = raw;
  if (!t.vocab.byte_level) {
    // gemma4's normalizer writes every space as "▁" before anything else.
    escaped.reserve(raw.size() + raw.size() / 4);
    for (char c : raw) {
      if (c == ' ') {
        escaped += "\xE2\x96\x81";
      } else {
        escaped.push_back(c);
      }
    }
    text = escaped;
  }
  std::vector<std::string_view> words;
  t.splitter->split(text, words);
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
  std::string encoded;
  const ByteLevelTables& bl = byte_level_tables();
  for (std::string_view w : words) {
    // Llama 3: a whole pre-token that is a token is taken as is, even if merges would build it
    // differently. gemma4 does the same for runs of newlines only (its merges never join "\n").
    const bool whole =
        t.vocab.ignore_merges || (t.vocab.pre == PreTokenizer::Gemma4 &&
                                  w.find_first_not_of('\n') == std::string_view::npos);
    if (whole) {
      std::string_view key = w;
      if (t.vocab.byte_level) {
        encoded.clear();
        for (char c : w) encoded += bl.byte_to_utf8[static_cast<uint8_t>(c)];
        key = encoded;
      }
      const TokenId id = t.find(key);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
    }
    bpe_word(t, w, sym, heap, out);
  }
}

}  // namespace minfer::tok
