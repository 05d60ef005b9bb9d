#include "sched/assign.h"

#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "alloc/liveness.h"
#include "common/error.h"

namespace minfer {
namespace {

size_t u(NodeId id) {
  return static_cast<size_t>(id);
}
size_t bi(BackendKind k) {
  return static_cast<size_t>(k);
}

// The weight a source reads, through views, or kNoNode.
NodeId weight_source(const Graph& g, NodeId s) {
  while (g.node(s).op == Op::View) s = g.node(s).src[0];
  return g.node(s).op == Op::Weight ? s : kNoNode;
}

// Where a weight node lives (rule 1): a BackendKind, or -1 = anywhere (a weight of no layer).
int where_weight(const Graph& g, NodeId w, const AssignParams& p) {
  const Node& n = g.node(w);
  const std::string& name = g.weights()[static_cast<size_t>(n.p.weight_id)].name;
  const int32_t l = weight_layer(name, p.n_layer);
  if (l == -2) return -1;
  const bool on_device =
      l >= 0 && (l < p.n_layer ? l < p.n_gpu_layers : p.n_gpu_layers > p.n_layer);
  return static_cast<int>(on_device ? p.device : BackendKind::Cpu);
}

// Fewest backend changes over the executing nodes in build order (rule 4), ties to the preferred
// backend: Viterbi over (cuts, nodes off the preferred backend), lexicographic.
std::vector<BackendKind> fewest_cuts(const std::vector<SupportMask>& allowed, BackendKind pref) {
  using Cost = std::pair<uint32_t, uint32_t>;
  constexpr Cost kInf{std::numeric_limits<uint32_t>::max(), 0};
  const size_t n = allowed.size();
  std::vector<std::array<Cost, kNumBackends>> cost(n);
  std::vector<std::array<int8_t, kNumBackends>> from(n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < kNumBackends; ++b) {
      cost[i][b] = kInf;
      from[i][b] = -1;
      if (!(allowed[i] & (1u << b))) continue;
      const uint32_t off = b == bi(pref) ? 0 : 1;
      if (i == 0) {
        cost[i][b] = Cost{0, off};
        continue;
      }
      for (size_t a = 0; a < kNumBackends; ++a) {
        if (cost[i - 1][a] == kInf) continue;
        const Cost c{cost[i - 1][a].first + (a != b ? 1 : 0), cost[i - 1][a].second + off};
        if (c < cost[i][b]) {
          cost[i][b] = c;
          from[i][b] = static_cast<int8_t>(a);
        }
      }
    }
  }
  std::vector<BackendKind> out(n, BackendKind::Cpu);
  if (n == 0) return out;
  size_t b = 0;
  for (size_t k = 1; k < kNumBackends; ++k)
    if (cost[n - 1][k] < cost[n - 1][b]) b = k;
  MINFER_ASSERT(cost[n - 1][b] != kInf, "assign: no feasible assignment");
  for (size_t i = n; i-- > 0;) {
    out[i] = static_cast<BackendKind>(b);
    if (i > 0) b = static_cast<size_t>(from[i][b]);
  }
  return out;
}

// Rule 2: per layer, the device when the layer is offloaded and the device runs all its KV ops.
std::vector<BackendKind> kv_placement(const Graph& g, const Liveness& lv, const AssignParams& p,
                                      std::span<const SupportMask> support) {
  std::vector<BackendKind> kv;
  std::vector<uint8_t> device_ok;
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i) {
    const Node& n = g.node(i);
    if (!lv.executes(i) || !op_uses_kv(n.op)) continue;  // (inputs are not KV ops)
    const auto l = static_cast<size_t>(n.p.layer);
    if (l >= kv.size()) {
      kv.resize(l + 1, BackendKind::Cpu);
      device_ok.resize(l + 1, 1);
    }
    if (!(support[u(i)] & support_bit(p.device))) device_ok[l] = 0;
    if (!(support[u(i)] & support_bit(BackendKind::Cpu)))
      fail(ErrorKind::Unsupported, "assign: the CPU cannot run KV node {} '{}'", i, n.name);
  }
  for (size_t l = 0; l < kv.size(); ++l)
    if (static_cast<int32_t>(l) < p.n_gpu_layers && device_ok[l]) kv[l] = p.device;
  return kv;
}

}  // namespace

int32_t weight_layer(std::string_view name, int32_t n_layer) {
  if (name.starts_with("blk.")) {
    int32_t l = -1;
    const char* b = name.data() + 4;
    const auto [end, ec] = std::from_chars(b, name.data() + name.size(), l);
    if (ec == std::errc() && end != b && end < name.data() + name.size() && *end == '.' && l >= 0)
      return l;
    return -2;
  }
  if (name.starts_with("output.") || name.starts_with("output_norm.")) return n_layer;
  if (name.starts_with("token_embd.")) return -1;
  return -2;
}

std::vector<SupportMask> support_table(const Graph& g,
                                       const std::array<const Backend*, kNumBackends>& be) {
  std::vector<SupportMask> t(g.size(), 0);
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i)
    for (size_t b = 0; b < kNumBackends; ++b)
      if (be[b] != nullptr && be[b]->supports(g.node(i)))
        t[u(i)] |= support_bit(static_cast<BackendKind>(b));
  return t;
}

uint64_t Assignment::staging_bytes() const {
  uint64_t s = 0;
  for (const StagingEdge& e : staging) s += e.bytes;
  return s;
}

