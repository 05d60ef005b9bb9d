#include "alloc/allocator.h"

#include <algorithm>
#include <cstring>

#include "alloc/arena.h"
#include "common/error.h"

namespace minfer {
namespace {

size_t u(NodeId id) {
  return static_cast<size_t>(id);
}
size_t bi(BackendKind k) {
  return static_cast<size_t>(k);
}

// Bytes of the persistent K and V regions a KV node needs: n_ctx rows of n_kv_embd elements of
// the node's KV types.
struct KvBytes {
  uint64_t k = 0, v = 0;
};
KvBytes kv_region_bytes(const Node& n) {
  const int64_t n_kv_embd =
      n.op == Op::KvStore ? n.ne[0] : int64_t{n.p.head_dim} * int64_t{n.p.n_head_kv};
  // n_ctx and the widths come from flags and files: a product past 64 bits is an error, not a
  // wrapped small region that later writes would overrun.
  KvBytes b;
  if (n.p.n_ctx < 0 || n_kv_embd < 0 ||
      __builtin_mul_overflow(row_size(n.p.kv_type_k, n_kv_embd), static_cast<uint64_t>(n.p.n_ctx),
                             &b.k) ||
      __builtin_mul_overflow(row_size(n.p.kv_type_v, n_kv_embd), static_cast<uint64_t>(n.p.n_ctx),
                             &b.v))
    fail(ErrorKind::InvalidArgument,
         "allocator: '{}': KV region of {} tokens x {} values overflows 64-bit byte counts", n.name,
         n.p.n_ctx, n_kv_embd);
  return b;
}

}  // namespace

uint64_t size_class_bytes(uint64_t bytes) {
  constexpr uint64_t kStep = 16 * 1024;
  if (bytes <= kStep) {
    uint64_t c = 64;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + kStep - 1) / kStep * kStep;
}

GraphAllocator::~GraphAllocator() = default;

void GraphAllocator::reset() {
  release_plan_buffers();
  for (const KvPair& p : kv_) {
    if (!p.k.valid()) continue;
    backends_[bi(p.k.backend)]->release(p.k.id);
    backends_[bi(p.v.backend)]->release(p.v.id);
  }
  kv_.clear();
  for (BufRef& a : arena_) {
    if (a.valid()) backends_[bi(a.backend)]->release(a.id);
    a = BufRef{};
  }
  plan_ = AllocPlan{};
  ++arena_version_;  // saved plans pointed into the released arenas
}

void GraphAllocator::set_backend(Backend& b) {
  MINFER_ASSERT(!plan_valid_ && kv_.empty(), "allocator: backends must be set before planning");
  backends_[bi(b.kind())] = &b;
}

void GraphAllocator::own_backend(std::unique_ptr<Backend> b) {
  MINFER_ASSERT(b != nullptr, "allocator: null backend");
  set_backend(*b);
  owned_.push_back(std::move(b));
}

void GraphAllocator::release_plan_buffers() {
  for (const Held& h : held_) backends_[bi(h.backend)]->release(h.id);
  held_.clear();
  // Staging buffers rejoin the free list only now, at rebuild, where the next walk's monotonic
  // sweep makes recycling them safe again (design §2.7).
  for (const StagingBuf& s : plan_.staging)
    if (s.owned) backends_[bi(s.buf.backend)]->release(s.buf.id);
  plan_.staging.clear();
  plan_valid_ = false;
  plan_.valid = false;
}

// Everything that could make the walk fail is checked before any buffer changes hands.
void GraphAllocator::check_backends(const Graph& g, const Liveness& lv) const {
  std::vector<int8_t> layer_backend(kv_.size(), -1);
  for (size_t l = 0; l < kv_.size(); ++l)
    if (kv_[l].k.valid()) layer_backend[l] = static_cast<int8_t>(kv_[l].k.backend);
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i) {
    const Node& n = g.node(i);
    if (!lv.executes(i) && !(n.op == Op::Input)) continue;
    if (backend(n.backend) == nullptr) {
      fail(ErrorKind::InvalidArgument, "allocator: node {} '{}' is on backend {}, not registered",
           i, n.name, backend_name(n.backend));
    }
    if (!op_uses_kv(n.op)) continue;
    if (n.p.kv_block_size > 0) {
      // Paged: the KV cache owns the rows (host memory today), nothing to plan here.
      if (kv_source_ == nullptr)
        fail(ErrorKind::InvalidArgument, "allocator: '{}' uses a paged KV cache but none is set",
             n.name);
      continue;
    }
    const auto layer = static_cast<size_t>(n.p.layer);
    if (layer >= layer_backend.size()) layer_backend.resize(layer + 1, -1);
    if (n.op == Op::Attention && layer_backend[layer] < 0) {
      fail(ErrorKind::InvalidArgument, "allocator: attention '{}' reads layer {} before any store",
           n.name, layer);
    }
    if (layer_backend[layer] < 0) layer_backend[layer] = static_cast<int8_t>(n.backend);
    if (layer_backend[layer] != static_cast<int8_t>(n.backend)) {
      fail(ErrorKind::InvalidArgument,
           "allocator: node '{}' uses layer {}'s KV on {}, but the regions live on {}", n.name,
           layer, backend_name(n.backend),
           backend_name(static_cast<BackendKind>(layer_backend[layer])));
    }
    if (layer >= kv_.size() || !kv_[layer].k.valid()) continue;
    const KvPair& have = kv_[layer];
    if (n.p.kv_type_k != have.k_type || n.p.kv_type_v != have.v_type) {
      fail(ErrorKind::InvalidArgument,
           "allocator: '{}' uses KV types {}/{} for layer {}, but its regions hold {}/{} (the KV "
           "cache types must stay the same for the allocator's life)",
           n.name, type_name(n.p.kv_type_k), type_name(n.p.kv_type_v), layer,
           type_name(have.k_type), type_name(have.v_type));
    }
    const KvBytes need = kv_region_bytes(n);
    if (n.op != Op::Attention && (need.k > have.k.len || need.v > have.v.len)) {
      fail(ErrorKind::InvalidArgument,
           "allocator: '{}' needs a {}-byte KV region for layer {}, but it was created with {} "
           "bytes (n_ctx must stay the same for the allocator's life)",
           n.name, need.k, layer, have.k.len);
    }
  }
}

