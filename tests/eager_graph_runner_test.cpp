// minfer-test-libs: minfer_eager minfer_backend_cpu minfer_common
// GraphRunner on small hand-built graphs: what the model tests cannot see from the logits
// alone — in-place writes only at a source's last use, views keep their source's buffer alive
// past its last direct use, handles drop at the last use (bounded peak), outputs are held until
// release(), and an error unwinds every handle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "eager/graph_runner.h"

namespace minfer::eager {
namespace {

constexpr int64_t kE = 4;     // row width
constexpr int64_t kRows = 8;  // rows in the table

float silu_ref(float x) {
  return x / (1.0f + std::exp(-x));
}

// An f32 table [kE, kRows] whose row r holds r + 0.1 * c; graphs read it through GetRows.
struct Fixture {
  Fixture() : kv(KvCacheParams{0, 1, 32, GgmlType::F32}), cpu(cpu::CpuBackendOptions{1}) {
    table.resize(static_cast<size_t>(kE * kRows));
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kE; ++c) table[static_cast<size_t>(r * kE + c)] = r + 0.1f * c;
  }
  NodeId weight(Graph& g) const {
    WeightRef w;
    w.name = "table";
    w.type = GgmlType::F32;
    w.ne = {kE, kRows, 1, 1};
    w.data = reinterpret_cast<const uint8_t*>(table.data());
    w.n_bytes = table.size() * sizeof(float);
    return g.weight(w);
  }
  float at(int64_t row, int64_t c) const { return table[static_cast<size_t>(row * kE + c)]; }
  uint64_t acquires() const {
    const BufferPoolStats st = pool.stats();
    return st.hits + st.misses;
  }

  std::vector<float> table;
  BufferPool pool;
  KvCache kv;
  cpu::CpuBackend cpu;
};

std::vector<float> values(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  std::memcpy(v.data(), t.raw(), v.size() * sizeof(float));
  return v;
}

// x feeds both silu and the add after it: silu must not overwrite x (y = x + silu(x), not
// 2 silu(x)). x2's only consumer is silu: that one runs in place (no acquire for it).
TEST(GraphRunner, InPlaceOnlyAtTheSourcesLastUse) {
  Fixture f;
  Graph g;
  const NodeId ids = g.input("ids", GgmlType::I32, {2, 1, 1, 1});
  const NodeId w = f.weight(g);
  const NodeId x = g.get_rows(w, ids, "x");
  const NodeId s = g.silu(x, "s");
  const NodeId y = g.add(x, s, "y");
  g.mark_output(y);
  const EagerGraph eg(std::move(g));
  GraphRunner run(f.pool, f.cpu, f.kv);
  const std::vector<int32_t> id_data = {3, 5};
  const HostInput in[1] = {{ids, id_data}};
  const uint64_t a0 = f.acquires();
  run.run(eg, in);
  EXPECT_EQ(f.acquires() - a0, 4u);  // ids, x, s (not in place: x is read later), y
  const std::vector<float> got = values(run.output(y));
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t c = 0; c < kE; ++c) {
      const float v = f.at(id_data[static_cast<size_t>(t)], c);
      EXPECT_FLOAT_EQ(got[static_cast<size_t>(t * kE + c)], v + silu_ref(v)) << t << " " << c;
    }
  EXPECT_EQ(f.pool.stats().outstanding, 1);  // only the output is held
  run.release();
  EXPECT_EQ(f.pool.stats().outstanding, 0);

  Graph g2;
  const NodeId ids2 = g2.input("ids", GgmlType::I32, {2, 1, 1, 1});
  const NodeId x2 = g2.get_rows(f.weight(g2), ids2, "x");
  const NodeId s2 = g2.silu(x2, "s");
  g2.mark_output(s2);
  const EagerGraph eg2(std::move(g2));
  const HostInput in2[1] = {{ids2, id_data}};
  const uint64_t a1 = f.acquires();
  run.run(eg2, in2);
  EXPECT_EQ(f.acquires() - a1, 2u);  // ids and x; silu wrote over x
  const std::vector<float> got2 = values(run.output(s2));
  for (int64_t c = 0; c < kE; ++c)
    EXPECT_FLOAT_EQ(got2[static_cast<size_t>(kE + c)], silu_ref(f.at(5, c)));
  run.release();
}