Assignment assign_backends(const Graph& g, const AssignParams& p,
                           std::span<const SupportMask> support) {
  if (support.size() != g.size())
    fail(ErrorKind::InvalidArgument, "assign: support table has {} entries for {} nodes",
         support.size(), g.size());
  if (p.n_gpu_layers < 0)
    fail(ErrorKind::InvalidArgument, "assign: n_gpu_layers {} must be >= 0", p.n_gpu_layers);
  const Liveness lv = compute_liveness(g);
  Assignment a;
  a.params = p;
  a.backend.assign(g.size(), BackendKind::Cpu);
  a.kv_backend = kv_placement(g, lv, p, support);

  // Rules 2-4: the allowed set of every executing node, then the fewest-cuts choice.
  std::vector<NodeId> exec;
  std::vector<SupportMask> allowed;
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i) {
    const Node& n = g.node(i);
    if (n.op == Op::Weight) {
      const int w = where_weight(g, i, p);
      a.backend[u(i)] = w < 0 ? BackendKind::Cpu : static_cast<BackendKind>(w);
    }
    if (!lv.executes(i) || n.op == Op::Input) continue;  // inputs: host-filled, on the cpu
    SupportMask m = support[u(i)];
    if (m == 0)
      fail(ErrorKind::Unsupported, "assign: no backend runs node {} '{}' ({})", i, n.name,
           op_name(n.op));
    if (op_uses_kv(n.op)) {
      m = support_bit(a.kv_backend[static_cast<size_t>(n.p.layer)]);
    } else {
      for (NodeId s : n.src) {
        const NodeId w = weight_source(g, s);
        const int where = w == kNoNode ? -1 : where_weight(g, w, p);
        if (where < 0) continue;
        const SupportMask wb = support_bit(static_cast<BackendKind>(where));
        if (m & wb) {
          m = wb;
        } else {
          m = support_bit(BackendKind::Cpu);
          ++a.n_fallback;
        }
        break;  // the first placed weight decides
      }
      if (!(m & support[u(i)]))
        fail(ErrorKind::Unsupported, "assign: the CPU cannot run node {} '{}' ({})", i, n.name,
             op_name(n.op));
    }
    exec.push_back(i);
    allowed.push_back(m);
  }
  const std::vector<BackendKind> chosen = fewest_cuts(allowed, p.device);
  for (size_t k = 0; k < exec.size(); ++k) {
    const NodeId i = exec[k];
    a.backend[u(i)] = chosen[k];
    ++a.n_nodes[bi(chosen[k])];
    if (a.splits.empty() || a.splits.back().backend != chosen[k])
      a.splits.push_back(AssignSplit{chosen[k], i, i, 0});
    a.splits.back().last = i;
    ++a.splits.back().n_nodes;
  }
  a.n_executing = static_cast<uint32_t>(exec.size());

  // Rule 5: views follow the storage they window (build order: their source is already set).
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i)
    if (g.node(i).op == Op::View) a.backend[u(i)] = a.backend[u(g.node(i).src[0])];

  // Rule 6: staging, one per (source, consuming backend), as the allocator will plan it.
  for (NodeId i : exec) {
    const BackendKind dst = a.backend[u(i)];
    for (NodeId s : g.node(i).src) {
      const Node& sn = g.node(s);
      if (weight_source(g, s) != kNoNode || lv.kind[u(s)] == StorageKind::None) continue;
      if (sn.op == Op::KvStore && sn.p.kv_block_size > 0) continue;  // paged rows: rule 2
      const BackendKind from = a.backend[u(s)];
      if (from == dst) continue;
      bool have = false;
      for (const StagingEdge& e : a.staging) have = have || (e.src == s && e.to == dst);
      if (!have) a.staging.push_back(StagingEdge{s, from, dst, lv.len[u(s)]});
    }
  }
  return a;
}

void apply_assignment(Graph& g, const Assignment& a) {
  MINFER_ASSERT(a.backend.size() == g.size(), "assign: assignment of another graph");
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i) g.node(i).backend = a.backend[u(i)];
}

std::string Assignment::to_string(const Graph& g) const {
  std::string out = fmt::format(
      "assignment (-ngl {} of {} layers, device {}): {} executing nodes ({} cpu, {} {}), {} "
      "splits, {} cuts, {} fallbacks, {} staging copies {} B\n",
      params.n_gpu_layers, params.n_layer, backend_name(params.device), n_executing,
      n_nodes[bi(BackendKind::Cpu)], n_nodes[bi(params.device)], backend_name(params.device),
      splits.size(), n_cuts(), n_fallback, staging.size(), staging_bytes());
  std::string kv;
  for (size_t l = 0; l < kv_backend.size(); ++l)
    kv += fmt::format("{}{}", l ? " " : "", backend_name(kv_backend[l]));
  out += fmt::format("  kv per layer: {}\n", kv.empty() ? "-" : kv);
  for (size_t i = 0; i < splits.size(); ++i) {
    const AssignSplit& s = splits[i];
    out += fmt::format("  split {} on {}: {} nodes, '{}' .. '{}'\n", i, backend_name(s.backend),
                       s.n_nodes, g.node(s.first).name, g.node(s.last).name);
  }
  for (const StagingEdge& e : staging)
    out += fmt::format("  stage '{}' {} -> {}: {} B\n", g.node(e.src).name, backend_name(e.from),
                       backend_name(e.to), e.bytes);
  return out;
}

}  // namespace minfer