KvPair GraphAllocator::ensure_kv(int32_t layer, BackendKind b, const Node& n) {
  const auto l = static_cast<size_t>(layer);
  if (l >= kv_.size()) kv_.resize(l + 1);
  if (kv_[l].k.valid()) return kv_[l];
  MINFER_ASSERT(n.op != Op::Attention, "allocator: KV region created by attention");
  Backend& be = *backends_[bi(b)];
  const KvBytes bytes = kv_region_bytes(n);
  // Persistent: fresh ids that never enter buf tracking, so no sweep can release them.
  kv_[l].k = BufRef{b, be.alloc_fresh(bytes.k), 0, bytes.k};
  kv_[l].v = BufRef{b, be.alloc_fresh(bytes.v), 0, bytes.v};
  kv_[l].k_type = n.p.kv_type_k;
  kv_[l].v_type = n.p.kv_type_v;
  return kv_[l];
}

const AllocPlan& GraphAllocator::alloc_graph(const Graph& g) {
  // Validation only: the Kahn order is discarded; liveness and execution use build order (G3).
  g.validate();
  Liveness lv = compute_liveness(g);
  check_backends(g, lv);

  release_plan_buffers();
  plan_.generation = ++generation_;
  plan_.live = std::move(lv);
  plan_.node_buf.assign(g.size(), BufRef{});
  plan_.interval_class.assign(plan_.live.intervals.size(), 0);
  plan_.interval_buf.assign(plan_.live.intervals.size(), UINT32_MAX);
  plan_.stats = AllocStats{};
  if (planner_ == PlannerKind::Arena) prepare_arenas(g);
  walk(g);
  plan_staging(g);
  plan_.stats.kv_bytes = kv_bytes();
  for (size_t b = 0; b < kNumBackends; ++b)
    if (backends_[b] != nullptr) plan_.stats.pool_bytes[b] = backends_[b]->pool_bytes();
  plan_.arena_version = arena_version_;
  plan_.valid = true;
  plan_valid_ = true;
  return plan_;
}

bool GraphAllocator::swap_plan(AllocPlan& other) {
  MINFER_ASSERT(can_swap_plans(), "allocator: swap_plan with a plan that holds buffers");
  for (const StagingBuf& sb : other.staging)
    MINFER_ASSERT(!sb.owned, "allocator: a saved plan holds staging buffers");
  plan_.valid = plan_valid_;
  std::swap(plan_, other);
  // Arena offsets index the current arenas; a plan made before they grew points at released
  // buffers.
  plan_valid_ = plan_.valid && plan_.arena_version == arena_version_;
  return plan_valid_;
}

