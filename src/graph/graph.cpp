// Graph IR: node building with shape inference, cycle check and validation.
// Dumps (JSON / DOT) and the name tables live in graph_dump.cpp.
#include "graph/graph.h"

#include <deque>
#include <utility>

#include "common/error.h"

namespace minfer {
namespace {

std::string shape_str(const std::array<int64_t, 4>& ne) {
  return fmt::format("[{}, {}, {}, {}]", ne[0], ne[1], ne[2], ne[3]);
}

// Builder-level shape errors are bad input (a GGUF with inconsistent tensor shapes reaches them),
// so they throw naming both nodes and their shapes rather than asserting.
[[noreturn]] void shape_error(const Graph& g, std::string_view op, const std::string& name,
                              NodeId a, NodeId b, std::string_view why) {
  fail(ErrorKind::InvalidArgument, "graph: {} '{}': {} ('{}' {} vs '{}' {})", op, name, why,
       g.node(a).name, shape_str(g.node(a).ne), g.node(b).name, shape_str(g.node(b).ne));
}

// Elements spanned by a view: the last row's start plus one row. Rows are all ne1*ne2*ne3
// rows at a uniform stride (row_stride, or ne0 when 0).
int64_t view_extent(const std::array<int64_t, 4>& ne, int64_t row_stride) {
  const int64_t stride = row_stride == 0 ? ne[0] : row_stride;
  const int64_t rows = ne[1] * ne[2] * ne[3];
  if (rows == 0 || ne[0] == 0) return 0;
  return stride * (rows - 1) + ne[0];
}

}  // namespace

size_t Node::n_bytes() const {
  if (op == Op::Weight) {
    return row_size(type, ne[0]) * static_cast<size_t>(ne[1] * ne[2] * ne[3]);
  }
  if (op == Op::KvStore) {
    // The K region it stands for: n_ctx rows of the KV element type.
    return row_size(type, ne[0]) * static_cast<size_t>(ne[1] * ne[2] * ne[3]);
  }
  if (op == Op::View) {
    // A view has its source's type: f32/i32 activations, or (rarely) a weight.
    const TypeTraits& t = type_traits(type);
    if (t.quantized) return row_size(type, ne[0]) * static_cast<size_t>(ne[1] * ne[2] * ne[3]);
    return static_cast<size_t>(view_extent(ne, p.view_row_stride)) * t.type_size;
  }
  return static_cast<size_t>(n_elements()) * 4;  // f32, or i32 carried as f32 bit patterns
}

NodeId Graph::add(Node n) {
  const NodeId id = static_cast<NodeId>(nodes_.size());
  for (NodeId s : n.src) {
    MINFER_ASSERT(s >= 0 && s < id, "graph: a source must be built before its consumer");
  }
  for (int64_t d : n.ne) MINFER_ASSERT(d >= 0, "graph: negative dimension");
  if (n.op == Op::Input) inputs_.push_back(id);
  nodes_.push_back(std::move(n));
  return id;
}

NodeId Graph::input(std::string name, GgmlType type, std::array<int64_t, 4> ne) {
  if (type != GgmlType::F32 && type != GgmlType::I32) {
    fail(ErrorKind::InvalidArgument, "graph: input '{}' must be f32 or i32, got {}", name,
         type_name(type));
  }
  Node n;
  n.op = Op::Input;
  n.name = std::move(name);
  n.type = type;
  n.ne = ne;
  return add(std::move(n));
}

NodeId Graph::weight(const WeightRef& w) {
  Node n;
  n.op = Op::Weight;
  n.name = w.name;
  n.type = w.type;
  n.ne = w.ne;
  n.p.weight_id = static_cast<int32_t>(weights_.size());
  weights_.push_back(w);
  return add(std::move(n));
}

void Graph::mark_output(NodeId id) {
  MINFER_ASSERT(id >= 0 && id < static_cast<NodeId>(nodes_.size()), "graph: bad output id");
  for (NodeId o : outputs_)
    if (o == id) return;
  outputs_.push_back(id);
}

NodeId Graph::get_rows(NodeId table, NodeId ids, std::string name) {
  const Node& t = node(table);
  const Node& i = node(ids);
  if (i.type != GgmlType::I32) {
    fail(ErrorKind::InvalidArgument, "graph: get_rows '{}': ids '{}' must be i32", name, i.name);
  }
  if (t.ne[2] != 1 || t.ne[3] != 1)
    shape_error(*this, "get_rows", name, table, ids, "table must be 2-d");
  Node n;
  n.op = Op::GetRows;
  n.name = std::move(name);
  n.ne = {t.ne[0], i.ne[0], i.ne[1], i.ne[2]};
  n.src = {table, ids};
  return add(std::move(n));
}

NodeId Graph::rms_norm(NodeId x, NodeId w, float eps, std::string name) {
  Node n;
  n.op = Op::RmsNorm;
  n.ne = node(x).ne;
  n.src = {x};
  if (w != kNoNode) {
    if (node(w).n_elements() != node(x).ne[0]) {
      shape_error(*this, "rms_norm", name, x, w, "weight must have ne0 elements");
    }
    n.src.push_back(w);
  }
  n.name = std::move(name);
  n.p.eps = eps;
  return add(std::move(n));
}

namespace {
Node broadcast_node(const Graph& g, Op op, NodeId a, NodeId b, std::string name) {
  const Node& na = g.node(a);
  const Node& nb = g.node(b);
  for (int d = 0; d < 4; ++d) {
    // src1 repeats over src0 (ggml's can_repeat): each dim must divide evenly.
    if (nb.ne[d] == 0 || na.ne[d] % nb.ne[d] != 0) {
      shape_error(g, op_name(op), name, a, b, "src1 does not broadcast over src0");
    }
  }
  Node n;
  n.op = op;
  n.name = std::move(name);
  n.ne = na.ne;
  n.src = {a, b};
  return n;
}
}  // namespace

NodeId Graph::add(NodeId a, NodeId b, std::string name) {
  return add(broadcast_node(*this, Op::Add, a, b, std::move(name)));
}

NodeId Graph::mul(NodeId a, NodeId b, std::string name) {
  return add(broadcast_node(*this, Op::Mul, a, b, std::move(name)));
}

NodeId Graph::matmul(NodeId w, NodeId x, std::string name) {
  const Node& nw = node(w);
  const Node& nx = node(x);
  if (nw.ne[0] != nx.ne[0]) shape_error(*this, "matmul", name, w, x, "ne0 (n_in) differs");
  if (nw.ne[2] != 1 || nw.ne[3] != 1) shape_error(*this, "matmul", name, w, x, "w must be 2-d");
  Node n;
  n.op = Op::MatMul;
  n.name = std::move(name);
  n.ne = {nw.ne[1], nx.ne[1], nx.ne[2], nx.ne[3]};
  n.src = {w, x};
  return add(std::move(n));
}

namespace {
// Appends the optional frequency-factor source ([n_rot / 2] f32) of a rope node.
void add_freq_factors(Graph& g, Node& n, NodeId ff) {
  n.p.rope_freq_factors = ff != kNoNode;
  if (ff == kNoNode) return;
  const Node& nf = g.node(ff);
  const int64_t n_rot = n.p.n_rot > 0 ? n.p.n_rot : (n.p.head_dim > 0 ? n.p.head_dim : n.ne[0]);
  if (nf.type != GgmlType::F32 || nf.n_elements() != n_rot / 2)
    fail(ErrorKind::InvalidArgument,
         "graph: rope '{}': frequency factors '{}' must be {} f32 values (n_rot / 2), found {} {}",
         n.name, nf.name, n_rot / 2, nf.n_elements(), type_name(nf.type));
  n.src.push_back(ff);
}
}  // namespace

NodeId Graph::rope(NodeId x, NodeId pos, const OpParams& p, std::string name,
                   NodeId freq_factors) {
  const Node& nx = node(x);
  const Node& np = node(pos);
  if (np.type != GgmlType::I32) {
    fail(ErrorKind::InvalidArgument, "graph: rope '{}': positions '{}' must be i32", name, np.name);
  }
  if (np.ne[0] != nx.ne[2]) shape_error(*this, "rope", name, x, pos, "n_tok (x ne2) != positions");
  if (p.n_rot > nx.ne[0] || p.n_rot % 2 != 0) {
    fail(ErrorKind::InvalidArgument, "graph: rope '{}': n_rot {} invalid for head_dim {}", name,
         p.n_rot, nx.ne[0]);
  }
  Node n;
  n.op = Op::Rope;
  n.name = std::move(name);
  n.ne = nx.ne;
  n.src = {x, pos};
  n.p = p;
  add_freq_factors(*this, n, freq_factors);
  return add(std::move(n));
}

NodeId Graph::silu(NodeId x, std::string name) {
  Node n;
  n.op = Op::Silu;
  n.name = std::move(name);
  n.ne = node(x).ne;
  n.src = {x};
  return add(std::move(n));
}

NodeId Graph::swiglu(NodeId gate, NodeId up, std::string name) {
  if (node(gate).ne != node(up).ne) shape_error(*this, "swiglu", name, gate, up, "shapes differ");
  Node n;
  n.op = Op::SwiGlu;
  n.name = std::move(name);
  n.ne = node(gate).ne;
  n.src = {gate, up};
  return add(std::move(n));
}

NodeId Graph::scale(NodeId x, float s, std::string name) {
  Node n;
  n.op = Op::Scale;
  n.name = std::move(name);
  n.ne = node(x).ne;
  n.src = {x};
  n.p.scale = s;
  return add(std::move(n));
}

NodeId Graph::softcap(NodeId x, float cap, std::string name) {
  if (!(cap > 0.0f))
    fail(ErrorKind::InvalidArgument, "graph: softcap '{}': cap {} must be > 0", name, cap);
  Node n;
  n.op = Op::SoftCap;
  n.name = std::move(name);
  n.ne = node(x).ne;
  n.src = {x};
  n.p.softcap = cap;
  return add(std::move(n));
}

NodeId Graph::geglu(NodeId gate, NodeId up, std::string name) {
  if (node(gate).ne != node(up).ne) shape_error(*this, "geglu", name, gate, up, "shapes differ");
  Node n;
  n.op = Op::GeGlu;
  n.name = std::move(name);
  n.ne = node(gate).ne;
  n.src = {gate, up};
  return add(std::move(n));
}

NodeId Graph::glu_halves(Op op, NodeId gate_up, std::string name) {
  const Node& x = node(gate_up);
  if (x.ne[0] % 2 != 0 || x.type != GgmlType::F32)
    fail(ErrorKind::InvalidArgument, "graph: {} '{}': source '{}' {} {} is not f32 [2n, ...]",
         op_name(op), name, x.name, type_name(x.type), shape_str(x.ne));
  Node n;
  n.op = op;
  n.name = std::move(name);
  n.ne = x.ne;
  n.src = {gate_up};
  return add(std::move(n));
}

NodeId Graph::swiglu_halves(NodeId gate_up, std::string name) {
  return glu_halves(Op::SwiGlu, gate_up, std::move(name));
}

NodeId Graph::geglu_halves(NodeId gate_up, std::string name) {
  return glu_halves(Op::GeGlu, gate_up, std::move(name));
}

NodeId Graph::view(NodeId x, std::array<int64_t, 4> ne, int64_t offset, int64_t row_stride,
                   std::string name) {
  const Node& nx = node(x);
  if (offset < 0 || (row_stride != 0 && row_stride < ne[0]) ||
      offset + view_extent(ne, row_stride) > nx.n_elements()) {
    fail(ErrorKind::InvalidArgument,
         "graph: view '{}' {} at offset {} stride {} runs past '{}' ({} elements)", name,
         shape_str(ne), offset, row_stride, nx.name, nx.n_elements());
  }
  if (nx.op == Op::Weight && offset != 0 && type_traits(nx.type).quantized) {
    fail(ErrorKind::InvalidArgument, "graph: view '{}' at an element offset into quantized '{}'",
         name, nx.name);
  }
  Node n;
  n.op = Op::View;
  n.name = std::move(name);
  n.type = nx.type;
  n.ne = ne;
  n.src = {x};
  n.p.view_offset = offset;
  n.p.view_row_stride = row_stride;
  return add(std::move(n));
}

namespace {
void check_kv_params(const OpParams& p, std::string_view op, const std::string& name) {
  if (p.layer < 0 || p.n_ctx <= 0) {
    fail(ErrorKind::InvalidArgument, "graph: {} '{}': layer {} / n_ctx {} invalid", op, name,
         p.layer, p.n_ctx);
  }
  if (p.kv_block_size < 0 || (p.kv_block_size > 0 && p.kv_table_stride <= 0)) {
    fail(ErrorKind::InvalidArgument, "graph: {} '{}': kv block size {} / table stride {} invalid",
         op, name, p.kv_block_size, p.kv_table_stride);
  }
  for (GgmlType t : {p.kv_type_k, p.kv_type_v}) {
    if (t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::Q8_0) {
      fail(ErrorKind::Unsupported, "graph: {} '{}': KV cache type {} (supported: f32, f16, q8_0)",
           op, name, type_name(t));
    }
    // Q8_0 rows are 32-value blocks; attention reads one head at a time, so a block may not
    // span two heads (kv/cache_type.h's check_kv_cache_type_fits says so to the user first).
    if (t == GgmlType::Q8_0 && p.head_dim > 0 && p.head_dim % QK8_0 != 0) {
      fail(ErrorKind::InvalidArgument,
           "graph: {} '{}': KV cache type q8_0 needs head_dim {} to be a multiple of {}", op, name,
           p.head_dim, QK8_0);
    }
  }
}
}  // namespace

NodeId Graph::kv_store(NodeId k, NodeId v, NodeId pos, const OpParams& p, std::string name) {
  check_kv_params(p, "kv_store", name);
  const Node& nk = node(k);
  const int64_t n_tok = node(pos).ne[0];
  if (node(v).n_elements() != nk.n_elements())
    shape_error(*this, "kv_store", name, k, v, "k/v sizes differ");
  if (n_tok <= 0 || nk.n_elements() % n_tok != 0) {
    shape_error(*this, "kv_store", name, k, pos, "k is not n_tok columns");
  }
  const int64_t n_kv_embd = nk.n_elements() / n_tok;
  if (p.head_dim > 0 && p.n_head_kv > 0 && n_kv_embd != int64_t{p.head_dim} * p.n_head_kv) {
    shape_error(*this, "kv_store", name, k, pos, "k width != head_dim * n_head_kv");
  }
  for (GgmlType t : {p.kv_type_k, p.kv_type_v}) {
    if (n_kv_embd % type_traits(t).block_size != 0) {
      fail(ErrorKind::InvalidArgument,
           "graph: kv_store '{}': K/V rows of {} values do not divide into {} blocks of {}", name,
           n_kv_embd, type_name(t), type_traits(t).block_size);
    }
  }
  Node n;
  n.op = Op::KvStore;
  n.name = std::move(name);
  n.type = p.kv_type_k;
  // The shape mirrors the persistent K region so the allocator can size it.
  n.ne = {n_kv_embd, p.n_ctx, 1, 1};
  n.src = {k, v, pos};
  n.p = p;
  return add(std::move(n));
}

NodeId Graph::attention(NodeId q, NodeId kv, NodeId pos, const OpParams& p, std::string name) {
  check_kv_params(p, "attention", name);
  const Node& nkv = node(kv);
  if (nkv.op != Op::KvStore && nkv.op != Op::QkvBiasRopeStore) {
    fail(ErrorKind::InvalidArgument, "graph: attention '{}': src1 '{}' must be a KV store node",
         name, nkv.name);
  }
  if (nkv.p.layer != p.layer) {
    fail(ErrorKind::InvalidArgument, "graph: attention '{}' (layer {}) reads '{}' of layer {}",
         name, p.layer, nkv.name, nkv.p.layer);
  }
  if (nkv.p.kv_type_k != p.kv_type_k || nkv.p.kv_type_v != p.kv_type_v) {
    fail(ErrorKind::InvalidArgument,
         "graph: attention '{}' reads KV types {}/{} but '{}' stores {}/{}", name,
         type_name(p.kv_type_k), type_name(p.kv_type_v), nkv.name, type_name(nkv.p.kv_type_k),
         type_name(nkv.p.kv_type_v));
  }
  const int64_t n_tok = node(pos).ne[0];
  if (p.head_dim <= 0 || p.n_head <= 0) {
    fail(ErrorKind::InvalidArgument, "graph: attention '{}': head_dim/n_head unset", name);
  }
  if (p.kv_block_size > 0) {
    fail(ErrorKind::InvalidArgument,
         "graph: attention '{}': a paged KV cache needs attention_paged (sequences and tables)",
         name);
  }
  Node n;
  n.op = Op::Attention;
  n.name = std::move(name);
  n.ne = {int64_t{p.head_dim} * p.n_head, n_tok, 1, 1};
  n.src = {q, kv, pos};
  n.p = p;
  return add(std::move(n));
}

NodeId Graph::attention_paged(NodeId q, NodeId kv, NodeId pos, NodeId seq, NodeId tables,
                              const OpParams& p, std::string name) {
  if (p.kv_block_size <= 0) {
    fail(ErrorKind::InvalidArgument, "graph: attention '{}': paged without a kv block size",
         name);
  }
  OpParams contiguous = p;
  contiguous.kv_block_size = 0;  // attention() checks everything but the paging
  const NodeId id = attention(q, kv, pos, contiguous, name);
  const int64_t n_tok = node(pos).ne[0];
  if (node(seq).ne[0] != n_tok || node(seq).type != GgmlType::I32 ||
      node(tables).type != GgmlType::I32 || node(tables).ne[0] != p.kv_table_stride) {
    shape_error(*this, "attention", node(id).name, seq, tables,
                "seq must be I32 [n_tok] and tables I32 [kv_table_stride, n_seq]");
  }
  Node& n = node(id);
  n.src.push_back(seq);
  n.src.push_back(tables);
  n.p = p;
  return id;
}

NodeId Graph::qkv_bias_rope_store(NodeId qkv, NodeId bias, NodeId pos, const OpParams& p,
                                  std::string name, NodeId slots, NodeId freq_factors) {
  check_kv_params(p, "qkv_bias_rope_store", name);
  const Node& nq = node(qkv);
  const int64_t width = int64_t{p.head_dim} * (p.n_head + 2 * p.n_head_kv);
  if (p.head_dim <= 0 || nq.ne[0] != width || nq.ne[1] != node(pos).ne[0]) {
    shape_error(*this, "qkv_bias_rope_store", name, qkv, pos,
                "qkv must be [head_dim * (n_head + 2 n_head_kv), n_tok]");
  }
  Node n;
  n.op = Op::QkvBiasRopeStore;
  n.name = std::move(name);
  n.ne = nq.ne;  // in place: the output is the (biased, roped) qkv block; q is its first rows
  n.src = {qkv, bias, pos};
  if ((slots != kNoNode) != (p.kv_block_size > 0)) {
    fail(ErrorKind::InvalidArgument,
         "graph: qkv_bias_rope_store '{}': slots are given exactly when the KV cache is paged",
         n.name);
  }
  if (slots != kNoNode) {
    if (node(slots).ne[0] != node(pos).ne[0])
      shape_error(*this, "qkv_bias_rope_store", n.name, slots, pos, "one slot per token");
    n.src.push_back(slots);
  }
  n.p = p;
  add_freq_factors(*this, n, freq_factors);
  return add(std::move(n));
}

const Node& Graph::node(NodeId id) const {
  MINFER_ASSERT(id >= 0 && id < static_cast<NodeId>(nodes_.size()), "graph: bad node id");
  return nodes_[static_cast<size_t>(id)];
}

Node& Graph::node(NodeId id) {
  MINFER_ASSERT(id >= 0 && id < static_cast<NodeId>(nodes_.size()), "graph: bad node id");
  return nodes_[static_cast<size_t>(id)];
}

NodeId Graph::find(std::string_view name) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].name == name) return static_cast<NodeId>(i);
  return kNoNode;
}

