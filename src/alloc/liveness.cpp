#include "alloc/liveness.h"

#include <algorithm>

#include "common/error.h"

namespace minfer {

std::string_view storage_kind_name(StorageKind k) {
  switch (k) {
    case StorageKind::None:
      return "none";
    case StorageKind::Weight:
      return "weight";
    case StorageKind::Own:
      return "own";
    case StorageKind::View:
      return "view";
    case StorageKind::InPlace:
      return "inplace";
    case StorageKind::KvRegion:
      return "kv";
  }
  return "?";
}

bool op_has_side_effects(Op op) {
  return op == Op::KvStore || op == Op::QkvBiasRopeStore;
}

bool Liveness::executes(NodeId id) const {
  const StorageKind k = kind[static_cast<size_t>(id)];
  return k == StorageKind::Own || k == StorageKind::InPlace || k == StorageKind::KvRegion;
}

const LiveInterval* Liveness::interval_for(NodeId id) const {
  const NodeId r = root[static_cast<size_t>(id)];
  if (r == kNoNode) return nullptr;
  const int32_t iv = interval_of[static_cast<size_t>(r)];
  return iv < 0 ? nullptr : &intervals[static_cast<size_t>(iv)];
}

namespace {

size_t u(NodeId id) {
  return static_cast<size_t>(id);
}

bool is_contiguous_view(const Node& n) {
  return n.p.view_row_stride == 0 || n.p.view_row_stride == n.ne[0];
}

// Byte size of one element of a view's source (views into f32 weights, or activations).
uint64_t elem_bytes(const Node& src) {
  if (src.op != Op::Weight) return 4;
  const TypeTraits& t = type_traits(src.type);
  return t.quantized ? 0 : t.type_size;  // quantized views must have offset 0 (builder checks)
}

// The in-place rule of the header comment. Returns the owner to alias, or kNoNode.
NodeId inplace_owner(const Graph& g, const Liveness& lv, const std::vector<uint8_t>& pinned,
                     NodeId id) {
  const Node& n = g.node(id);
  if (n.src.empty()) return kNoNode;
  const NodeId src0 = n.src[0];
  if (lv.len[u(src0)] != n.n_bytes()) return kNoNode;
  NodeId x = src0;
  while (true) {
    if (lv.n_consumers[u(x)] != 1 || pinned[u(x)]) return kNoNode;
    const StorageKind k = lv.kind[u(x)];
    if (k == StorageKind::View) {
      if (!is_contiguous_view(g.node(x))) return kNoNode;
      x = g.node(x).src[0];
    } else if (k == StorageKind::InPlace) {
      x = g.node(x).src[0];
    } else if (k == StorageKind::Own) {
      break;
    } else {
      return kNoNode;  // weight, KV region
    }
  }
  return g.node(x).backend == n.backend ? x : kNoNode;
}

// 1. Deadness, backwards: consumers are always built after their sources.
std::vector<uint8_t> live_nodes(const Graph& g, const std::vector<uint8_t>& pinned) {
  const auto n = static_cast<int32_t>(g.size());
  std::vector<uint8_t> live(u(n), 0);
  for (NodeId i = n - 1; i >= 0; --i) {
    const Node& nd = g.node(i);
    if (nd.op == Op::Weight) continue;
    if (pinned[u(i)] || op_has_side_effects(nd.op)) live[u(i)] = 1;
    if (!live[u(i)]) continue;
    for (NodeId s : nd.src) {
      MINFER_ASSERT(s < i, "liveness: graph not in build order (validate() first)");
      live[u(s)] = 1;
    }
  }
  return live;
}

// 2. Consumer edges and direct last uses, from live consumers only (dead ones never run).
void count_uses(const Graph& g, const std::vector<uint8_t>& live,
                const std::vector<uint8_t>& pinned, Liveness& lv) {
  const int32_t n = lv.n_steps;
  for (NodeId i = 0; i < n; ++i) {
    if (!live[u(i)]) continue;
    lv.last_use[u(i)] = i;
    for (NodeId s : g.node(i).src) {
      ++lv.n_consumers[u(s)];
      lv.last_use[u(s)] = std::max(lv.last_use[u(s)], i);
    }
  }
  for (NodeId i = 0; i < n; ++i)
    if (pinned[u(i)]) lv.last_use[u(i)] = n;
}

// 3. Storage kinds, roots and windows, in build order (sources are decided first).
void assign_storage(const Graph& g, const std::vector<uint8_t>& live,
                    const std::vector<uint8_t>& pinned, Liveness& lv) {
  const int32_t n = lv.n_steps;
  for (NodeId i = 0; i < n; ++i) {
    const Node& nd = g.node(i);
    if (nd.op == Op::Weight) {
      lv.kind[u(i)] = StorageKind::Weight;
      lv.root[u(i)] = i;
      lv.len[u(i)] = nd.n_bytes();
      continue;
    }
    if (!live[u(i)]) continue;
    lv.first[u(i)] = nd.op == Op::Input ? 0 : i;
    if (nd.op == Op::View) {
      const NodeId s = nd.src[0];
      lv.first[u(i)] = lv.first[u(s)];
      lv.kind[u(i)] = StorageKind::View;
      lv.root[u(i)] = lv.root[u(s)];
      lv.offset[u(i)] =
          lv.offset[u(s)] + static_cast<uint64_t>(nd.p.view_offset) * elem_bytes(g.node(s));
      lv.len[u(i)] = nd.n_bytes();
      continue;
    }
    lv.len[u(i)] = nd.n_bytes();
    if (nd.op == Op::KvStore) {
      lv.kind[u(i)] = StorageKind::KvRegion;
      lv.root[u(i)] = i;
      continue;
    }
    if (op_is_inplace(nd.op)) {
      const NodeId owner = inplace_owner(g, lv, pinned, i);
      if (owner != kNoNode) {
        lv.kind[u(i)] = StorageKind::InPlace;
        lv.root[u(i)] = owner;
        lv.offset[u(i)] = lv.offset[u(nd.src[0])];
        continue;
      }
    }
    lv.kind[u(i)] = StorageKind::Own;
    lv.root[u(i)] = i;
  }
}

// 4. One interval per owner; views and aliases extend it through their own readers.
void build_intervals(const Graph& g, const std::vector<uint8_t>& pinned, Liveness& lv) {
  const int32_t n = lv.n_steps;
  for (NodeId i = 0; i < n; ++i) {
    if (lv.kind[u(i)] != StorageKind::Own) continue;
    LiveInterval iv;
    iv.root = i;
    iv.backend = g.node(i).backend;
    iv.first = lv.first[u(i)];
    iv.last = lv.last_use[u(i)];
    iv.bytes = lv.len[u(i)];
    iv.pinned = pinned[u(i)] != 0;
    lv.interval_of[u(i)] = static_cast<int32_t>(lv.intervals.size());
    lv.intervals.push_back(iv);
  }
  for (NodeId i = 0; i < n; ++i) {
    const StorageKind k = lv.kind[u(i)];
    if (k != StorageKind::View && k != StorageKind::InPlace) continue;
    const int32_t idx = lv.interval_of[u(lv.root[u(i)])];
    if (idx < 0) continue;  // view of a weight or of a KV region
    LiveInterval& iv = lv.intervals[u(idx)];
    iv.last = std::max(iv.last, lv.last_use[u(i)]);
    iv.pinned = iv.pinned || pinned[u(i)];
  }
}

}  // namespace

Liveness compute_liveness(const Graph& g) {
  const auto n = static_cast<int32_t>(g.size());
  Liveness lv;
  lv.n_steps = n;
  lv.kind.assign(u(n), StorageKind::None);
  lv.root.assign(u(n), kNoNode);
  lv.offset.assign(u(n), 0);
  lv.len.assign(u(n), 0);
  lv.first.assign(u(n), -1);
  lv.last_use.assign(u(n), -1);
  lv.n_consumers.assign(u(n), 0);
  lv.interval_of.assign(u(n), -1);

  std::vector<uint8_t> pinned(u(n), 0);
  for (NodeId o : g.outputs()) pinned[u(o)] = 1;
  for (NodeId i : g.inputs()) pinned[u(i)] = 1;

  const std::vector<uint8_t> live = live_nodes(g, pinned);
  count_uses(g, live, pinned, lv);
  assign_storage(g, live, pinned, lv);
  build_intervals(g, pinned, lv);
  return lv;
}

std::string Liveness::to_string(const Graph& g) const {
  std::string out = fmt::format("liveness: {} steps, {} intervals\n", n_steps, intervals.size());
  for (size_t i = 0; i < kind.size(); ++i) {
    const Node& nd = g.node(static_cast<NodeId>(i));
    out += fmt::format("  {:4} {:<24} {:<20} {:<7}", i, nd.name, op_name(nd.op),
                       storage_kind_name(kind[i]));
    if (kind[i] == StorageKind::View || kind[i] == StorageKind::InPlace) {
      out += fmt::format(" -> {} +{}B", root[i], offset[i]);
    }
    if (interval_of[i] >= 0) {
      const LiveInterval& iv = intervals[static_cast<size_t>(interval_of[i])];
      out += fmt::format(" [{}, {}] {}B {}{}", iv.first, iv.last, iv.bytes,
                         backend_name(iv.backend), iv.pinned ? " pinned" : "");
    }
    out += fmt::format(" consumers={}\n", n_consumers[i]);
  }
  return out;
}

}  // namespace minfer