// One StagingBuf and one interval (ivs[k] for out[k]) per (source, consuming backend).
std::vector<StagingBuf> GraphAllocator::staging_needs(const Graph& g, const Liveness& lv,
                                                      std::vector<LiveInterval>* ivs) const {
  std::vector<StagingBuf> out;
  for (NodeId c = 0; c < static_cast<NodeId>(g.size()); ++c) {
    if (!lv.executes(c)) continue;
    const BackendKind dst = g.node(c).backend;
    for (NodeId s : g.node(c).src) {
      // Where the source's bytes are: its storage's interval, or a contiguous KV region (on
      // its node's backend); weights, paged KV and dead nodes have no buffer to stage.
      const LiveInterval* iv = lv.interval_for(s);
      BackendKind from = g.node(s).backend;
      if (iv != nullptr) {
        from = iv->backend;
      } else if (!(lv.kind[u(s)] == StorageKind::KvRegion && g.node(s).p.kv_block_size == 0)) {
        continue;
      }
      if (from == dst) continue;
      size_t k = 0;
      while (k < out.size() && !(out[k].src == s && out[k].dst == dst)) ++k;
      if (k == out.size()) {
        out.push_back(StagingBuf{s, dst, BufRef{dst, UINT32_MAX, 0, lv.len[u(s)]}, false});
        ivs->push_back(LiveInterval{s, dst, lv.first[u(s)], c, lv.len[u(s)], false});
      }
      (*ivs)[k].last = c;  // readers come in build order: the last one stays
    }
  }
  return out;
}

void GraphAllocator::prepare_arenas(const Graph& g) {
  // The staging windows are intervals like the others, appended after the graph's own.
  std::vector<LiveInterval> staged;
  arena_staging_ = staging_needs(g, plan_.live, &staged);
  const ArenaPlan ap = [&] {
    if (staged.empty()) return plan_arena(plan_.live);
    Liveness lv = plan_.live;
    lv.intervals.insert(lv.intervals.end(), staged.begin(), staged.end());
    return plan_arena(lv);
  }();
  arena_offset_ = ap.interval_offset;
  for (size_t b = 0; b < kNumBackends; ++b) {
    plan_.stats.plan_bytes[b] = ap.arena_bytes[b];
    plan_.stats.lower_bound_bytes[b] = ap.lower_bound[b];
    if (ap.arena_bytes[b] == 0) continue;
    Backend* be = backends_[b];
    MINFER_ASSERT(be != nullptr, "allocator: intervals on an unregistered backend");
    if (arena_[b].valid() && arena_[b].len >= ap.arena_bytes[b]) continue;
    // Grow: a fresh buffer (never from the free list); the old one goes back to the pool.
    if (arena_[b].valid()) be->release(arena_[b].id);
    ++arena_version_;
    const auto kind = static_cast<BackendKind>(b);
    arena_[b] = BufRef{kind, be->alloc_fresh(ap.arena_bytes[b]), 0, ap.arena_bytes[b]};
  }
  plan_.stats.plan_us = ap.plan_us;
}

