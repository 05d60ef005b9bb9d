#include "eager/graph_runner.h"

#include <cstring>

#include "backend/backend.h"
#include "common/error.h"

namespace minfer::eager {
namespace {

size_t u(NodeId id) {
  return static_cast<size_t>(id);
}

}  // namespace

EagerGraph::EagerGraph(Graph g) : graph(std::move(g)), uses(graph.size(), 0) {
  for (const Node& n : graph.nodes())
    for (NodeId s : n.src)
      if (s != kNoNode) ++uses[u(s)];
  for (NodeId o : graph.outputs()) ++uses[u(o)];
}

GraphRunner::GraphRunner(BufferPool& pool, cpu::CpuBackend& cpu, const KvCache& kv)
    : pool_(pool), cpu_(cpu), kv_(kv) {}

void GraphRunner::run(const EagerGraph& g, std::span<const HostInput> inputs) {
  const size_t n = g.graph.size();
  MINFER_ASSERT(g.uses.size() == n, "eager: use counts of another graph");
  release();  // nothing may survive from an earlier run
  val_.resize(n);
  addr_.assign(n, nullptr);
  left_.assign(g.uses.begin(), g.uses.end());
  try {
    for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) run_node(g.graph, id, inputs);
  } catch (...) {
    release();  // every transient of this run goes back before the error propagates
    throw;
  }
}

const Tensor& GraphRunner::output(NodeId id) const {
  MINFER_ASSERT(id >= 0 && u(id) < val_.size() && val_[u(id)].defined(),
                "eager: output node not held");
  return val_[u(id)];
}

void GraphRunner::release() {
  for (Tensor& t : val_) t.reset();  // keeps the vector's capacity
}

void GraphRunner::run_node(const Graph& g, NodeId id, std::span<const HostInput> inputs) {
  const Node& n = g.node(id);
  switch (n.op) {
    case Op::Weight:
      addr_[u(id)] = g.weights().at(static_cast<size_t>(n.p.weight_id)).data;
      return;
    case Op::Input:
      if (left_[u(id)] > 0) make_input(n, id, inputs);
      return;
    case Op::View:
      make_view(g, n, id);
      break;
    default:
      make_output(n, id);
      execute(g, n, id);
      break;
  }
  done_with_sources(n, id);
}

void GraphRunner::make_input(const Node& n, NodeId id, std::span<const HostInput> inputs) {
  for (const HostInput& in : inputs) {
    if (in.node != id) continue;
    MINFER_ASSERT(n.type == GgmlType::I32 && static_cast<int64_t>(in.data.size()) == n.n_elements(),
                  "eager: input data does not match its node");
    Tensor t = Tensor::empty(pool_, GgmlType::I32, n.ne);  // the slab arm
    std::memcpy(t.raw(), in.data.data(), in.data.size_bytes());
    addr_[u(id)] = t.raw();
    val_[u(id)] = std::move(t);
    return;
  }
  MINFER_ASSERT(false, "eager: a graph input without host data");
}

void GraphRunner::make_view(const Graph& g, const Node& n, NodeId id) {
  const NodeId s = n.src.at(0);
  const TypeTraits& tt = type_traits(n.type);
  // Offsets into quantized weights are refused by Graph::view; every other view is elementwise.
  const size_t es = tt.quantized ? 0 : tt.type_size;
  const size_t offset = static_cast<size_t>(n.p.view_offset) * es;
  if (!val_[u(s)].defined()) {  // a weight's bytes: a plain address, nothing to keep alive
    MINFER_ASSERT(g.node(s).op == Op::Weight, "eager: view of a node without a tensor");
    addr_[u(id)] = addr_[u(s)] + offset;
    return;
  }
  // Same storage, its own strides: the view keeps the source's buffer alive.
  const auto rs = static_cast<size_t>(n.p.view_row_stride != 0 ? n.p.view_row_stride : n.ne[0]);
  Strides nb{es, rs * es, 0, 0};
  nb[2] = nb[1] * static_cast<size_t>(n.ne[1]);
  nb[3] = nb[2] * static_cast<size_t>(n.ne[2]);
  val_[u(id)] = val_[u(s)].view(n.ne, nb, offset);
  addr_[u(id)] = val_[u(id)].raw();
}

void GraphRunner::make_output(const Node& n, NodeId id) {
  if (n.op == Op::KvStore) {  // stands for the layer's K region: the session's KV cache
    addr_[u(id)] = kv_.k_region(n.p.layer).raw();
    return;
  }
  if (op_is_inplace(n.op) && !n.src.empty()) {
    // Write over the first source when nothing can read it afterwards: this node is its last
    // consumer and no other handle (a view, a parent) shares its storage.
    const NodeId s = n.src[0];
    const Tensor& t = val_[u(s)];
    if (t.defined() && left_[u(s)] == 1 && t.storage()->use_count() == 1 && t.is_contiguous() &&
        t.type() == n.type && t.n_elements() == n.n_elements()) {
      val_[u(id)] = t.reshape(n.ne);
      addr_[u(id)] = t.raw();
      return;
    }
  }
  val_[u(id)] = Tensor::empty(pool_, n.type, n.ne);
  addr_[u(id)] = val_[u(id)].raw();
}

void GraphRunner::execute(const Graph& g, const Node& n, NodeId id) {
  NodeArgs a;
  a.graph = &g;
  a.node = id;
  a.out = const_cast<uint8_t*>(addr_[u(id)]);
  MINFER_ASSERT(n.src.size() <= a.src.size(), "eager: too many sources");
  for (size_t i = 0; i < n.src.size(); ++i)
    if (n.src[i] != kNoNode) a.src[i] = addr_[u(n.src[i])];
  if (op_uses_kv(n.op)) {
    // The graph must address the cache this session owns: contiguous rows of its size and type.
    const KvCacheParams& kp = kv_.params();
    MINFER_ASSERT(n.p.kv_block_size == 0 && n.p.n_ctx == kp.n_ctx && n.p.kv_type_k == kp.type &&
                      n.p.kv_type_v == kp.type && n.p.layer >= 0 && n.p.layer < kp.n_layer,
                  "eager: the graph's KV nodes do not fit the session's KV cache");
    a.kv_k = kv_.k_region(n.p.layer).raw();
    a.kv_v = kv_.v_region(n.p.layer).raw();
  }
  cpu_.execute(a);
}

void GraphRunner::done_with_sources(const Node& n, NodeId id) {
  // Last consumer ran: drop the handle (the buffer returns unless a view or alias holds it).
  for (NodeId s : n.src)
    if (s != kNoNode && --left_[u(s)] == 0) val_[u(s)].reset();
  if (left_[u(id)] == 0) val_[u(id)].reset();  // nobody reads it (KvStore's own output)
}

}  // namespace minfer::eager
