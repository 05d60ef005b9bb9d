// minfer-test-libs: minfer_sched minfer_backend_sim minfer_alloc minfer_graph minfer_common
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <random>
#include <set>

#include "alloc/allocator.h"
#include "memsys_test_util.h"
#include "sched/scheduler.h"

namespace minfer {
namespace {

using testing::Backends;
using testing::i32_bits;
using testing::reference_eval;
using testing::RefKv;

// Execution-level memory checker, independent of Liveness: replays the scheduler's plan as
// write/read events per pool buffer — node outputs, and staging copies at their split's start —
// and reports any read whose bytes were overwritten by a different writer between the read
// value's production and the read. A cross-backend read checks the staging window from its
// copy on. Also checks windows fit their buffers, KV ids are never shared with node storage,
// and fresh (owned) staging buffers neither. "" when all is well.
// Time: node i writes at 2 i; a split's copies run at 2 first - 1, before its first node.
std::string check_memory(const Graph& g, GraphAllocator& alloc, const SchedPlan& sp) {
  const AllocPlan& p = alloc.plan();
  const auto n = static_cast<int32_t>(g.size());
  struct Ev {
    int32_t time;
    NodeId node;
    BufRef b;
  };
  std::vector<Ev> writes;
  std::vector<int32_t> prod(g.size(), -2);  // step that produced a node's current value
  for (NodeId i : g.inputs()) prod[i] = -1;
  for (const NodeArgs& a : sp.args) {
    prod[a.node] = a.node;
    writes.push_back({2 * a.node, a.node, p.node_buf[a.node]});
  }
  // Views (and in-place outputs) hold the value produced by the chain's last writer.
  for (NodeId i = 0; i < n; ++i)
    if (g.node(i).op == Op::View) prod[i] = prod[g.node(i).src[0]];
  // Staging copies: (source, destination) -> the time of its copy.
  std::map<std::pair<NodeId, int>, int32_t> copied;
  for (const Split& sl : sp.splits) {
    const int32_t t = 2 * sp.args[sl.node_begin].node - 1;
    for (uint32_t c = sl.copy_begin; c < sl.copy_end; ++c) {
      copied[{sp.copies[c].src, (int)sp.copies[c].dst}] = t;
      writes.push_back({t, sp.copies[c].src, sp.copies[c].to});
    }
  }
  auto overlap = [](const BufRef& x, const BufRef& y) {
    return x.backend == y.backend && x.id == y.id && x.offset < y.offset + y.len &&
           y.offset < x.offset + x.len;
  };
  auto clobbered = [&](const BufRef& w, int32_t from, int32_t to, NodeId s,
                       NodeId reader) -> std::string {
    for (const Ev& e : writes) {
      if (e.time > from && e.time < to && overlap(e.b, w)) {
        return fmt::format("node {} reads node {} (produced at {}) but {} overwrote it at {}",
                           reader, s, from, e.node, e.time);
      }
    }
    return "";
  };
  // reader -1: the host after the last step (outputs).
  auto check_read = [&](NodeId s, int32_t time, NodeId reader) -> std::string {
    const BufRef& w = p.node_buf[s];
    if (!w.valid()) return "";  // weights
    if (p.live.kind[s] == StorageKind::KvRegion) return "";
    const int32_t made = 2 * prod[s];
    if (reader < 0 || g.node(reader).backend == w.backend)
      return clobbered(w, made, time, s, reader);
    const StagingBuf* sb = p.staging_for(s, g.node(reader).backend);
    if (sb == nullptr)
      return fmt::format("node {} reads node {} across without staging", reader, s);
    const auto it = copied.find({s, (int)sb->dst});
    if (it == copied.end() || it->second > time) return "staging copied after its reader";
    std::string err = clobbered(w, made, it->second, s, reader);  // the copy's own read
    return err.empty() ? clobbered(sb->buf, it->second, time, s, reader) : err;
  };
  for (const NodeArgs& a : sp.args) {
    for (NodeId s : g.node(a.node).src) {
      std::string err = check_read(s, 2 * a.node, a.node);
      if (!err.empty()) return err;
    }
  }
  for (NodeId o : g.outputs()) {
    std::string err = check_read(o, 2 * n, -1);
    if (!err.empty()) return err;
  }
  std::set<std::pair<int, uint32_t>> node_ids, kv_ids;
  for (NodeId i = 0; i < n; ++i) {
    const BufRef& b = p.node_buf[i];
    if (!b.valid()) continue;
    if (alloc.backend(b.backend)->size_of(b.id) < b.offset + b.len) return "window out of bounds";
    (p.live.kind[i] == StorageKind::KvRegion ? kv_ids : node_ids).insert({(int)b.backend, b.id});
  }
  for (const auto& k : kv_ids)
    if (node_ids.count(k)) return "KV region shared with node storage";
  for (const StagingBuf& s : p.staging) {
    if (!s.owned) continue;  // arena windows: checked by the replay above
    const std::pair<int, uint32_t> k{(int)s.buf.backend, s.buf.id};
    if (node_ids.count(k) || kv_ids.count(k)) return "staging buffer shared with node storage";
  }
  return "";
}

WeightRef weight_of(std::vector<float>& data, int64_t n0, int64_t n1, std::string name) {
  WeightRef w;
  w.name = std::move(name);
  w.ne = {n0, n1, 1, 1};
  w.data = reinterpret_cast<const uint8_t*>(data.data());
  w.n_bytes = data.size() * 4;
  return w;
}

// Runs g through allocator + scheduler and compares every output with reference_eval.
void expect_matches_reference(const Graph& g, GraphAllocator& alloc,
                              const std::map<std::string, std::vector<float>>& in) {
  Scheduler sched(alloc);
  for (const auto& [name, v] : in) {
    const Node& nd = g.node(g.find(name));
    if (nd.type == GgmlType::I32) {
      std::vector<int32_t> iv(v.size());
      std::memcpy(iv.data(), v.data(), v.size() * 4);
      alloc.fill_input_i32(g, name, iv);
    } else {
      alloc.fill_input_f32(g, name, v);
    }
  }
  sched.execute(g);
  RefKv kv;
  auto ref = reference_eval(g, in, kv);
  for (const auto& [o, want] : ref) {
    const BufRef& b = alloc.plan().node_buf[o];
    ASSERT_TRUE(b.valid());
    auto got = testing::read_node(g, o, reinterpret_cast<const float*>(alloc.host_ptr(b)));
    EXPECT_EQ(got, want) << "output " << g.node(o).name;
  }
  EXPECT_EQ(check_memory(g, alloc, sched.plan()), "");
}

std::vector<float> ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.25f * static_cast<float>(i);
  return v;
}

TEST(Alloc, size_classes) {
  EXPECT_EQ(size_class_bytes(0), 64u);
  EXPECT_EQ(size_class_bytes(4), 64u);
  EXPECT_EQ(size_class_bytes(65), 128u);
  EXPECT_EQ(size_class_bytes(3584), 4096u);
  EXPECT_EQ(size_class_bytes(16384), 16384u);
  EXPECT_EQ(size_class_bytes(16385), 32768u);
  EXPECT_EQ(size_class_bytes(19456), 32768u);
  EXPECT_EQ(size_class_bytes(40000), 49152u);
}

TEST(Alloc, liveness_is_plain_data) {
  std::vector<float> wd = ramp(8 * 16, 0.0f);
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {8, 1, 1, 1});
  NodeId w = g.weight(weight_of(wd, 8, 16, "w"));
  NodeId m = g.matmul(w, x, "m");                            // 2
  NodeId v = g.view(m, {4, 2, 1, 1}, 8, 0, "v");             // 3
  NodeId pos = g.input("pos", GgmlType::I32, {1, 1, 1, 1});  // 4, built late
  OpParams rp;
  rp.n_rot = 4;
  NodeId r = g.rope(v, pos, rp, "r");  // 5: in place into m
  NodeId dead = g.silu(r, "dead");     // 6: no consumer
  NodeId out = g.add(r, r, "out");     // 7
  g.mark_output(out);
  const Liveness lv = compute_liveness(g);
  EXPECT_EQ(lv.n_steps, 8);
  EXPECT_EQ(lv.kind[w], StorageKind::Weight);
  EXPECT_EQ(lv.kind[m], StorageKind::Own);
  EXPECT_EQ(lv.kind[v], StorageKind::View);
  EXPECT_EQ(lv.kind[r], StorageKind::InPlace);
  EXPECT_EQ(lv.kind[dead], StorageKind::None);
  EXPECT_EQ(lv.root[v], m);
  EXPECT_EQ(lv.root[r], m);
  EXPECT_EQ(lv.offset[r], 32u);
  EXPECT_EQ(lv.len[r], 32u);
  EXPECT_EQ(lv.first[pos], 0);     // inputs are filled before step 0
  EXPECT_EQ(lv.last_use[pos], 8);  // ... and pinned to the end
  EXPECT_EQ(lv.first[v], 2);
  EXPECT_EQ(lv.last_use[v], 5);
  EXPECT_EQ(lv.n_consumers[r], 2);  // out reads it twice; the dead silu does not count
  ASSERT_NE(lv.interval_for(r), nullptr);
  EXPECT_EQ(lv.interval_for(r)->root, m);
  EXPECT_EQ(lv.interval_for(r)->first, 2);
  EXPECT_EQ(lv.interval_for(r)->last, 7);  // extended through the view and the alias
  EXPECT_EQ(lv.interval_for(w), nullptr);
  EXPECT_EQ(lv.intervals.size(), 4u);  // x, m, pos, out
  EXPECT_TRUE(lv.executes(r));
  EXPECT_FALSE(lv.executes(v));
  EXPECT_FALSE(lv.executes(dead));
  EXPECT_NE(lv.to_string(g).find("inplace -> 2 +32B"), std::string::npos) << lv.to_string(g);
}