void GraphAllocator::walk(const Graph& g) {
  const Liveness& lv = plan_.live;
  AllocStats& st = plan_.stats;
  // Intervals in (first, root) order: inputs (first = 0) are allocated before step 0 runs.
  std::vector<int32_t> by_first(lv.intervals.size());
  for (size_t i = 0; i < by_first.size(); ++i) by_first[i] = static_cast<int32_t>(i);
  std::stable_sort(by_first.begin(), by_first.end(), [&](int32_t a, int32_t b) {
    return lv.intervals[static_cast<size_t>(a)].first < lv.intervals[static_cast<size_t>(b)].first;
  });
  std::vector<std::pair<BackendKind, uint32_t>> seen_bufs;  // distinct ids for stats
  size_t next = 0;
  for (int32_t step = 0; step < lv.n_steps; ++step) {
    // Sweep: readers of these buffers all ran before `step`, in execution (= build) order.
    std::erase_if(held_, [&](const Held& h) {
      if (h.last >= step) return false;
      backends_[bi(h.backend)]->release(h.id);
      return true;
    });
    for (;
         next < by_first.size() && lv.intervals[static_cast<size_t>(by_first[next])].first == step;
         ++next) {
      const auto iv_idx = static_cast<size_t>(by_first[next]);
      const LiveInterval& iv = lv.intervals[iv_idx];
      uint64_t cls = 0, offset = 0;
      uint32_t id = 0;
      if (planner_ == PlannerKind::Arena) {  // a window of the backend's arena, never released
        cls = iv.bytes;
        id = arena_[bi(iv.backend)].id;
        offset = arena_offset_[iv_idx];
      } else {
        cls = size_class_bytes(iv.bytes);
        id = backends_[bi(iv.backend)]->alloc(cls);
        held_.push_back(Held{iv.last, iv.backend, id});
      }
      plan_.interval_class[iv_idx] = cls;
      plan_.interval_buf[iv_idx] = id;
      plan_.node_buf[u(iv.root)] = BufRef{iv.backend, id, offset, iv.bytes};
      st.naive_bytes += iv.bytes;
      ++st.n_intervals;
      const auto key = std::make_pair(iv.backend, id);
      if (std::find(seen_bufs.begin(), seen_bufs.end(), key) == seen_bufs.end()) {
        seen_bufs.push_back(key);
        // Arena: the arena's planned height, counted once (prepare_arenas), not per interval.
        if (planner_ == PlannerKind::SizeClass) st.plan_bytes[bi(iv.backend)] += cls;
        ++st.n_buffers;
      }
    }
    const Node& n = g.node(step);
    switch (lv.kind[u(step)]) {
      case StorageKind::KvRegion:
        // Paged: no buffer; the scheduler resolves the cache's rows through the KvSource.
        if (n.p.kv_block_size == 0) plan_.node_buf[u(step)] = ensure_kv(n.p.layer, n.backend, n).k;
        break;
      case StorageKind::Own:
        if (n.op == Op::QkvBiasRopeStore && n.p.kv_block_size == 0)
          ensure_kv(n.p.layer, n.backend, n);
        break;
      case StorageKind::View:
      case StorageKind::InPlace: {
        const NodeId root = lv.root[u(step)];
        const BufRef& rb = plan_.node_buf[u(root)];
        if (rb.valid()) {  // invalid for views of weights: the scheduler resolves those
          plan_.node_buf[u(step)] =
              BufRef{rb.backend, rb.id, rb.offset + lv.offset[u(step)], lv.len[u(step)]};
        }
        if (lv.kind[u(step)] == StorageKind::View) ++st.n_views;
        if (lv.kind[u(step)] == StorageKind::InPlace) {
          ++st.n_inplace;
          if (n.op == Op::QkvBiasRopeStore && n.p.kv_block_size == 0) {
            ensure_kv(n.p.layer, n.backend, n);
          }
        }
        break;
      }
      case StorageKind::None:
      case StorageKind::Weight:
        break;
    }
  }
  MINFER_ASSERT(next == by_first.size(), "allocator: an interval starts past the last step");
}

void GraphAllocator::plan_staging(const Graph& g) {
  const Liveness& lv = plan_.live;
  if (planner_ == PlannerKind::Arena) {
    const size_t base = lv.intervals.size();
    for (size_t k = 0; k < arena_staging_.size(); ++k) {
      StagingBuf sb = arena_staging_[k];
      const size_t b = bi(sb.dst);
      sb.buf = BufRef{sb.dst, arena_[b].id, arena_offset_[base + k], sb.buf.len};
      plan_.staging.push_back(sb);
      plan_.stats.staging_bytes += sb.buf.len;
    }
    return;
  }
  for (NodeId c = 0; c < static_cast<NodeId>(g.size()); ++c) {
    if (!lv.executes(c)) continue;
    const BackendKind dst = g.node(c).backend;
    for (NodeId s : g.node(c).src) {
      const BufRef& sb = plan_.node_buf[u(s)];
      if (!sb.valid() || sb.backend == dst || plan_.staging_for(s, dst) != nullptr) continue;
      // Fresh, never from the free list: at execute time the free list can hold ids whose
      // contents a later node still reads (design §2.7).
      const uint32_t id = backends_[bi(dst)]->alloc_fresh(size_class_bytes(sb.len));
      plan_.staging.push_back(StagingBuf{s, dst, BufRef{dst, id, 0, sb.len}});
      plan_.stats.staging_bytes += size_class_bytes(sb.len);
    }
  }
}

void GraphAllocator::fill_input(const Graph& g, std::string_view name, GgmlType type,
                                const void* data, size_t bytes) {
  if (!plan_valid_ || plan_.node_buf.size() != g.size()) {
    fail(ErrorKind::InvalidArgument, "allocator: fill_input('{}') before alloc_graph of this graph",
         name);
  }
  NodeId id = kNoNode;
  for (NodeId i : g.inputs())
    if (g.node(i).name == name) id = i;
  if (id == kNoNode) fail(ErrorKind::InvalidArgument, "allocator: no input named '{}'", name);
  const Node& n = g.node(id);
  if (n.type != type) {
    fail(ErrorKind::InvalidArgument, "allocator: input '{}' is {}, filled as {}", name,
         type_name(n.type), type_name(type));
  }
  const BufRef& b = plan_.node_buf[u(id)];
  MINFER_ASSERT(b.valid(), "allocator: input without a buffer");
  if (bytes > b.len) {
    fail(ErrorKind::InvalidArgument, "allocator: input '{}' holds {} values, got {}", name,
         b.len / 4, bytes / 4);
  }
  backends_[bi(b.backend)]->copy_from_host(b.id, b.offset, data, bytes);
}

