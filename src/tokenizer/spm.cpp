// SentencePiece-style tokenization (tokenizer.ggml.model = "llama").
//
// Text is cut into UTF-8 characters held in a doubly linked list; every adjacent pair whose
// concatenation is a token is queued with that token's score. The best-scoring pair (ties: the
// leftmost) is merged and its new neighbours are queued, until nothing merges. Stale queue
// entries are recognised by their length no longer matching. O(n log n) per fragment.
// Characters left that are not tokens fall back to byte tokens <0xNN>.
#include <queue>

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

void spm_tokenize(const Tokenizer::Impl& t, std::string_view raw, bool add_prefix_space,
                  std::vector<TokenId>& out) {
  // SentencePiece sees spaces as U+2581 and, for Llama, a space in front of the text.
  std::string text;
  text.reserve(raw.size() + 4);
  if (add_prefix_space) text += "\xE2\x96\x81";
  for (char c : raw) {
    if (c == ' ') {
      text += "\xE2\x96\x81";
    } else {
      text.push_back(c);
    }
  }
  if (text.empty()) return;

  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(utf8_len_from_lead(static_cast<uint8_t>(text[i])), text.size() - i);
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({idx - 1, idx + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(n)});
    i += n;
  }
  sym.back().next = -1;

  std::vector<Bigram> storage;
  storage.reserve(sym.size() * 2);
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue(BigramOrder{},
                                                                      std::move(storage));
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    const TokenId id = t.find(std::string_view(text).substr(sym[l].start, len));
    if (id == kNoToken) return;
    const float score = t.vocab.scores.empty() ? 0.0f : t.vocab.scores[id];
    queue.push({score, l, r, len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
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
    const std::string_view piece = std::string_view(text).substr(sym[i].start, sym[i].len);
    const TokenId id = t.find(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // Byte fallback: one <0xNN> token per byte; the unknown token if the vocab lacks one.
    for (char c : piece) {
      const TokenId b = t.spm_byte_token[static_cast<uint8_t>(c)];
      if (b != kNoToken) {
        out.push_back(b);
      } else if (t.vocab.unk != kNoToken) {
        out.push_back(t.vocab.unk);
      }
    }
  }
}

}  // namespace minfer::tok
