#include "model/traffic.h"

#include "common/dtype.h"

namespace minfer {
namespace {

bool is_weight(const Graph& g, NodeId id) {
  const Node* n = &g.node(id);
  while (n->op == Op::View && !n->src.empty()) n = &g.node(n->src[0]);
  return n->op == Op::Weight;
}

// Tokens of an activation laid out [.., n_tok] (heads may sit in ne[1]).
int64_t tokens_of(const Node& n, int64_t width) {
  return width > 0 ? n.n_elements() / width : 1;
}

}  // namespace

StepTraffic step_traffic(const Graph& g, int64_t n_kv) {
  StepTraffic t;
  for (const Node& n : g.nodes()) {
    if (n.op == Op::Input || n.op == Op::Weight || n.op == Op::View) continue;
    for (size_t i = 0; i < n.src.size(); ++i) {
      const NodeId s = n.src[i];
      if (s == kNoNode) continue;
      const Node& src = g.node(s);
      if (is_weight(g, s)) {
        if (n.op == Op::GetRows && i == 0) {
          const int64_t rows = g.node(n.src[1]).n_elements();
          t.weights += row_size(src.type, src.ne[0]) * static_cast<uint64_t>(rows);
        } else {
          t.weights += src.n_bytes();
        }
        continue;
      }
      // Attention's K/V operand is the cache, counted below; its other inputs are small.
      if (n.op == Op::Attention && i == 1) continue;
      t.activations += src.n_bytes();
    }
    if (n.op == Op::Attention) {
      const int64_t kv_embd = int64_t{n.p.n_head_kv} * n.p.head_dim;
      const int64_t n_tok = tokens_of(n, int64_t{n.p.n_head} * n.p.head_dim);
      const uint64_t row = row_size(n.p.kv_type_k, kv_embd) + row_size(n.p.kv_type_v, kv_embd);
      // A sliding-window layer (gemma) reads at most its window's rows.
      const int64_t rows = n.p.window > 0 && n.p.window < n_kv ? n.p.window : n_kv;
      t.kv += row * static_cast<uint64_t>(rows) * static_cast<uint64_t>(n_tok);
      t.activations += n.n_bytes();
    } else if (n.op == Op::KvStore) {
      // Output stands for the whole K region; what is written is one K and V row per token.
      const Node& k = g.node(n.src[0]);
      const int64_t n_tok = g.node(n.src[2]).n_elements();
      const int64_t kv_embd = k.n_elements() / (n_tok > 0 ? n_tok : 1);
      t.activations += (row_size(n.p.kv_type_k, kv_embd) + row_size(n.p.kv_type_v, kv_embd)) *
                       static_cast<uint64_t>(n_tok);
    } else {
      t.activations += n.n_bytes();
    }
  }
  return t;
}

}  // namespace minfer
