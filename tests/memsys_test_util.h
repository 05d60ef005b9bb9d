// Test-only helpers for the memory-system tests (alloc, sched, sim, cache):
//  * test_exec: a tiny host executor (f32 kernels for every Op, simple but exact enough to
//    compare plans bit for bit — the same kernels run in the same order on every path);
//  * reference_eval: runs a graph WITHOUT the allocator (every node its own vector), the
//    ground truth the planned execution must reproduce exactly;
//  * Backends: an immediate "cpu" and a queued "sim" SimBackend on test_exec.
#pragma once

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "backend/sim/sim_backend.h"
#include "common/error.h"

namespace minfer::testing {

inline int32_t as_i32(float f) {
  int32_t v;
  std::memcpy(&v, &f, 4);
  return v;
}
inline std::vector<float> i32_bits(const std::vector<int32_t>& v) {
  std::vector<float> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

// Strided read access to a node's window (views carry a row stride; others are contiguous).
struct In {
  const float* p = nullptr;
  const Node* n = nullptr;
  int64_t stride = 0;
  float at(int64_t i) const {
    const int64_t row = i / n->ne[0], col = i % n->ne[0];
    return p[row * stride + col];
  }
  float bcast(const std::array<int64_t, 4>& ne_out, int64_t i) const {
    int64_t idx[4];
    for (int d = 0; d < 4; ++d) {
      idx[d] = i % ne_out[d];
      i /= ne_out[d];
    }
    int64_t j = 0, mul = 1;
    for (int d = 0; d < 4; ++d) {
      j += (idx[d] % n->ne[d]) * mul;
      mul *= n->ne[d];
    }
    return at(j);
  }
};

inline In input_of(const NodeArgs& a, size_t k) {
  const Node& s = a.graph->node(a.graph->node(a.node).src[k]);
  In in;
  in.p = static_cast<const float*>(a.src[k]);
  in.n = &s;
  in.stride = (s.op == Op::View && s.p.view_row_stride != 0) ? s.p.view_row_stride : s.ne[0];
  return in;
}

inline void rope_pair(float* x, int32_t pos, int32_t i, int32_t n_rot, float base) {
  const float theta = static_cast<float>(pos) * std::pow(base, -2.0f * i / n_rot);
  const float c = std::cos(theta), s = std::sin(theta);
  const float x0 = x[2 * i], x1 = x[2 * i + 1];  // both read before either is written
  x[2 * i] = x0 * c - x1 * s;
  x[2 * i + 1] = x0 * s + x1 * c;
}

inline void test_attention(const NodeArgs& a, const Node& n) {
  const In q = input_of(a, 0), pos = input_of(a, 2);
  const int64_t nt = pos.n->ne[0], hd = n.p.head_dim, nh = n.p.n_head, nkv = n.p.n_head_kv;
  const int64_t q_col = q.n->n_elements() / nt, kv_w = hd * nkv;
  const auto* K = static_cast<const float*>(a.kv_k);
  const auto* V = static_cast<const float*>(a.kv_v);
  float* out = static_cast<float*>(a.out);
  // Kept across calls (capacity n_ctx), so steady-state executes do not allocate.
  static thread_local std::vector<float> w;
  w.reserve(static_cast<size_t>(n.p.n_ctx));
  for (int64_t t = 0; t < nt; ++t) {
    const int32_t p = as_i32(pos.at(t));
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t kh = h / (nh / nkv);
      w.assign(static_cast<size_t>(p + 1), 0.0f);
      float mx = -INFINITY, sum = 0;
      for (int32_t j = 0; j <= p; ++j) {
        float d = 0;
        for (int64_t e = 0; e < hd; ++e)
          d += q.at(t * q_col + h * hd + e) * K[j * kv_w + kh * hd + e];
        w[j] = d * n.p.scale;
        mx = std::max(mx, w[j]);
      }
      for (auto& x : w) sum += (x = std::exp(x - mx));
      for (int64_t e = 0; e < hd; ++e) {
        float acc = 0;
        for (int32_t j = 0; j <= p; ++j) acc += w[j] / sum * V[j * kv_w + kh * hd + e];
        out[t * nh * hd + h * hd + e] = acc;
      }
    }
  }
}

inline void test_store(const NodeArgs& a, const Node& n, const float* k, const float* v,
                       int64_t width, int64_t col, const In& pos) {
  const int64_t nt = pos.n->ne[0];
  auto* K = static_cast<float*>(a.kv_k);
  auto* V = static_cast<float*>(a.kv_v);
  for (int64_t t = 0; t < nt; ++t) {
    const int32_t p = as_i32(pos.at(t));
    if (p < 0 || p >= n.p.n_ctx) fail(ErrorKind::InvalidArgument, "kv position {} >= n_ctx", p);
    for (int64_t e = 0; e < width; ++e) {
      K[p * width + e] = k[t * col + e];
      V[p * width + e] = v[t * col + e];
    }
  }
}

inline void test_matmul(const NodeArgs& a, const Node& n, float* out) {
  const auto* w = static_cast<const float*>(a.src[0]);
  const In x = input_of(a, 1);
  const int64_t n_in = input_of(a, 0).n->ne[0], n_out = n.ne[0], m = n.n_elements() / n_out;
  for (int64_t j = 0; j < m; ++j)
    for (int64_t o = 0; o < n_out; ++o) {
      float acc = 0;
      for (int64_t i = 0; i < n_in; ++i) acc += w[o * n_in + i] * x.at(j * n_in + i);
      out[j * n_out + o] = acc;
    }
}

inline void test_rms_norm(const NodeArgs& a, const Node& n, float* out) {
  const In x = input_of(a, 0);
  const auto* w = n.src.size() > 1 ? static_cast<const float*>(a.src[1]) : nullptr;
  for (int64_t j = 0; j < n.n_elements() / n.ne[0]; ++j) {
    float ss = 0;
    for (int64_t e = 0; e < n.ne[0]; ++e) ss += x.at(j * n.ne[0] + e) * x.at(j * n.ne[0] + e);
    const float r = 1.0f / std::sqrt(ss / n.ne[0] + n.p.eps);
    for (int64_t e = 0; e < n.ne[0]; ++e)
      out[j * n.ne[0] + e] = x.at(j * n.ne[0] + e) * r * (w ? w[e] : 1.0f);
  }
}

inline void test_rope(const NodeArgs& a, const Node& n, float* out) {
  const In x = input_of(a, 0), pos = input_of(a, 1);
  const int64_t ne = n.n_elements(), hd = n.ne[0], rows_per_tok = n.ne[1];
  for (int64_t i = 0; i < ne; ++i) out[i] = x.at(i);  // no-op when in place
  for (int64_t r = 0; r < ne / hd; ++r) {
    const int32_t p = as_i32(pos.at(r / rows_per_tok));
    for (int32_t i = 0; i < n.p.n_rot / 2; ++i)
      rope_pair(out + r * hd, p, i, n.p.n_rot, n.p.freq_base);
  }
}

inline void test_qkv_bias_rope_store(const NodeArgs& a, const Node& n, float* out) {
  const In x = input_of(a, 0), b = input_of(a, 1), pos = input_of(a, 2);
  const int64_t col = n.ne[0], hd = n.p.head_dim, nh = n.p.n_head, nkv = n.p.n_head_kv;
  for (int64_t i = 0; i < n.n_elements(); ++i) out[i] = x.at(i) + b.bcast(n.ne, i);
  for (int64_t t = 0; t < n.ne[1]; ++t) {
    const int32_t p = as_i32(pos.at(t));
    for (int64_t h = 0; h < nh + nkv; ++h)
      for (int32_t i = 0; i < n.p.n_rot / 2; ++i)
        rope_pair(out + t * col + h * hd, p, i, n.p.n_rot, n.p.freq_base);
  }
  test_store(a, n, out + nh * hd, out + (nh + nkv) * hd, nkv * hd, col, pos);
}

inline void test_exec(const NodeArgs& a) {
  const Node& n = a.graph->node(a.node);
  float* out = static_cast<float*>(a.out);
  const int64_t ne = n.n_elements();
  switch (n.op) {
    case Op::Add:
    case Op::Mul: {
      const In x = input_of(a, 0), y = input_of(a, 1);
      for (int64_t i = 0; i < ne; ++i) {
        out[i] = n.op == Op::Add ? x.at(i) + y.bcast(n.ne, i) : x.at(i) * y.bcast(n.ne, i);
      }
      break;
    }
    case Op::Silu: {
      const In x = input_of(a, 0);
      for (int64_t i = 0; i < ne; ++i) out[i] = x.at(i) / (1.0f + std::exp(-x.at(i)));
      break;
    }
    case Op::SwiGlu: {
      const In x = input_of(a, 0), y = input_of(a, 1);
      for (int64_t i = 0; i < ne; ++i) out[i] = x.at(i) / (1.0f + std::exp(-x.at(i))) * y.at(i);
      break;
    }
    case Op::MatMul:
      test_matmul(a, n, out);
      break;
    case Op::GetRows: {
      const auto* t = static_cast<const float*>(a.src[0]);
      const In ids = input_of(a, 1);
      for (int64_t j = 0; j < n.ne[1]; ++j)
        for (int64_t e = 0; e < n.ne[0]; ++e)
          out[j * n.ne[0] + e] = t[as_i32(ids.at(j)) * n.ne[0] + e];
      break;
    }
    case Op::RmsNorm:
      test_rms_norm(a, n, out);
      break;
    case Op::Rope:
      test_rope(a, n, out);
      break;
    case Op::KvStore: {
      const In pos = input_of(a, 2);
      const int64_t w = n.ne[0];
      // k / v are contiguous in the test graphs
      test_store(a, n, static_cast<const float*>(a.src[0]), static_cast<const float*>(a.src[1]), w,
                 w, pos);
      break;
    }
    case Op::QkvBiasRopeStore:
      test_qkv_bias_rope_store(a, n, out);
      break;
    case Op::Attention:
      test_attention(a, n);
      break;
    default:
      fail(ErrorKind::Unsupported, "test_exec: op {}", op_name(n.op));
  }
}

// Immediate "cpu" and queued "sim" backends registered with an allocator.
struct Backends {
  SimBackend cpu{test_exec, {}, SimOptions{BackendKind::Cpu, false}};
  SimBackend sim{test_exec, {}, SimOptions{BackendKind::Sim, true}};
  void attach(GraphAllocator& a) {
    a.set_backend(cpu);
    a.set_backend(sim);
  }
};

// Values of a node's window (views: strided).
inline std::vector<float> read_node(const Graph& g, NodeId id, const float* p) {
  const Node& n = g.node(id);
  In in{p, &n, (n.op == Op::View && n.p.view_row_stride != 0) ? n.p.view_row_stride : n.ne[0]};
  std::vector<float> v(static_cast<size_t>(n.n_elements()));
  for (int64_t i = 0; i < n.n_elements(); ++i) v[static_cast<size_t>(i)] = in.at(i);
  return v;
}

// Persistent K/V for reference_eval (survives calls, like the allocator's regions).
struct RefKv {
  std::map<int32_t, std::pair<std::vector<float>, std::vector<float>>> layers;
};

// Every node its own vector, build order: the ground truth. Returns each output's values.
inline std::map<NodeId, std::vector<float>> reference_eval(
    const Graph& g, const std::map<std::string, std::vector<float>>& inputs, RefKv& kv) {
  std::vector<std::vector<float>> own(g.size());
  std::vector<const float*> ptr(g.size(), nullptr);
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i) {
    const Node& n = g.node(i);
    if (n.op == Op::Weight) {
      ptr[i] = reinterpret_cast<const float*>(g.weights()[n.p.weight_id].data);
      continue;
    }
    if (n.op == Op::View) {
      ptr[i] = ptr[n.src[0]] + n.p.view_offset;
      continue;
    }
    own[i].assign(static_cast<size_t>(n.n_elements()), 0.0f);
    ptr[i] = own[i].data();
    if (n.op == Op::Input) {
      auto it = inputs.find(n.name);
      if (it != inputs.end()) std::copy(it->second.begin(), it->second.end(), own[i].begin());
      continue;
    }
    NodeArgs a;
    a.graph = &g;
    a.node = i;
    a.out = own[i].data();
    for (size_t k = 0; k < n.src.size(); ++k) a.src[k] = ptr[n.src[k]];
    if (op_uses_kv(n.op)) {
      auto& l = kv.layers[n.p.layer];
      const size_t sz = static_cast<size_t>(n.p.head_dim * n.p.n_head_kv * n.p.n_ctx);
      const size_t want = n.op == Op::KvStore ? static_cast<size_t>(n.n_elements()) : sz;
      if (l.first.size() < want) {
        l.first.resize(want);
        l.second.resize(want);
      }
      a.kv_k = l.first.data();
      a.kv_v = l.second.data();
    }
    test_exec(a);
  }
  std::map<NodeId, std::vector<float>> out;
  for (NodeId o : g.outputs()) out[o] = read_node(g, o, ptr[o]);
  return out;
}

}  // namespace minfer::testing