TEST(Alloc, liveness_reuses_buffers_along_chain) {
  std::vector<float> wd = ramp(64, -1.0f);
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {64, 1, 1, 1});
  NodeId w = g.weight(weight_of(wd, 64, 1, "w"));
  NodeId h = x;
  for (int i = 0; i < 6; ++i)
    h = (i % 2) ? g.mul(h, w, fmt::format("m{}", i)) : g.add(h, w, fmt::format("a{}", i));
  g.mark_output(h);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  // 7 owned nodes (input + 6), but the chain only ever needs input + current + next.
  EXPECT_EQ(p.stats.n_intervals, 7u);
  EXPECT_EQ(p.stats.n_buffers, 3u) << p.to_string(g);
  EXPECT_LT(p.stats.plan_bytes[0], p.stats.naive_bytes);
  expect_matches_reference(g, alloc, {{"x", ramp(64, 0.5f)}});
}

TEST(Alloc, parallel_chains_do_not_share) {
  Graph g;
  NodeId a0 = g.input("a0", GgmlType::F32, {32, 1, 1, 1});
  NodeId b0 = g.input("b0", GgmlType::F32, {32, 1, 1, 1});
  NodeId a1 = g.mul(a0, a0, "a1");
  NodeId b1 = g.mul(b0, b0, "b1");
  NodeId sa = g.silu(a1, "sa");
  NodeId sb = g.silu(b1, "sb");
  NodeId a2 = g.add(sa, a0, "a2");
  NodeId b2 = g.add(sb, b0, "b2");
  g.mark_output(a2);
  g.mark_output(b2);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  // Both branches are live at once: their values never share a buffer while both are live
  // (b2 may take a1's buffer once a's chain is done — that is reuse, not sharing).
  for (NodeId x : {a1, sa})
    for (NodeId y : {b1, sb}) EXPECT_NE(p.node_buf[x].id, p.node_buf[y].id) << p.to_string(g);
  EXPECT_NE(p.node_buf[a2].id, p.node_buf[b2].id);
  EXPECT_EQ(p.stats.n_inplace, 2u);
  expect_matches_reference(g, alloc, {{"a0", ramp(32, 1.0f)}, {"b0", ramp(32, -3.0f)}});
}

