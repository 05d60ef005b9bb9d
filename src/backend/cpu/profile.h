// Per-op-kind timing of the CPU executor (`minfer bench --profile`).
//
// When a CpuBackend has an OpProfile attached (set_profile), every executed node is timed on
// the calling (scheduler) thread and its time is added to its kind: matmuls by weight type
// (the "logits" output projection apart), attention, norms, rope (also the fused
// bias+rope+K/V store), K/V store, embedding rows, elementwise. The time the calling thread
// spends waiting for the pool's workers (the end of every pool job and every in-job barrier)
// is taken out of the node's time and counted as waits instead (split into sync: barriers and
// late wake-ups, and tail: workers finishing their last work, the imbalance), so the kinds
// plus the waits are the calling thread's whole timeline inside execute().
//
// Zero cost when off: the backend tests one pointer per node and the pool one pointer per job
// and barrier; no clock is read.
//
// Ownership: the OpProfile is owned by the caller and borrowed by the backend (and its pool)
// until detached with set_profile(nullptr). Thread safety: written only by the thread that
// drives the backend (the pool's caller thread); read it between steps. Failure: none.
// Cost when on: two clock reads per node and per waiting job / barrier (~50 ns each).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "backend/cpu/thread_pool.h"
#include "common/dtype.h"
#include "graph/graph.h"

namespace minfer::cpu {

enum class OpKind : uint8_t {
  MatMul,       // by weight type: OpProfile::matmul_ns
  Logits,       // the output projection (node "logits")
  Attention,
  Norm,         // rms_norm
  Rope,         // rope, and the fused qkv bias + rope + K/V store
  KvStore,
  GetRows,      // token embedding rows
  Elementwise,  // add, mul, silu, swiglu, geglu, scale, softcap
  Count
};
constexpr size_t kNumOpKinds = static_cast<size_t>(OpKind::Count);
// Weight types indexed by their GGUF number (GgmlType values are below this).
constexpr size_t kNumProfTypes = 64;

std::string op_kind_name(OpKind k);
// The kind a node is counted under (OpKind::Count for nodes that do not execute).
OpKind op_kind_of(const Node& n);

struct OpProfile {
  std::array<uint64_t, kNumOpKinds> ns{};     // summed over nodes, sync waits excluded
  std::array<uint64_t, kNumOpKinds> calls{};  // node executions
  std::array<uint64_t, kNumProfTypes> matmul_ns{};  // OpKind::MatMul split by weight type
  std::array<uint64_t, kNumProfTypes> matmul_calls{};
  // The calling thread waiting for workers (ThreadPool::Waits): sync = in-job barriers and
  // workers picking a job up late; tail = workers finishing their last work (imbalance).
  ThreadPool::Waits waits;

  void clear() { *this = OpProfile{}; }
  // Everything above: the executor's share of a step.
  uint64_t total_ns() const;
};

}  // namespace minfer::cpu
