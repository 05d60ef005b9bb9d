// SentencePiece-style tokenization (tokenizer.ggml.model = "llama").
//
// Text is cut into UTF-8 characters held in a doubly linked list; every adjacent pair whose
// concatenation is a token is queued with that token's score. The best-scoring pair (ties: the
// leftmost) is merged and its new neighbours are queued, until nothing merges. Stale queue
// entries are recognised by their length no longer matching. O(n log n) per fragment.
// Characters left that are not tokens fall back to byte tokens <0xNN>.
// When the vocabulary allows it, the text is first cut before each word-initial "▁" (see
// spm_cut_before_space), which changes nothing in the result but keeps the heaps small.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace minfer::tok {

namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t start;  // byte offset in the escaped text
  uint32_t len;    // 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t len;  // combined length when queued; a mismatch later means the entry is stale
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    // Max-heap on score, then min on position: the leftmost of equal scores merges first.
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

struct Scratch {
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
};

// Tokenizes one independent stretch of escaped text.
void spm_segment(const Tokenizer::Impl& t, std::string_view text, Scratch& s,
                 std::vector<TokenId>& out) {
  std::vector<Symbol>& sym = s.sym;
  sym.clear();
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(utf8_len_from_lead(static_cast<uint8_t>(text[i])), text.size() - i);
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({idx - 1, idx + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(n)});
    i += n;
  }
  sym.back().next = -1;

  std::vector<Bigram>& heap = s.heap;
  heap.clear();
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    const TokenId id = t.find(text.substr(sym[l].start, len));
    if (id == kNoToken) return;
    const float score = t.vocab.scores.empty() ? 0.0f : t.vocab.scores[id];
    heap.push_back({score, l, r, len});
    std::push_heap(heap.begin(), heap.end(), BigramOrder{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramOrder{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].start, sym[i].len);
    const TokenId id = t.find(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // Byte fallback: one <0xNN> token per byte; the unknown token if the vocab lacks one.
    for (char c : piece) {
      const TokenId b = t.byte_fallback_token[static_cast<uint8_t>(c)];
      if (b != kNoToken) {
        out.push_back(b);
      } else if (t.vocab.unk != kNoToken) {
        out.push_back(t.vocab.unk);
      }
    }
  }
}

}  // namespace

void spm_tokenize(const Tokenizer::Impl& t, std::string_view raw, bool add_prefix_space,
                  std::vector<TokenId>& out) {
  // SentencePiece sees spaces as U+2581 and, for Llama, a space in front of the text.
  std::string text;
  text.reserve(raw.size() + 4);
  if (add_prefix_space) text += kSpace;
  for (char c : raw) {
    if (c == ' ') {
      text += kSpace;
    } else {
      text.push_back(c);
    }
  }
  if (text.empty()) return;

  Scratch scratch;
  if (!t.spm_cut_before_space) {
    spm_segment(t, text, scratch, out);
    return;
  }
  // No token has "x▁" inside it (x not ▁), so no merge can cross such a point: the stretches
  // between them are independent and give the same ids as one pass, with small heaps.
  const std::string_view all(text);
  size_t seg = 0;
  for (size_t p = all.find(kSpace, 1); p != std::string_view::npos; p = all.find(kSpace, p + 3)) {
    if (p >= 3 && all.substr(p - 3, 3) == kSpace) continue;
    spm_segment(t, all.substr(seg, p - seg), scratch, out);
    seg = p;
  }
  spm_segment(t, all.substr(seg), scratch, out);
}

}  // namespace minfer::tok