OpParams kv_params(int32_t layer) {
  OpParams p;
  p.layer = layer;
  p.n_ctx = 16;
  p.head_dim = 4;
  p.n_head = 2;
  p.n_head_kv = 1;
  p.scale = 0.5f;
  return p;
}

TEST(Alloc, kv_regions_two_per_layer) {
  Graph g;
  NodeId pos = g.input("positions", GgmlType::I32, {2, 1, 1, 1});
  NodeId q = g.input("q", GgmlType::F32, {4, 2, 2, 1});
  NodeId k = g.input("k", GgmlType::F32, {4, 2, 1, 1});
  NodeId v = g.input("v", GgmlType::F32, {4, 2, 1, 1});
  NodeId st = g.kv_store(k, v, pos, kv_params(0), "kv0");
  NodeId att = g.attention(q, st, pos, kv_params(0), "att0");
  g.mark_output(att);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  EXPECT_FALSE(alloc.kv_pair(0).has_value());
  const AllocPlan& p = alloc.alloc_graph(g);
  auto kv = alloc.kv_pair(0);
  ASSERT_TRUE(kv.has_value());
  EXPECT_NE(kv->k.id, kv->v.id);
  EXPECT_EQ(kv->k.len, 4u * 16 * 4);             // n_kv_embd x n_ctx f32
  EXPECT_EQ(p.node_buf[st], kv->k);              // the store node's buffer IS the K region
  EXPECT_EQ(alloc.kv_bytes(), 2u * 4 * 16 * 4);  // exactly two regions for one layer
  EXPECT_FALSE(alloc.kv_pair(1).has_value());
  Scheduler sched(alloc);
  const SchedPlan& sp = sched.prepare(g);
  ASSERT_EQ(sp.args.size(), 2u);
  EXPECT_EQ(sp.args[1].src[1], alloc.host_ptr(kv->k));  // attention reads the store's K region
  EXPECT_EQ(sp.args[1].kv_v, alloc.host_ptr(kv->v));
  expect_matches_reference(g, alloc,
                           {{"positions", i32_bits({0, 1})},
                            {"q", ramp(16, 0.1f)},
                            {"k", ramp(8, -0.3f)},
                            {"v", ramp(8, 2.0f)}});
}