void Graph::set_src(NodeId id, size_t index, NodeId src) {
  Node& n = node(id);
  MINFER_ASSERT(index < n.src.size(), "graph: set_src index out of range");
  MINFER_ASSERT(src >= 0 && src < static_cast<NodeId>(nodes_.size()), "graph: bad source id");
  n.src[index] = src;
}

std::vector<NodeId> Graph::topo_order() const {
  const size_t n = nodes_.size();
  std::vector<int32_t> indeg(n, 0);
  std::vector<std::vector<NodeId>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    for (NodeId s : nodes_[i].src) {
      ++indeg[i];
      consumers[static_cast<size_t>(s)].push_back(static_cast<NodeId>(i));
    }
  }
  std::deque<NodeId> ready;
  for (size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.push_back(static_cast<NodeId>(i));
  std::vector<NodeId> order;
  order.reserve(n);
  while (!ready.empty()) {
    const NodeId id = ready.front();
    ready.pop_front();
    order.push_back(id);
    for (NodeId c : consumers[static_cast<size_t>(id)])
      if (--indeg[static_cast<size_t>(c)] == 0) ready.push_back(c);
  }
  if (order.size() == n) return order;
  // Every unprocessed node still has an unprocessed source; following those sources must
  // revisit a node, and the first revisited node lies on a cycle (not merely downstream of one).
  NodeId cur = kNoNode;
  for (size_t i = 0; i < n && cur == kNoNode; ++i)
    if (indeg[i] > 0) cur = static_cast<NodeId>(i);
  std::vector<uint8_t> seen(n, 0);
  while (!seen[static_cast<size_t>(cur)]) {
    seen[static_cast<size_t>(cur)] = 1;
    for (NodeId s : nodes_[static_cast<size_t>(cur)].src) {
      if (indeg[static_cast<size_t>(s)] > 0) {
        cur = s;
        break;
      }
    }
  }
  fail(ErrorKind::InvalidArgument, "graph: cycle through node {} '{}' ({} of {} nodes unordered)",
       cur, nodes_[static_cast<size_t>(cur)].name, n - order.size(), n);
}

