// GraphAllocator: decides where every node's output lives (design doc
// graph-allocator-and-kv-cache, §2-§3), owns the per-layer KV regions and fills graph inputs.
//
// alloc_graph(g) runs once per graph (re)build:
//   1. g.validate() — rejects cycles (Error InvalidArgument); its Kahn order is NOT used.
//   2. compute_liveness(g) — build-order intervals, views, in-place aliases (alloc/liveness.h).
//   3. returns the previous plan's buffers and staging buffers to their pools (Backend::release).
//   4. walks steps 0..n-1: first releases every held buffer whose interval ended (last < step),
//      then gives each interval starting at this step a pool buffer of its SIZE CLASS (powers of
//      two up to 16 KiB, then 16 KiB steps; the pool recycles exact matches only). Views and
//      in-place aliases get their owner's buffer at an offset; KvStore nodes get the layer's
//      persistent K region.
//   5. gives cross-backend staging one buffer per (source node, consuming backend), rewritten
//      by the scheduler on every execute. SizeClass: FRESH (never from the free list),
//      released at the next rebuild (design §2.7). Arena: a window of the consuming backend's
//      arena, planned with the other intervals over [the source's first step, its last reader
//      on that backend] (the copy runs at the start of a split after the source was produced,
//      before its first reader there), so the plan holds no buffer and can be swapped.
// The result is an AllocPlan: plain data, printable, JSON-able, read by the scheduler.
//
// KV regions: per layer, K and V of n_kv_embd x n_ctx elements of the node's p.kv_type_k /
// p.kv_type_v (f32 4 bytes, f16 2 bytes per element, q8_0 34 bytes per 32), created on first use
// with alloc_fresh on the backend of the first node that names the layer, never released, and
// surviving rebuilds (the allocator outlives graphs: GraphCache keeps it). A later graph asking for
// a larger region, other element types, or placing the layer on another backend, is an
// Error(InvalidArgument).
//
// Ownership: backends are borrowed (set_backend; must outlive every use) or owned
// (own_backend). The allocator owns every buffer id it obtained; the destructor does NOT touch
// the backends (a borrowed one may already be gone), so ids stay taken in a pool that outlives
// the allocator — call reset() first when the pools will be reused. Thread safety: none.
// Failure: Error(InvalidArgument) for a cycle, a node on an unregistered backend, attention
// reading a layer before any store, a KV request unlike the existing region (larger, other
// types, another backend), and fill_input of an unknown / mistyped / mis-sized input;
// Error(OutOfMemory) from the backends' pools. Broken internal invariants are MINFER_ASSERTs.
// Cost: alloc_graph is O(nodes + edges + held buffers * steps); fill_input is a memcpy.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/liveness.h"
#include "backend/backend.h"