TEST(Alloc, cycle_graph_allocation_fails) {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {8, 1, 1, 1});
  NodeId a = g.mul(x, x, "a");
  NodeId b = g.add(a, x, "b");
  g.mark_output(b);
  g.set_src(a, 1, b);  // a <-> b
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  try {
    alloc.alloc_graph(g);
    FAIL() << "cyclic graph was planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(alloc.has_plan());
}

TEST(Alloc, inputs_never_share_buffers) {
  // "late" is built after a chain whose buffers are already dead, and "early" is read only at
  // step 1: without pinning both ends, either could share with something and a fill would be
  // clobbered (design bug 2b) — or clobber a chain value.
  Graph g;
  NodeId early = g.input("early", GgmlType::F32, {16, 1, 1, 1});
  NodeId a = g.mul(early, early, "a");
  NodeId b = g.add(a, a, "b");
  NodeId c = g.mul(b, b, "c");
  NodeId late = g.input("late", GgmlType::F32, {16, 1, 1, 1});
  NodeId d = g.add(c, late, "d");
  g.mark_output(d);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  for (NodeId i : g.inputs()) {
    EXPECT_EQ(p.live.intervals[p.live.interval_of[i]].first, 0);
    EXPECT_EQ(p.live.intervals[p.live.interval_of[i]].last, static_cast<int32_t>(g.size()));
    for (NodeId j = 0; j < static_cast<NodeId>(g.size()); ++j) {
      if (j != i && p.node_buf[j].valid()) {
        EXPECT_NE(p.node_buf[i].id, p.node_buf[j].id) << i << " " << j;
      }
    }
  }
  expect_matches_reference(g, alloc, {{"early", ramp(16, 1.0f)}, {"late", ramp(16, 7.0f)}});
}

