#include "sched/scheduler.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace minfer {
namespace {

size_t u(NodeId id) {
  return static_cast<size_t>(id);
}

}  // namespace

const void* Scheduler::source_ptr(const Graph& g, NodeId src, BackendKind dst) const {
  const AllocPlan& ap = alloc_.plan();
  const Liveness& lv = ap.live;
  const NodeId root = lv.root[u(src)];
  if (root != kNoNode && lv.kind[u(root)] == StorageKind::Weight) {
    // A weight, or a view into one: the bytes are the model file's (host memory).
    const WeightRef& w = g.weights()[static_cast<size_t>(g.node(root).p.weight_id)];
    MINFER_ASSERT(w.data != nullptr || w.n_bytes == 0, "scheduler: weight without data");
    return w.data == nullptr ? nullptr : w.data + lv.offset[u(src)];
  }
  const BufRef& b = ap.node_buf[u(src)];
  const Node& sn = g.node(src);
  // A paged KV store has no buffer: its consumer reads the cache's rows (NodeArgs::kv_*).
  if (sn.op == Op::KvStore && sn.p.kv_block_size > 0) return nullptr;
  MINFER_ASSERT(b.valid(), "scheduler: live node reads a source without a buffer");
  if (b.backend == dst) return alloc_.kernel_ptr(b);
  const StagingBuf* s = ap.staging_for(src, dst);
  MINFER_ASSERT(s != nullptr, "scheduler: cross-backend source without a staging buffer");
  return alloc_.kernel_ptr(s->buf);
}

NodeArgs Scheduler::resolve(const Graph& g, NodeId id) const {
  const Node& n = g.node(id);
  NodeArgs a;
  a.graph = &g;
  a.node = id;
  const bool paged_store = n.op == Op::KvStore && n.p.kv_block_size > 0;
  a.out = paged_store ? nullptr : alloc_.kernel_ptr(alloc_.plan().node_buf[u(id)]);
  MINFER_ASSERT(n.src.size() <= a.src.size(), "scheduler: too many sources");
  for (size_t i = 0; i < n.src.size(); ++i) a.src[i] = source_ptr(g, n.src[i], n.backend);
  if (op_uses_kv(n.op) && n.p.kv_block_size > 0) {
    const KvSource* ks = alloc_.kv_source();
    MINFER_ASSERT(ks != nullptr, "scheduler: paged KV node without a KV source");
    const KvLayerRef r = ks->kv_layer(n.p.layer);
    a.kv_k = r.k;
    a.kv_v = r.v;
    a.kv_block_size = r.block_size;
    a.kv_block_stride = r.block_stride;
  } else if (op_uses_kv(n.op)) {
    const auto kv = alloc_.kv_pair(n.p.layer);
    MINFER_ASSERT(kv.has_value(), "scheduler: KV node without regions");
    a.kv_k = alloc_.kernel_ptr(kv->k);
    a.kv_v = alloc_.kernel_ptr(kv->v);
  }
  return a;
}

const SchedPlan& Scheduler::prepare(const Graph& g) {
  const AllocPlan& ap = alloc_.plan();
  if (!alloc_.has_plan() || ap.node_buf.size() != g.size()) {
    fail(ErrorKind::InvalidArgument, "scheduler: graph ({} nodes) was not planned by alloc_graph",
         g.size());
  }
  const Liveness& lv = ap.live;
  plan_ = SchedPlan{};
  plan_.alloc_generation = ap.generation;
  plan_.graph = &g;
  // Which (source, backend) staging copies were already scheduled by an earlier split.
  std::vector<uint8_t> staged(ap.staging.size(), 0);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (!lv.executes(id) || n.op == Op::Input) {
      ++plan_.n_skipped;
      continue;
    }
    Backend* be = alloc_.backend(n.backend);
    MINFER_ASSERT(be != nullptr, "scheduler: node on an unregistered backend");
    if (!be->supports(n)) {
      fail(ErrorKind::Unsupported, "scheduler: backend {} does not support node {} '{}' ({})",
           backend_name(n.backend), id, n.name, op_name(n.op));
    }
    if (plan_.splits.empty() || plan_.splits.back().backend != n.backend) {
      Split s;
      s.backend = n.backend;
      s.node_begin = s.node_end = static_cast<uint32_t>(plan_.args.size());
      s.copy_begin = s.copy_end = static_cast<uint32_t>(plan_.copies.size());
      plan_.splits.push_back(s);
    }
    Split& split = plan_.splits.back();
    for (NodeId s : n.src) {
      const StagingBuf* sb = ap.staging_for(s, n.backend);
      if (sb == nullptr) continue;
      const auto idx = static_cast<size_t>(sb - ap.staging.data());
      if (staged[idx]) continue;
      staged[idx] = 1;
      // Copies are appended in split order, so each split's copies stay contiguous.
      plan_.copies.push_back(StagingCopy{s, n.backend, ap.node_buf[u(s)], sb->buf, sb->buf.len});
      split.copy_end = static_cast<uint32_t>(plan_.copies.size());
    }
    plan_.args.push_back(resolve(g, id));
    split.node_end = static_cast<uint32_t>(plan_.args.size());
  }
  prepared_ = true;
  return plan_;
}