namespace minfer {

// Size class of a request: the next power of two up to 16 KiB (minimum 64 B), then the next
// multiple of 16 KiB. All buffers of a class have the same length, so a rebuild with a slightly
// different n_tokens finds the previous buffers instead of growing the pool.
uint64_t size_class_bytes(uint64_t bytes);

struct KvPair {
  BufRef k;
  BufRef v;
  GgmlType k_type = GgmlType::F32;  // element types the regions were sized for
  GgmlType v_type = GgmlType::F32;
};

struct StagingBuf {
  NodeId src = kNoNode;                // node whose window is copied across
  BackendKind dst = BackendKind::Cpu;  // the consuming backend
  BufRef buf;                          // on dst; len = the source window's bytes
  // SizeClass: a fresh pool buffer the plan owns (released at the next rebuild). Arena: a
  // window of dst's arena planned as an interval [the source's first step, its last reader on
  // dst], so no live interval shares its bytes (owned = false; nothing to release).
  bool owned = true;
};

// Where interval buffers come from. SizeClass: pool buffers of size classes, recycled on an
// exact class match (the walk below). Arena: ONE buffer per backend, every interval at a byte
// offset from the offset planner (alloc/arena.h) over the same liveness — so aliases, views,
// pins and dead nodes are honoured identically; KV regions and staging stay outside the arena.
// The arena buffer is kept across rebuilds and replaced only when a plan needs more bytes.
enum class PlannerKind : uint8_t { SizeClass, Arena };

struct AllocStats {
  std::array<uint64_t, kNumBackends> plan_bytes{};  // distinct interval buffers (class bytes;
                                                    // Arena: the arena's planned height)
  std::array<uint64_t, kNumBackends> pool_bytes{};  // everything each pool has ever created
  uint32_t n_intervals = 0;  // owned buffers the plan needed (nodes that own storage)
  uint32_t n_buffers = 0;    // distinct pool buffers serving them
  uint32_t n_inplace = 0;    // in-place aliases taken
  uint32_t n_views = 0;
  uint64_t naive_bytes = 0;  // every interval its own buffer, real bytes
  uint64_t kv_bytes = 0;     // all persistent KV regions (K and V, all layers)
  uint64_t staging_bytes = 0;
  // Arena planner only: most (64 B-rounded) bytes live at once per backend, and planning time.
  std::array<uint64_t, kNumBackends> lower_bound_bytes{};
  double plan_us = 0;
};

struct AllocPlan {
  uint64_t generation = 0;     // increments on every alloc_graph
  uint64_t arena_version = 0;  // the arenas' version it was planned against
  bool valid = false;
  Liveness live;                         // what the plan was computed from
  std::vector<BufRef> node_buf;          // per node; !valid() = no buffer (dead, weight)
  std::vector<uint64_t> interval_class;  // per live.intervals[i]: the size class requested
  std::vector<uint32_t> interval_buf;    // per live.intervals[i]: the pool id it got
  std::vector<StagingBuf> staging;
  AllocStats stats;

  // The owner whose buffer `id` shares (views and in-place aliases), else kNoNode.
  NodeId alias_of(NodeId id) const;
  const StagingBuf* staging_for(NodeId src, BackendKind dst) const;
  std::string to_string(const Graph& g) const;
  std::string to_json(const Graph& g) const;
};

class GraphAllocator {
 public:
  GraphAllocator() = default;
  ~GraphAllocator();
  // Return every buffer (plan, staging AND the KV regions) to the pools; KV contents are lost.
  void reset();
  GraphAllocator(const GraphAllocator&) = delete;
  GraphAllocator& operator=(const GraphAllocator&) = delete;

  // Register the backend for its kind (borrowed / owned). Only before the first alloc_graph.
  void set_backend(Backend& b);
  void own_backend(std::unique_ptr<Backend> b);
  // The owner of paged K/V memory (nodes with p.kv_block_size > 0): the allocator gives those
  // nodes no region; the scheduler resolves their rows through it. Borrowed.
  void set_kv_source(const KvSource* s) { kv_source_ = s; }
  const KvSource* kv_source() const { return kv_source_; }
  // Choose the planner (see PlannerKind); takes effect at the next alloc_graph.
  void set_planner(PlannerKind k) { planner_ = k; }
  PlannerKind planner() const { return planner_; }
  Backend* backend(BackendKind k) const { return backends_[static_cast<size_t>(k)]; }

  // Plan g (see the file comment). Throws Error(InvalidArgument) on a cyclic / invalid graph,
  // a node on a backend that is not registered, or a KV region conflict; Error(OutOfMemory)
  // from the pools. The returned plan stays valid until the next alloc_graph.
  const AllocPlan& alloc_graph(const Graph& g);
  const AllocPlan& plan() const { return plan_; }
  bool has_plan() const { return plan_valid_; }

  // Several graphs, one allocator (GraphCache keeps one plan per cached graph): exchange the
  // current plan with a saved one, without planning or allocating. Only plans that hold no
  // buffer of their own can be saved: Arena planner (staging windows in the arenas;
  // can_swap_plans()). A saved plan points into the arenas, which only grow; one planned before the
  // last growth is stale, and swap_plan then returns false (the caller plans that graph again). The
  // old plan lands in `other` either way.
  bool can_swap_plans() const {
    if (planner_ != PlannerKind::Arena || !held_.empty()) return false;
    for (const StagingBuf& sb : plan_.staging)
      if (sb.owned) return false;
    return true;
  }
  bool swap_plan(AllocPlan& other);