TEST(Alloc, inplace_alias_requires_sole_consumer) {
  for (bool second_reader : {false, true}) {
    Graph g;
    NodeId x = g.input("x", GgmlType::F32, {32, 1, 1, 1});
    NodeId m = g.mul(x, x, "m");
    NodeId s = g.silu(m, "s");
    NodeId out = second_reader ? g.add(s, m, "out") : g.add(s, x, "out");
    g.mark_output(out);
    Backends be;
    GraphAllocator alloc;
    be.attach(alloc);
    const AllocPlan& p = alloc.alloc_graph(g);
    if (second_reader) {
      EXPECT_EQ(p.alias_of(s), kNoNode);
      EXPECT_NE(p.node_buf[s].id, p.node_buf[m].id);
    } else {
      EXPECT_EQ(p.alias_of(s), m);
      EXPECT_EQ(p.node_buf[s], p.node_buf[m]);
    }
    expect_matches_reference(g, alloc, {{"x", ramp(32, -2.0f)}});
  }
}

TEST(Alloc, inplace_alias_through_view_chain) {
  // matmul -> view -> rope: rope may write into the matmul's buffer at the view's offset.
  std::vector<float> wd = ramp(8 * 16, -0.5f);
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {8, 1, 1, 1});
  NodeId pos = g.input("pos", GgmlType::I32, {1, 1, 1, 1});
  NodeId w = g.weight(weight_of(wd, 8, 16, "w"));
  NodeId m = g.matmul(w, x, "m");
  NodeId v = g.view(m, {4, 2, 1, 1}, 8, 0, "v");
  OpParams rp;
  rp.n_rot = 4;
  NodeId r = g.rope(v, pos, rp, "r");
  NodeId out = g.add(r, r, "out");
  g.mark_output(out);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  EXPECT_EQ(p.alias_of(r), m);
  EXPECT_EQ(p.node_buf[r].id, p.node_buf[m].id);
  EXPECT_EQ(p.node_buf[r].offset, 8u * 4);
  EXPECT_EQ(p.node_buf[r].len, 8u * 4);
  // m's interval runs through r's reader.
  EXPECT_EQ(p.live.intervals[p.live.interval_of[m]].last, out);
  expect_matches_reference(g, alloc, {{"x", ramp(8, 0.3f)}, {"pos", i32_bits({3})}});
}

TEST(Alloc, inplace_alias_requires_same_backend) {
  for (BackendKind sb : {BackendKind::Cpu, BackendKind::Sim}) {
    Graph g;
    NodeId x = g.input("x", GgmlType::F32, {32, 1, 1, 1});
    NodeId m = g.mul(x, x, "m");
    NodeId s = g.silu(m, "s");
    g.node(s).backend = sb;
    NodeId out = g.add(s, x, "out");
    g.mark_output(out);
    Backends be;
    GraphAllocator alloc;
    be.attach(alloc);
    const AllocPlan& p = alloc.alloc_graph(g);
    if (sb == BackendKind::Cpu) {
      EXPECT_EQ(p.alias_of(s), m);
      EXPECT_TRUE(p.staging.empty());
    } else {
      EXPECT_EQ(p.alias_of(s), kNoNode);
      EXPECT_EQ(p.node_buf[s].backend, BackendKind::Sim);
      EXPECT_NE(p.staging_for(m, BackendKind::Sim), nullptr);  // m crosses to the sim device
    }
    expect_matches_reference(g, alloc, {{"x", ramp(32, -1.0f)}});
  }
}

TEST(Alloc, dead_node_gets_no_buffer) {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {16, 1, 1, 1});
  NodeId orphan_src = g.mul(x, x, "orphan_src");  // read only by a dead node: dead too
  NodeId orphan = g.silu(orphan_src, "orphan");   // no consumer, not an output
  NodeId y = g.add(x, x, "y");
  g.mark_output(y);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  EXPECT_FALSE(p.node_buf[orphan].valid());
  EXPECT_FALSE(p.node_buf[orphan_src].valid());
  EXPECT_EQ(p.live.kind[orphan], StorageKind::None);
  Scheduler sched(alloc);
  for (const NodeArgs& a : sched.prepare(g).args) {
    EXPECT_NE(a.node, orphan);
    EXPECT_NE(a.node, orphan_src);
  }
  EXPECT_EQ(sched.plan().args.size(), 1u);
  expect_matches_reference(g, alloc, {{"x", ramp(16, 1.0f)}});
}