void Scheduler::execute(const Graph& g) {
  const uint64_t gen = alloc_.plan().generation;
  if (!prepared_ || plan_.graph != &g || plan_.alloc_generation != gen || !alloc_.has_plan()) {
    auto hit = std::find_if(kept_.begin(), kept_.end(), [&](const SchedPlan& p) {
      return p.graph == &g && p.alloc_generation == gen;
    });
    if (hit != kept_.end() && alloc_.has_plan()) {
      std::swap(*hit, plan_);  // the previous plan takes the found one's place
      if (!hit->graph) kept_.erase(hit);
    } else {
      if (prepared_) {
        if (kept_.size() >= kKeep) kept_.erase(kept_.begin());
        kept_.push_back(std::move(plan_));
      }
      prepare(g);
    }
  }
  Backend* prev = nullptr;
  for (const Split& s : plan_.splits) {
    Backend* be = alloc_.backend(s.backend);
    // Split boundary: everything the previous backend queued must have run before we copy
    // from its buffers (never host-copy a device-pending buffer).
    if (prev != nullptr && prev != be && !unsynced_staging_) prev->sync();
    for (uint32_t c = s.copy_begin; c < s.copy_end; ++c) {
      const StagingCopy& cp = plan_.copies[c];
      if (unsynced_staging_) {  // the G1 bug, on purpose (tests only)
        uint8_t* to = alloc_.host_ptr(cp.to);
        const uint8_t* from = alloc_.host_ptr(cp.from);
        MINFER_ASSERT(to != nullptr && from != nullptr, "scheduler: G1 test hook needs host views");
        std::memcpy(to, from, cp.bytes);
        continue;
      }
      // Through the backends, not a host memcpy: a device buffer has no host view, and the
      // source's copy_to_host waits for its queue (never host-copy a device-pending buffer).
      alloc_.copy(cp.from, cp.to, cp.bytes);
    }
    for (uint32_t i = s.node_begin; i < s.node_end; ++i) be->execute(plan_.args[i]);
    prev = be;
  }
  for (size_t b = 0; b < kNumBackends; ++b) {
    Backend* be = alloc_.backend(static_cast<BackendKind>(b));
    if (be != nullptr) be->sync();
  }
  ++n_executes_;
}

std::string SchedPlan::to_string(const Graph& g) const {
  std::string out =
      fmt::format("sched plan (alloc #{}): {} splits, {} nodes, {} copies, {} skipped\n",
                  alloc_generation, splits.size(), args.size(), copies.size(), n_skipped);
  for (size_t i = 0; i < splits.size(); ++i) {
    const Split& s = splits[i];
    out += fmt::format("  split {} on {}: nodes", i, backend_name(s.backend));
    for (uint32_t k = s.node_begin; k < s.node_end; ++k) out += fmt::format(" {}", args[k].node);
    for (uint32_t c = s.copy_begin; c < s.copy_end; ++c) {
      out += fmt::format("; stage {} '{}' ({} B)", copies[c].src, g.node(copies[c].src).name,
                         copies[c].bytes);
    }
    out += "\n";
  }
  return out;
}

}  // namespace minfer
