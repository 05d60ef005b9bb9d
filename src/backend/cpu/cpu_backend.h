// CpuBackend: the host implementation of minfer::Backend (src/backend/backend.h).
//
// Pool: HostPoolBackend (backend/host_backend.h), as for the simulated device: 64-byte aligned
// buffers addressed by stable ids; alloc() reuses a released buffer of exactly the requested
// size (LIFO, zero-filled again) or creates a zero-filled one; alloc_fresh() always creates one;
// release() only returns the id to the free list (memory is kept until the backend dies).
// execute() runs the node immediately on the backend's thread pool; sync() is a no-op.
//
// Node conventions the kernels rely on (see kernels.h for the math):
//  * I32 inputs (ids, positions) are read as int32 bit patterns from their 4-byte slots.
//  * Strided sources: a View source with p.view_row_stride is honoured for MatMul's x, RmsNorm's
//    x, KvStore's k/v, Rope's x and Attention's q. Other ops need contiguous sources.
//  * Rope writes a contiguous [head_dim, n_head, n_tok] output, except in place (out == src):
//    then it keeps the source's layout. Do not alias Rope onto a strided view unless every
//    consumer reads that view's layout.
//  * QkvBiasRopeStore's node shape is the full qkv row [n_q + 2 n_kv, n_tok]; roped q is the
//    first n_q floats of each row (in place or not), so Attention reads q with token stride
//    ne[0] of that node. src1 (bias) may be kNoNode.
//  * KvStore writes the K region (args.kv_k, else args.out) and V region (args.kv_v).
//  * SwiGlu / GeGlu with one source (fused gate/up): a contiguous [2n, T] source of rows
//    [gate | up]; the output (same shape, in place or not) has rows [gate | glu].
//
// Ownership: owns its buffers, its worker threads and the kernels' scratch Arena; exec() hands
// out borrowed pointers to the latter two. Thread safety: driven by one thread (the scheduler);
// kernels fan out on the internal pool. Failure: alloc throws Error(OutOfMemory); execute()
// throws Error(Unsupported) for an op, weight type or strided source it cannot run (supports()
// says which ops), and kernels' Error(InvalidArgument) for KV positions outside the context.
// Cost: execute() is the kernel's work spread over the pool; no allocation per execute() after
// warm-up (the scratch arena only grows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/host_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/profile.h"
#include "backend/cpu/thread_pool.h"

namespace minfer::cpu {

struct CpuBackendOptions {
  int n_threads = 1;
  SimdLevel simd = SimdLevel::kBest;
};

class CpuBackend final : public HostPoolBackend {
 public:
  explicit CpuBackend(const CpuBackendOptions& opts = {});
  ~CpuBackend() override;

  BackendKind kind() const override { return BackendKind::Cpu; }

  bool supports(const Node& n) const override;
  void execute(const NodeArgs& args) override;
  void sync() override {}

  int n_threads() const { return pool_.size(); }
  SimdLevel simd() const { return simd_; }
  // Load-time packed weights (borrowed; must outlive the backend's last execute): MatMul nodes
  // whose weight has an entry read the packed copy. nullptr: none.
  void set_packed_weights(const PackedWeights* p) { packed_ = p; }
  // A table GetRows fetches through `read` instead of reading its bytes in place: bytes
  // [begin, begin + bytes), e.g. a tied token embedding whose mapped pages the repack released
  // (model/session.cpp: read = gguf::File::read_mapped). Why: each newly seen row would fault
  // its page back in, 0.1-0.6 ms on the development VM against a 4 us pread, and grow the
  // resident set again. `read` must be callable from the executing thread while the backend
  // lives. An empty RowSource (the default) turns it off.
  void set_row_source(RowSource s) { row_source_ = std::move(s); }
  // Kernel execution context (for callers that run kernels directly, e.g. eager mode).
  Exec exec() { return Exec{&pool_, &arena_, simd_}; }
  const Arena& arena() const { return arena_; }

  // Per-op-kind timing (profile.h): borrowed until set_profile(nullptr); nullptr = off (the
  // default, no clock read per node).
  void set_profile(OpProfile* p);

 private:
  void run_node(const NodeArgs& args);
  void run_node_profiled(const NodeArgs& args);

  OpProfile* profile_ = nullptr;
  ThreadPool pool_;
  Arena arena_;
  SimdLevel simd_;
  const PackedWeights* packed_ = nullptr;
  RowSource row_source_;
  std::vector<uint8_t> row_scratch_;  // get_rows_read's one-row buffer
};

}  // namespace minfer::cpu