// Kahn order differs from build order here: the allocator must still use build order.
Graph g3_graph() {
  Graph g;
  NodeId x = g.input("x", GgmlType::F32, {32, 1, 1, 1});
  NodeId big = g.mul(x, x, "X");     // 1: read by R at step 5 (build) but Kahn step 3
  NodeId c1 = g.add(x, x, "c1");     // 2
  NodeId c2 = g.mul(c1, c1, "c2");   // 3: Kahn-order liveness would hand it X's buffer
  NodeId c3 = g.add(c2, c2, "c3");   // 4
  NodeId r = g.add(big, x, "R");     // 5
  NodeId out = g.add(r, c3, "out");  // 6
  g.mark_output(out);
  return g;
}

TEST(Alloc, liveness_follows_build_order) {
  Graph g = g3_graph();
  const NodeId big = g.find("X"), c2 = g.find("c2");
  const std::vector<NodeId> kahn = g.topo_order();
  std::vector<NodeId> build(g.size());
  for (size_t i = 0; i < build.size(); ++i) build[i] = static_cast<NodeId>(i);
  ASSERT_NE(kahn, build) << "test graph must have a Kahn order different from build order";

  // The hazard is real: the same graph built in Kahn order gets X and c2 into one buffer.
  Graph kg;
  std::vector<NodeId> remap(g.size());
  for (NodeId id : kahn) {
    Node n = g.node(id);
    for (NodeId& s : n.src) s = remap[s];
    remap[id] = kg.add(n);
  }
  kg.mark_output(remap[g.find("out")]);
  {
    Backends be;
    GraphAllocator alloc;
    be.attach(alloc);
    const AllocPlan& kp = alloc.alloc_graph(kg);
    ASSERT_EQ(kp.node_buf[remap[big]].id, kp.node_buf[remap[c2]].id) << kp.to_string(kg);
  }
  // In build order they must not share, and planned execution equals the reference.
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  EXPECT_NE(p.node_buf[big].id, p.node_buf[c2].id) << p.to_string(g);
  expect_matches_reference(g, alloc, {{"x", ramp(32, 0.75f)}});
}

TEST(Alloc, staging_is_fresh) {
  // v (sim) is live from step 1 to 5. A cpu value p crosses to the sim device at step 3; after
  // the walk, v's buffer is on the sim free list (its interval ended), same size class as p. A
  // staging buffer drawn from the free list would take it and clobber v before step 5.
  Graph g;
  NodeId in_s = g.input("in_s", GgmlType::F32, {32, 1, 1, 1});
  g.node(in_s).backend = BackendKind::Sim;
  NodeId v = g.mul(in_s, in_s, "v");
  g.node(v).backend = BackendKind::Sim;
  NodeId in_c = g.input("in_c", GgmlType::F32, {32, 1, 1, 1});
  NodeId pc = g.add(in_c, in_c, "p");  // cpu
  NodeId q = g.mul(pc, in_s, "q");
  g.node(q).backend = BackendKind::Sim;
  NodeId r = g.add(q, v, "r");
  g.node(r).backend = BackendKind::Sim;
  NodeId rv = g.view(r, {16, 1, 1, 1}, 0, 0, "rv");
  NodeId t = g.mul(rv, rv, "t");  // a smaller class: v's and q's buffers stay on the free list
  g.node(t).backend = BackendKind::Sim;
  g.mark_output(t);
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  const StagingBuf* st = p.staging_for(pc, BackendKind::Sim);
  ASSERT_NE(st, nullptr);
  EXPECT_TRUE(be.sim.pool().is_free(p.node_buf[v].id)) << "test premise: v's buffer is free";
  EXPECT_NE(st->buf.id, p.node_buf[v].id);
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i)
    if (p.node_buf[i].valid() && p.node_buf[i].backend == BackendKind::Sim) {
      EXPECT_NE(st->buf.id, p.node_buf[i].id);
    }
  expect_matches_reference(g, alloc, {{"in_s", ramp(32, 1.0f)}, {"in_c", ramp(32, -2.0f)}});

  // Rewritten on every execute, with no new buffers.
  const size_t n_bufs = be.sim.pool().n_buffers();
  expect_matches_reference(g, alloc, {{"in_s", ramp(32, 3.0f)}, {"in_c", ramp(32, 5.0f)}});
  EXPECT_EQ(be.sim.pool().n_buffers(), n_bufs);

  // Released at rebuild (back on the free list, or recycled by the new plan's walk).
  const uint32_t old = st->buf.id;
  const AllocPlan& p2 = alloc.alloc_graph(g);
  bool reused = false;
  for (const BufRef& b : p2.node_buf)
    reused |= b.valid() && b.backend == BackendKind::Sim && b.id == old;
  EXPECT_TRUE(reused || be.sim.pool().is_free(old));
}

