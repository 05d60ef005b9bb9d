// Name tables and the JSON / DOT dumps of a Graph.
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "graph/graph.h"

namespace minfer {

std::string_view backend_name(BackendKind b) {
  switch (b) {
    case BackendKind::Cpu:
      return "cpu";
    case BackendKind::Sim:
      return "sim";
  }
  return "?";
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::Input:
      return "input";
    case Op::Weight:
      return "weight";
    case Op::GetRows:
      return "get_rows";
    case Op::RmsNorm:
      return "rms_norm";
    case Op::Add:
      return "add";
    case Op::Mul:
      return "mul";
    case Op::MatMul:
      return "matmul";
    case Op::Rope:
      return "rope";
    case Op::Silu:
      return "silu";
    case Op::SwiGlu:
      return "swiglu";
    case Op::View:
      return "view";
    case Op::KvStore:
      return "kv_store";
    case Op::Attention:
      return "attention";
    case Op::QkvBiasRopeStore:
      return "qkv_bias_rope_store";
    case Op::Scale:
      return "scale";
    case Op::SoftCap:
      return "softcap";
    case Op::GeGlu:
      return "geglu";
    case Op::Count:
      break;
  }
  return "?";
}

// SwiGlu writes silu(gate) * up over gate: each element is read before it is written, so the
// CPU and simulated kernels are alias-safe, and the prefill peak (gate, up and the product
// all FFN-wide) drops by one FFN-wide buffer — what brings Qwen2.5-0.5B prefill 512 under
// 30 MiB. llama.cpp runs its GLU ops in place for the same reason. GeGlu likewise; Scale and
// SoftCap are element-wise maps of their one source.
bool op_is_inplace(Op op) {
  return op == Op::Silu || op == Op::Rope || op == Op::QkvBiasRopeStore || op == Op::SwiGlu ||
         op == Op::Scale || op == Op::SoftCap || op == Op::GeGlu;
}

namespace {

nlohmann::json params_json(const Node& n) {
  nlohmann::json p = nlohmann::json::object();
  switch (n.op) {
    case Op::RmsNorm:
      p["eps"] = n.p.eps;
      break;
    case Op::Rope:
      p["mode"] = static_cast<int>(n.p.rope_mode);
      p["n_rot"] = n.p.n_rot;
      p["freq_base"] = n.p.freq_base;
      p["freq_scale"] = n.p.freq_scale;
      break;
    case Op::Scale:
      p["scale"] = n.p.scale;
      break;
    case Op::SoftCap:
      p["softcap"] = n.p.softcap;
      break;
    case Op::View:
      p["offset"] = n.p.view_offset;
      p["row_stride"] = n.p.view_row_stride;
      break;
    case Op::Weight:
      p["weight_id"] = n.p.weight_id;
      break;
    case Op::KvStore:
    case Op::Attention:
    case Op::QkvBiasRopeStore:
      p["layer"] = n.p.layer;
      p["n_ctx"] = n.p.n_ctx;
      p["n_head"] = n.p.n_head;
      p["n_head_kv"] = n.p.n_head_kv;
      p["head_dim"] = n.p.head_dim;
      p["type_k"] = std::string(type_name(n.p.kv_type_k));
      p["type_v"] = std::string(type_name(n.p.kv_type_v));
      if (n.op == Op::Attention) {
        p["scale"] = n.p.scale;
        if (n.p.softcap > 0.0f) p["softcap"] = n.p.softcap;
        if (n.p.window > 0) p["window"] = n.p.window;
      }
      if (n.op == Op::QkvBiasRopeStore) {
        p["mode"] = static_cast<int>(n.p.rope_mode);
        p["n_rot"] = n.p.n_rot;
        p["freq_base"] = n.p.freq_base;
      }
      break;
    default:
      break;
  }
  return p;
}

}  // namespace

std::string Graph::to_json() const {
  nlohmann::json j;
  j["n_nodes"] = nodes_.size();
  auto& arr = j["nodes"] = nlohmann::json::array();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    arr.push_back({{"id", i},
                   {"name", n.name},
                   {"op", op_name(n.op)},
                   {"type", type_name(n.type)},
                   {"ne", n.ne},
                   {"backend", backend_name(n.backend)},
                   {"src", n.src},
                   {"bytes", n.n_bytes()},
                   {"params", params_json(n)}});
  }
  j["inputs"] = inputs_;
  j["outputs"] = outputs_;
  auto& w = j["weights"] = nlohmann::json::array();
  for (const WeightRef& r : weights_) {
    w.push_back(
        {{"name", r.name}, {"type", type_name(r.type)}, {"ne", r.ne}, {"bytes", r.n_bytes}});
  }
  return j.dump(1);
}

std::string Graph::to_dot() const {
  std::string out = "digraph minfer {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const char* color = n.op == Op::Weight              ? "gray90"
                        : n.op == Op::Input             ? "lightyellow"
                        : n.backend == BackendKind::Sim ? "lightblue"
                                                        : "white";
    // Escape quotes in names so a hostile tensor name cannot break the DOT syntax.
    std::string name;
    for (char c : n.name) {
      if (c == '"' || c == '\\') name.push_back('\\');
      name.push_back(c);
    }
    out += fmt::format(
        "  n{} [label=\"{}: {}\\n{} [{},{},{},{}] {}\", style=filled, fillcolor={}];\n", i, i, name,
        op_name(n.op), n.ne[0], n.ne[1], n.ne[2], n.ne[3], backend_name(n.backend), color);
    for (NodeId s : n.src) out += fmt::format("  n{} -> n{};\n", s, i);
  }
  for (NodeId o : outputs_) out += fmt::format("  n{} [peripheries=2];\n", o);
  out += "}\n";
  return out;
}

}  // namespace minfer