void GraphAllocator::fill_input_i32(const Graph& g, std::string_view name,
                                    std::span<const int32_t> data) {
  // An i32 and the f32 with the same bit pattern are the same 4 bytes: a memcpy is the
  // bit-pattern ride of design §2.6, lossless for every value.
  fill_input(g, name, GgmlType::I32, data.data(), data.size_bytes());
}

void GraphAllocator::fill_input_f32(const Graph& g, std::string_view name,
                                    std::span<const float> data) {
  fill_input(g, name, GgmlType::F32, data.data(), data.size_bytes());
}

Backend* GraphAllocator::backend_of(const BufRef& b) const {
  MINFER_ASSERT(b.valid(), "allocator: an invalid BufRef");
  Backend* be = backends_[bi(b.backend)];
  MINFER_ASSERT(be != nullptr, "allocator: BufRef on an unregistered backend");
  return be;
}

uint8_t* GraphAllocator::kernel_ptr(const BufRef& b) const {
  return backend_of(b)->kernel_ptr(b.id) + b.offset;
}

uint8_t* GraphAllocator::host_ptr(const BufRef& b) const {
  uint8_t* p = backend_of(b)->host_ptr(b.id);
  return p == nullptr ? nullptr : p + b.offset;
}

const BufRef& GraphAllocator::node_buf_checked(NodeId id) const {
  if (!plan_valid_ || id < 0 || u(id) >= plan_.node_buf.size() || !plan_.node_buf[u(id)].valid()) {
    fail(ErrorKind::InvalidArgument, "allocator: node {} has no buffer in the current plan", id);
  }
  return plan_.node_buf[u(id)];
}

std::span<const float> GraphAllocator::node_f32(NodeId id) const {
  const BufRef& b = node_buf_checked(id);
  const uint8_t* p = host_ptr(b);
  MINFER_ASSERT(p != nullptr, "allocator: node_f32 on memory that is not host-addressable");
  return {reinterpret_cast<const float*>(p), static_cast<size_t>(b.len / 4)};
}

void GraphAllocator::copy_node_to_host(NodeId id, void* dst, size_t bytes) const {
  const BufRef& b = node_buf_checked(id);
  if (bytes > b.len) {
    fail(ErrorKind::InvalidArgument, "allocator: node {} holds {} bytes, {} requested", id, b.len,
         bytes);
  }
  backend_of(b)->copy_to_host(b.id, b.offset, dst, bytes);
}

void GraphAllocator::copy(const BufRef& from, const BufRef& to, size_t bytes) const {
  Backend* src = backend_of(from);
  Backend* dst = backend_of(to);
  MINFER_ASSERT(bytes <= from.len && bytes <= to.len, "allocator: copy beyond a window");
  if (src == dst) {
    src->copy_buffer(from.id, from.offset, to.id, to.offset, bytes);
  } else if (uint8_t* d = host_ptr(to); d != nullptr) {
    src->copy_to_host(from.id, from.offset, d, bytes);  // waits for the source's queue
  } else if (const uint8_t* s = host_ptr(from); s != nullptr) {
    dst->copy_from_host(to.id, to.offset, s, bytes);
  } else {
    // Device to device across backends would need a host bounce buffer; no such pair exists.
    MINFER_ASSERT(false, "allocator: copy between two non-host-addressable backends");
  }
}

std::optional<KvPair> GraphAllocator::kv_pair(int32_t layer) const {
  if (layer < 0 || static_cast<size_t>(layer) >= kv_.size()) return std::nullopt;
  const KvPair& p = kv_[static_cast<size_t>(layer)];
  if (!p.k.valid()) return std::nullopt;
  return p;
}

uint64_t GraphAllocator::kv_bytes() const {
  uint64_t total = 0;
  for (const KvPair& p : kv_)
    if (p.k.valid()) total += p.k.len + p.v.len;
  return total;
}

AllocStats GraphAllocator::stats() const {
  AllocStats s = plan_.stats;
  s.kv_bytes = kv_bytes();
  for (size_t b = 0; b < kNumBackends; ++b)
    if (backends_[b] != nullptr) s.pool_bytes[b] = backends_[b]->pool_bytes();
  return s;
}

}  // namespace minfer