TEST(Alloc, fill_input_errors) {
  Graph g;
  NodeId ids = g.input("token_ids", GgmlType::I32, {4, 1, 1, 1});
  NodeId x = g.input("x", GgmlType::F32, {4, 1, 1, 1});
  g.mark_output(g.add(x, x, "y"));
  (void)ids;
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const std::vector<int32_t> four{1, 2, 3, 4}, five{1, 2, 3, 4, 5};
  EXPECT_THROW(alloc.fill_input_i32(g, "token_ids", four), Error);  // before planning
  alloc.alloc_graph(g);
  EXPECT_NO_THROW(alloc.fill_input_i32(g, "token_ids", four));
  EXPECT_THROW(alloc.fill_input_i32(g, "token_ids", five), Error);
  EXPECT_THROW(alloc.fill_input_i32(g, "positions", four), Error);
  EXPECT_THROW(alloc.fill_input_i32(g, "x", four), Error);  // dtype mismatch
  // Bit patterns: every int32 survives, including ones that are NaN as floats.
  const std::vector<int32_t> odd{-1, 0x7fc00001, INT32_MIN, 16777217};
  alloc.fill_input_i32(g, "token_ids", odd);
  const auto span = alloc.node_f32(ids);
  for (size_t i = 0; i < odd.size(); ++i) EXPECT_EQ(testing::as_i32(span[i]), odd[i]);
}

TEST(Alloc, plan_dumps) {
  Graph g = g3_graph();
  Backends be;
  GraphAllocator alloc;
  be.attach(alloc);
  const AllocPlan& p = alloc.alloc_graph(g);
  auto j = nlohmann::json::parse(p.to_json(g));
  EXPECT_EQ(j["n_nodes"], g.size());
  EXPECT_EQ(j["intervals"].size(), p.live.intervals.size());
  EXPECT_EQ(j["stats"]["n_buffers"], p.stats.n_buffers);
  EXPECT_NE(p.to_string(g).find("[0, 7]"), std::string::npos) << p.to_string(g);
  EXPECT_NE(p.live.to_string(g).find("pinned"), std::string::npos);
}

// ---- random DAGs --------------------------------------------------------------------------

struct RandomGraph {
  Graph g;
  std::map<std::string, std::vector<float>> inputs;
  std::vector<std::vector<float>> weight_data;
};