  // Fill an input by name after alloc_graph, before execution. i32 values are stored as their
  // bit patterns in the f32 buffer. Errors (InvalidArgument): no plan for g, unknown input
  // name, wrong dtype, more data than the input holds. Fewer values fill a prefix.
  void fill_input_i32(const Graph& g, std::string_view name, std::span<const int32_t> data);
  void fill_input_f32(const Graph& g, std::string_view name, std::span<const float> data);

  // The address a BufRef's window has for its backend's executor (kernel_ptr + offset): what
  // the scheduler puts in NodeArgs. Host memory only on host-memory backends.
  uint8_t* kernel_ptr(const BufRef& b) const;
  // Host view of a BufRef's window (host_ptr + offset), or nullptr when the backend's memory is
  // not host-addressable. No sync: only read after the producer's backend was synchronised
  // (design §3.4, the Phase-3 bug); copy_node_to_host is the safe read.
  uint8_t* host_ptr(const BufRef& b) const;
  // A node's window as floats through the host view (tests; host-addressable backends only,
  // asserted). No sync. Error if it has no buffer.
  std::span<const float> node_f32(NodeId id) const;
  // Copy the first `bytes` of a node's window to host memory through its backend (sync + copy
  // on a queued backend). Errors (InvalidArgument): no buffer in the current plan, `bytes`
  // beyond the node's length.
  void copy_node_to_host(NodeId id, void* dst, size_t bytes) const;
  // Copy `bytes` from one window to another (the scheduler's staging copies). Same backend: a
  // buffer copy; across backends through whichever side is host-addressable (the source's
  // copy_to_host waits for its queue). Both sides device memory is not implemented (asserted).
  void copy(const BufRef& from, const BufRef& to, size_t bytes) const;

  // The layer's persistent regions, or nullopt if no graph has used the layer yet.
  std::optional<KvPair> kv_pair(int32_t layer) const;
  uint64_t kv_bytes() const;
  AllocStats stats() const;

 private:
  void release_plan_buffers();
  Backend* backend_of(const BufRef& b) const;       // asserts valid and registered
  const BufRef& node_buf_checked(NodeId id) const;  // Error if no buffer in the plan
  void check_backends(const Graph& g, const Liveness& lv) const;
  KvPair ensure_kv(int32_t layer, BackendKind b, const Node& n);
  void walk(const Graph& g);
  void prepare_arenas(const Graph& g);  // Arena: plan offsets, make sure each arena fits
  // Arena mode: the staging a graph needs, and (appended to *intervals) one interval each on
  // the consuming backend.
  std::vector<StagingBuf> staging_needs(const Graph& g, const Liveness& lv,
                                        std::vector<LiveInterval>* intervals) const;
  void plan_staging(const Graph& g);
  void fill_input(const Graph& g, std::string_view name, GgmlType type, const void* data,
                  size_t bytes);

  struct Held {
    int32_t last;
    BackendKind backend;
    uint32_t id;
  };

  std::array<Backend*, kNumBackends> backends_{};
  const KvSource* kv_source_ = nullptr;
  std::vector<std::unique_ptr<Backend>> owned_;
  std::vector<KvPair> kv_;  // by layer; !k.valid() = not created
  std::vector<Held> held_;  // interval buffers not yet returned to their pool
  AllocPlan plan_;
  bool plan_valid_ = false;
  uint64_t generation_ = 0;
  uint64_t arena_version_ = 0;  // bumps whenever an arena buffer is replaced
  PlannerKind planner_ = PlannerKind::SizeClass;
  std::array<BufRef, kNumBackends> arena_{};  // Arena mode: the one buffer per backend
  std::vector<uint64_t> arena_offset_;        // per plan_.live.intervals[i], then staging
  std::vector<StagingBuf> arena_staging_;     // Arena: staging_needs of the graph planned
};

}  // namespace minfer
