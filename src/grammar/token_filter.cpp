#include "grammar/token_filter.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "common/error.h"

namespace minfer::grammar {

VocabIndex::VocabIndex(std::vector<std::string> pieces, std::span<const int32_t> eog_ids)
    : pieces_(std::move(pieces)), eog_(pieces_.size(), 0) {
  for (int32_t id : eog_ids)
    if (id >= 0 && static_cast<size_t>(id) < pieces_.size() && !eog_[size_t(id)]) {
      eog_[size_t(id)] = 1;
      eog_ids_.push_back(id);
    }
  std::vector<int32_t> order;
  for (size_t id = 0; id < pieces_.size(); ++id)
    if (!eog_[id] && !pieces_[id].empty()) order.push_back(static_cast<int32_t>(id));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return std::tie(pieces_[size_t(a)], a) < std::tie(pieces_[size_t(b)], b);
  });
  // Pre-order construction from the sorted pieces: `path` holds the nodes of the previous
  // piece's prefix; a node's subtree ends where the walk leaves it.
  nodes_.push_back({0, 0, 0, 0});
  std::vector<uint32_t> path{0};
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view s = pieces_[size_t(id)];
    const size_t lcp = static_cast<size_t>(
        std::mismatch(prev.begin(), prev.end(), s.begin(), s.end()).first - prev.begin());
    while (path.size() > lcp + 1) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      nodes_.push_back({0, 0, 0, static_cast<uint8_t>(s[d])});
      path.push_back(static_cast<uint32_t>(nodes_.size() - 1));
    }
    TrieNode& n = nodes_[path.back()];
    if (n.tok_count == 0) n.tok_first = static_cast<uint32_t>(trie_tokens_.size());
    ++n.tok_count;  // equal pieces are adjacent in `order`, so a node's tokens are contiguous
    trie_tokens_.push_back(id);
    max_depth_ = std::max(max_depth_, s.size());
    prev = s;
  }
  for (; !path.empty(); path.pop_back()) nodes_[path.back()].end = uint32_t(nodes_.size());
}

TokenFilter::TokenFilter(std::shared_ptr<const Grammar> grammar,
                         std::shared_ptr<const VocabIndex> vocab)
    : v_(std::move(vocab)), m_(std::move(grammar)) {
  MINFER_ASSERT(v_);
}

bool TokenFilter::allows(int32_t token) {
  if (token < 0 || token >= v_->n_vocab()) return false;
  if (v_->is_eog(token)) return m_.is_complete();
  const std::string_view p = v_->piece(token);
  return !p.empty() && m_.check(p);
}

bool TokenFilter::accept(int32_t token) {
  if (token < 0 || token >= v_->n_vocab()) return false;
  if (v_->is_eog(token)) return m_.is_complete();
  const std::string_view p = v_->piece(token);
  return !p.empty() && m_.accept(p);
}

void TokenFilter::walk(uint32_t node, uint32_t sid, Partial p) {
  const auto& nodes = v_->nodes_;
  for (uint32_t c = node + 1; c < nodes[node].end; c = nodes[c].end) {
    Partial np;
    const int32_t next = m_.step_set(sid, p, nodes[c].byte, np);
    if (next == Matcher::kDeadSet) continue;  // nothing under this prefix can match
    for (uint32_t k = nodes[c].tok_first; k < nodes[c].tok_first + nodes[c].tok_count; ++k)
      allowed_[size_t(v_->trie_tokens_[k])] = 1;
    if (nodes[c].end > c + 1) walk(c, static_cast<uint32_t>(next), np);
  }
}

size_t TokenFilter::mask(std::span<float> logits) {
  MINFER_ASSERT(logits.size() == static_cast<size_t>(v_->n_vocab()));
  allowed_.assign(logits.size(), 0);
  m_.trim_set_cache();
  walk(0, m_.set_id(m_.set()), m_.partial());
  if (m_.is_complete())
    for (int32_t id : v_->eog_ids_) allowed_[size_t(id)] = 1;
  size_t n = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!allowed_[i])
      logits[i] = -INFINITY;
    else if (logits[i] > -INFINITY)  // a token banned before (logit_bias) stays banned
      ++n;
  }
  return n;
}

}  // namespace minfer::grammar