void random_dag(std::mt19937& rng, RandomGraph& rg) {
  Graph& g = rg.g;
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  auto backend = [&] { return pick(5) < 3 ? BackendKind::Cpu : BackendKind::Sim; };
  std::vector<NodeId> vals;
  const int n_in = 1 + pick(3);
  for (int i = 0; i < n_in; ++i) {
    const int64_t s = int64_t{16} << pick(3);
    NodeId id = g.input(fmt::format("in{}", i), GgmlType::F32, {s, 1, 1, 1});
    g.node(id).backend = backend();
    rg.inputs[g.node(id).name] = ramp(static_cast<size_t>(s), -1.0f + 0.1f * i);
    vals.push_back(id);
  }
  NodeId pos = g.input("pos", GgmlType::I32, {1, 1, 1, 1});
  g.node(pos).backend = backend();
  rg.inputs["pos"] = i32_bits({pick(50)});
  rg.weight_data.reserve(64);
  const int n_ops = 8 + pick(30);
  for (int k = 0; k < n_ops; ++k) {
    const NodeId a = vals[pick(static_cast<int>(vals.size()))];
    const auto& ne = g.node(a).ne;
    const std::string name = fmt::format("n{}", k);
    NodeId id = kNoNode;
    switch (pick(7)) {
      case 0:
      case 1: {  // add / mul with a broadcastable partner (a value or a weight)
        std::vector<NodeId> ok;
        for (NodeId b : vals) {
          const auto& nb = g.node(b).ne;
          if (nb[1] == 1 && nb[2] == 1 && ne[0] % nb[0] == 0) ok.push_back(b);
        }
        NodeId b = ok.empty() || pick(4) == 0 ? kNoNode : ok[pick(static_cast<int>(ok.size()))];
        if (b == kNoNode) {
          rg.weight_data.push_back(ramp(static_cast<size_t>(ne[0]), 0.01f * k));
          b = g.weight(weight_of(rg.weight_data.back(), ne[0], 1, "w" + name));
        }
        id = pick(2) ? g.add(a, b, name) : g.mul(a, b, name);
        break;
      }
      case 2:
      case 3:
        id = g.silu(a, name);
        break;
      case 4: {
        OpParams rp;
        rp.n_rot = static_cast<int32_t>(std::min<int64_t>(ne[0], 8)) & ~1;
        id = g.rope(a, pos, rp, name);
        break;
      }
      default: {  // views: contiguous halves, or a strided 2-row view
        const int64_t n = g.node(a).n_elements();
        if (ne[1] != 1 || n < 16) {
          id = g.silu(a, name);
        } else if (pick(3) == 0) {
          id = g.view(a, {n / 4, 2, 1, 1}, pick(2) * (n / 4), n / 2, name);
        } else {
          id = g.view(a, {n / 2, 1, 1, 1}, pick(2) * (n / 2), 0, name);
        }
      }
    }
    g.node(id).backend = backend();
    vals.push_back(id);
    if (pick(6) == 0) g.mark_output(id);
  }
  g.mark_output(vals.back());
}

void run_random_dags(PlannerKind planner) {
  uint32_t n_inplace = 0, n_reused = 0, n_staged = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    RandomGraph rg;
    random_dag(rng, rg);
    Backends be;
    GraphAllocator alloc;
    be.attach(alloc);
    alloc.set_planner(planner);
    const AllocPlan& p = alloc.alloc_graph(rg.g);
    n_inplace += p.stats.n_inplace;
    n_reused += p.stats.n_intervals - p.stats.n_buffers;
    n_staged += static_cast<uint32_t>(p.staging.size());
    // Structural rule: intervals whose bytes overlap in one buffer never overlap in time.
    const auto& ivs = p.live.intervals;
    for (size_t i = 0; i < ivs.size(); ++i) {
      for (size_t j = i + 1; j < ivs.size(); ++j) {
        const BufRef& a = p.node_buf[ivs[i].root];
        const BufRef& b = p.node_buf[ivs[j].root];
        if (a.backend != b.backend || a.id != b.id) continue;
        if (a.offset >= b.offset + b.len || b.offset >= a.offset + a.len) continue;
        EXPECT_TRUE(ivs[i].last < ivs[j].first || ivs[j].last < ivs[i].first)
            << "seed " << seed << "\n"
            << p.to_string(rg.g);
      }
    }
    SCOPED_TRACE(fmt::format("seed {}", seed));
    expect_matches_reference(rg.g, alloc, rg.inputs);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << p.to_string(rg.g);
      break;
    }
  }
  // The generator must exercise what the checker guards.
  EXPECT_GT(n_inplace, 100u);
  EXPECT_GT(n_reused, 100u);
  EXPECT_GT(n_staged, 100u);
}

TEST(Alloc, random_dags_never_overlap_live_bytes) {
  run_random_dags(PlannerKind::SizeClass);
}

// The same checker over the offset planner's arena (one buffer per backend, byte offsets).
TEST(Alloc, random_dags_never_overlap_live_bytes_arena) {
  run_random_dags(PlannerKind::Arena);
}

}  // namespace
}  // namespace minfer