// v views row 1 of x; x's last direct use is the view, then z (the same size as x) is acquired:
// had x's buffer gone back to the pool, LIFO reuse would hand it to z and v would read z's rows.
TEST(GraphRunner, ViewKeepsItsSourceAlive) {
  Fixture f;
  Graph g;
  const NodeId ids = g.input("ids", GgmlType::I32, {2, 1, 1, 1});
  const NodeId ids_z = g.input("ids_z", GgmlType::I32, {2, 1, 1, 1});
  const NodeId w = f.weight(g);
  const NodeId x = g.get_rows(w, ids, "x");                // rows 2, 6
  const NodeId v = g.view(x, {kE, 1, 1, 1}, kE, 0, "v");   // x's second row (6)
  const NodeId z = g.get_rows(w, ids_z, "z");              // rows 4, 5: a new [kE, 2] buffer
  const NodeId zr = g.view(z, {kE, 1, 1, 1}, 0, 0, "zr");  // z's first row (4)
  const NodeId y = g.add(v, zr, "y");
  g.mark_output(y);
  const EagerGraph eg(std::move(g));
  GraphRunner run(f.pool, f.cpu, f.kv);
  const std::vector<int32_t> id_x = {2, 6}, id_z = {4, 5};
  const HostInput in[2] = {{ids, id_x}, {ids_z, id_z}};
  run.run(eg, in);
  const std::vector<float> got = values(run.output(y));
  for (int64_t c = 0; c < kE; ++c)
    EXPECT_FLOAT_EQ(got[static_cast<size_t>(c)], f.at(6, c) + f.at(4, c)) << c;
  run.release();
  EXPECT_EQ(f.pool.stats().outstanding, 0);
}

// A chain of 6 adds: each link is released at its last use, so at most two f32 buffers (the
// link being read and the one being written) and the ids slab are out at once.
TEST(GraphRunner, HandlesDropAtTheLastUse) {
  Fixture f;
  Graph g;
  const NodeId ids = g.input("ids", GgmlType::I32, {2, 1, 1, 1});
  NodeId x = g.get_rows(f.weight(g), ids, "x");
  for (int i = 0; i < 6; ++i) x = g.add(x, x, std::string("a").append(std::to_string(i)));
  g.mark_output(x);
  const EagerGraph eg(std::move(g));
  GraphRunner run(f.pool, f.cpu, f.kv);
  const std::vector<int32_t> id_data = {1, 7};
  const HostInput in[1] = {{ids, id_data}};
  f.pool.reset_peak();
  run.run(eg, in);
  const size_t f32_buffer = BufferPool::allocation_len(2 * kE) * sizeof(float);
  EXPECT_LE(f.pool.stats().peak_transient_bytes, BufferPool::slab_bytes(8) + 2 * f32_buffer);
  const std::vector<float> got = values(run.output(x));
  EXPECT_FLOAT_EQ(got[static_cast<size_t>(kE + 3)], 64.0f * f.at(7, 3));
  run.release();
  EXPECT_EQ(f.pool.stats().outstanding, 0);
}

// A kernel error mid-graph (a row id outside the table) drops every handle of the run.
TEST(GraphRunner, ErrorLeavesNothingOutstanding) {
  Fixture f;
  Graph g;
  const NodeId ids = g.input("ids", GgmlType::I32, {2, 1, 1, 1});
  const NodeId w = f.weight(g);
  const NodeId x = g.get_rows(w, ids, "x");
  const NodeId ids2 = g.input("ids2", GgmlType::I32, {1, 1, 1, 1});
  const NodeId bad = g.get_rows(w, ids2, "bad");
  const NodeId y = g.add(x, bad, "y");
  g.mark_output(y);
  const EagerGraph eg(std::move(g));
  GraphRunner run(f.pool, f.cpu, f.kv);
  const std::vector<int32_t> ok = {0, 1}, out_of_range = {static_cast<int32_t>(kRows)};
  const HostInput in[2] = {{ids, ok}, {ids2, out_of_range}};
  EXPECT_THROW(run.run(eg, in), Error);
  EXPECT_EQ(f.pool.stats().outstanding, 0);
}

}  // namespace
}  // namespace minfer::eager
