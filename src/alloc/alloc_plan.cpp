// AllocPlan queries and dumps (text for humans and tests, JSON for tools).
#include <nlohmann/json.hpp>

#include "alloc/allocator.h"
#include "common/error.h"

namespace minfer {

NodeId AllocPlan::alias_of(NodeId id) const {
  const StorageKind k = live.kind[static_cast<size_t>(id)];
  if (k != StorageKind::View && k != StorageKind::InPlace) return kNoNode;
  return live.root[static_cast<size_t>(id)];
}

const StagingBuf* AllocPlan::staging_for(NodeId src, BackendKind dst) const {
  for (const StagingBuf& s : staging)
    if (s.src == src && s.dst == dst) return &s;
  return nullptr;
}

namespace {
std::string buf_str(const BufRef& b) {
  if (!b.valid()) return "-";
  return fmt::format("{}#{}+{}:{}", backend_name(b.backend), b.id, b.offset, b.len);
}
}  // namespace

std::string AllocPlan::to_string(const Graph& g) const {
  std::string out = fmt::format(
      "alloc plan #{}: {} nodes, {} intervals in {} buffers, {} in-place, {} views, "
      "naive {} B, kv {} B, staging {} B\n",
      generation, node_buf.size(), stats.n_intervals, stats.n_buffers, stats.n_inplace,
      stats.n_views, stats.naive_bytes, stats.kv_bytes, stats.staging_bytes);
  for (size_t b = 0; b < kNumBackends; ++b) {
    out += fmt::format("  {}: plan {} B, pool {} B\n", backend_name(static_cast<BackendKind>(b)),
                       stats.plan_bytes[b], stats.pool_bytes[b]);
  }
  for (size_t i = 0; i < node_buf.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    out += fmt::format("  {:4} {:<24} {:<20} {:<7} {}", i, n.name, op_name(n.op),
                       storage_kind_name(live.kind[i]), buf_str(node_buf[i]));
    const int32_t iv = live.interval_of[i];
    if (iv >= 0) {
      const LiveInterval& l = live.intervals[static_cast<size_t>(iv)];
      out += fmt::format(" [{}, {}] class {}", l.first, l.last,
                         interval_class[static_cast<size_t>(iv)]);
    }
    const NodeId a = alias_of(static_cast<NodeId>(i));
    if (a != kNoNode) out += fmt::format(" alias of {}", a);
    out += "\n";
  }
  for (const StagingBuf& s : staging) {
    out += fmt::format("  staging: node {} -> {} {}\n", s.src, backend_name(s.dst), buf_str(s.buf));
  }
  return out;
}

std::string AllocPlan::to_json(const Graph& g) const {
  auto buf_json = [](const BufRef& b) -> nlohmann::json {
    if (!b.valid()) return nullptr;
    return {
        {"backend", backend_name(b.backend)}, {"id", b.id}, {"offset", b.offset}, {"len", b.len}};
  };
  nlohmann::json j;
  j["generation"] = generation;
  j["n_nodes"] = node_buf.size();
  j["stats"] = {{"n_intervals", stats.n_intervals},    {"n_buffers", stats.n_buffers},
                {"n_inplace", stats.n_inplace},        {"n_views", stats.n_views},
                {"naive_bytes", stats.naive_bytes},    {"kv_bytes", stats.kv_bytes},
                {"staging_bytes", stats.staging_bytes}};
  for (size_t b = 0; b < kNumBackends; ++b) {
    const std::string name(backend_name(static_cast<BackendKind>(b)));
    j["stats"]["plan_bytes"][name] = stats.plan_bytes[b];
    j["stats"]["pool_bytes"][name] = stats.pool_bytes[b];
  }
  auto& nodes = j["nodes"] = nlohmann::json::array();
  for (size_t i = 0; i < node_buf.size(); ++i) {
    const NodeId a = alias_of(static_cast<NodeId>(i));
    nodes.push_back({{"id", i},
                     {"name", g.node(static_cast<NodeId>(i)).name},
                     {"storage", storage_kind_name(live.kind[i])},
                     {"buf", buf_json(node_buf[i])},
                     {"alias_of", a == kNoNode ? nlohmann::json(nullptr) : nlohmann::json(a)},
                     {"last_use", live.last_use[i]}});
  }
  auto& ivs = j["intervals"] = nlohmann::json::array();
  for (size_t i = 0; i < live.intervals.size(); ++i) {
    const LiveInterval& l = live.intervals[i];
    ivs.push_back({{"root", l.root},
                   {"backend", backend_name(l.backend)},
                   {"first", l.first},
                   {"last", l.last},
                   {"bytes", l.bytes},
                   {"class_bytes", interval_class[i]},
                   {"buf_id", interval_buf[i]},
                   {"pinned", l.pinned}});
  }
  auto& st = j["staging"] = nlohmann::json::array();
  for (const StagingBuf& s : staging) {
    st.push_back({{"src", s.src}, {"dst", backend_name(s.dst)}, {"buf", buf_json(s.buf)}});
  }
  return j.dump(1);
}

}  // namespace minfer