void Graph::validate() const {
  topo_order();
  const auto n = static_cast<NodeId>(nodes_.size());
  for (NodeId i = 0; i < n; ++i) {
    const Node& nd = nodes_[static_cast<size_t>(i)];
    for (NodeId s : nd.src) {
      // Build order is execution order, so a source must precede its consumer. An acyclic
      // graph rewired with set_src can still violate this.
      if (s >= i) {
        fail(ErrorKind::InvalidArgument,
             "graph: node {} '{}' reads node {} '{}' built after it (build order must be "
             "execution order)",
             i, nd.name, s, nodes_[static_cast<size_t>(s)].name);
      }
    }
    if (nd.src.size() > kMaxSrc) {
      fail(ErrorKind::InvalidArgument, "graph: node {} '{}' has {} sources (max {})", i, nd.name,
           nd.src.size(), kMaxSrc);
    }
    if (nd.op == Op::Weight &&
        (nd.p.weight_id < 0 || nd.p.weight_id >= static_cast<int32_t>(weights_.size()))) {
      fail(ErrorKind::InvalidArgument, "graph: weight node {} '{}' has bad weight_id {}", i,
           nd.name, nd.p.weight_id);
    }
    if (nd.op == Op::View) {
      if (nd.src.size() != 1) {
        fail(ErrorKind::InvalidArgument, "graph: view {} '{}' needs exactly one source", i,
             nd.name);
      }
      // Views added with add(Node) skip the builder's check; the allocator relies on it.
      const Node& src = nodes_[static_cast<size_t>(nd.src[0])];
      if (nd.p.view_offset < 0 ||
          nd.p.view_offset + view_extent(nd.ne, nd.p.view_row_stride) > src.n_elements()) {
        fail(ErrorKind::InvalidArgument, "graph: view {} '{}' runs past its source '{}'", i,
             nd.name, src.name);
      }
    }
  }
  for (size_t a = 0; a < inputs_.size(); ++a) {
    for (size_t b = a + 1; b < inputs_.size(); ++b) {
      // Inputs are filled by name; a duplicate would make one of them unreachable.
      if (nodes_[static_cast<size_t>(inputs_[a])].name ==
          nodes_[static_cast<size_t>(inputs_[b])].name) {
        fail(ErrorKind::InvalidArgument, "graph: two inputs named '{}'",
             nodes_[static_cast<size_t>(inputs_[a])].name);
      }
    }
  }
  for (NodeId o : outputs_) {
    if (nodes_[static_cast<size_t>(o)].op == Op::Weight) {
      fail(ErrorKind::InvalidArgument, "graph: output '{}' is a weight",
           nodes_[static_cast<size_t>(o)].name);
    }
  }
}

}  // namespace minfer
