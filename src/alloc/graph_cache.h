// GraphCache<Key>: keeps built graphs while their key (what the graph was built for, e.g. the
// model layer's GraphParams, model/graph_params.h) stays equal, and keeps ONE allocator across
// rebuilds so the KV regions (inside the allocator) survive (design doc §2.8).
//
// Why a template: the cache only stores and compares keys, and the params a graph is built for
// belong to whoever builds it (the model layer), above alloc. Keying on an opaque type keeps
// alloc free of model knowledge; a template (rather than a hash or an encoded byte key) keeps the
// key's defaulted operator==, so a field added to the params can never be silently left out of
// the comparison (a stale graph reused for other params). Key: copyable, equality-comparable.
//
// Usage per forward call:
//   if (!cache.try_reuse(params)) cache.replace_graph(build_graph(params), params);
//   fill inputs via cache.allocator(), then Scheduler::execute(*cache.graph()).
//
// Several graphs: when the allocator's plans hold no buffers of their own (Arena planner, whose
// cross-backend staging windows live in the arenas: GraphAllocator::can_swap_plans), up to
// `capacity` graphs are kept, each with its saved plan; try_reuse of a cached one swaps its plan
// back in (no build, no planning, no allocation), so an engine whose batch shape moves between a
// few buckets (the multi-sequence decode) stops building graphs after warm-up. A plan made before
// the arena grew is planned again once (n_replans). Otherwise one graph is kept, as before.
//
// The key must not contain the number of cached tokens (n_past): positions are data, not
// structure (ARCHITECTURE.md invariant 1) — otherwise every decode step would rebuild.
// Ownership: owns the graphs and the allocator (which borrows or owns the backends).
// Thread safety: none.
// Failure: replace_graph rethrows what alloc_graph throws (Error(InvalidArgument): a cycle, a KV
// region of another size or type); the failed graph is dropped, so the next try_reuse misses.
// Cost: try_reuse compares the key with each cached entry (a few struct compares); a swap is
// O(1); replace_graph runs alloc_graph.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "alloc/allocator.h"

namespace minfer {

template <class Key>
class GraphCache {
 public:
  explicit GraphCache(size_t capacity = 1) : capacity_(capacity < 1 ? 1 : capacity) {}

  GraphAllocator& allocator() { return alloc_; }
  const GraphAllocator& allocator() const { return alloc_; }

  // True (and that graph becomes current) when a graph built for equal params is cached.
  bool try_reuse(const Key& params);
  // Store a freshly built graph for `params` and plan it with the SAME allocator (KV kept).
  // Throws what alloc_graph throws; the cache is then empty (the next call rebuilds).
  const AllocPlan& replace_graph(Graph graph, const Key& params);

  Graph* graph() { return cur_ ? cur_->graph.get() : nullptr; }
  const Key* params() const { return cur_ ? &cur_->params : nullptr; }
  uint64_t n_builds() const { return n_builds_; }
  uint64_t n_reuses() const { return n_reuses_; }
  uint64_t n_replans() const { return n_replans_; }
  size_t n_cached() const { return entries_.size(); }

 private:
  struct Entry {
    Key params;
    std::unique_ptr<Graph> graph;  // stable address: plans and the scheduler name it
    AllocPlan saved;               // its plan while another graph is current
    uint64_t last_use = 0;
  };
  void park_current();  // save the current graph's plan into its entry

  GraphAllocator alloc_;
  size_t capacity_;
  std::vector<std::unique_ptr<Entry>> entries_;
  Entry* cur_ = nullptr;
  uint64_t clock_ = 0;
  uint64_t n_builds_ = 0;
  uint64_t n_reuses_ = 0;
  uint64_t n_replans_ = 0;
};

template <class Key>
void GraphCache<Key>::park_current() {
  if (cur_ == nullptr) return;
  if (alloc_.has_plan() && alloc_.can_swap_plans()) {
    cur_->saved = AllocPlan{};
    alloc_.swap_plan(cur_->saved);
  }
  cur_ = nullptr;
}

template <class Key>
bool GraphCache<Key>::try_reuse(const Key& params) {
  if (cur_ != nullptr && cur_->params == params && alloc_.has_plan()) {
    cur_->last_use = ++clock_;
    ++n_reuses_;
    return true;
  }
  if (capacity_ == 1 || !alloc_.can_swap_plans()) return false;
  Entry* hit = nullptr;
  for (auto& e : entries_)
    if (e.get() != cur_ && e->params == params && e->saved.valid) hit = e.get();
  if (hit == nullptr) return false;
  park_current();
  cur_ = hit;
  cur_->last_use = ++clock_;
  if (!alloc_.swap_plan(cur_->saved)) {
    // Planned before the arena last grew: plan it again (the arena is big enough now).
    alloc_.alloc_graph(*cur_->graph);
    ++n_replans_;
  }
  ++n_reuses_;
  return true;
}

template <class Key>
const AllocPlan& GraphCache<Key>::replace_graph(Graph graph, const Key& params) {
  const bool keep = capacity_ > 1 && alloc_.can_swap_plans();
  if (keep) {
    park_current();
  } else {
    entries_.clear();
    cur_ = nullptr;
  }
  // Evict the least recently used graphs beyond capacity (their plans hold no buffers).
  while (entries_.size() >= capacity_) {
    auto lru = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
      return a->last_use < b->last_use;
    });
    entries_.erase(lru);
  }
  auto e = std::make_unique<Entry>();
  e->params = params;
  e->graph = std::make_unique<Graph>(std::move(graph));
  e->last_use = ++clock_;
  Entry* fresh = e.get();
  entries_.push_back(std::move(e));
  try {
    // The graph lives in its entry from here on, so the plan's node ids and the scheduler's
    // resolved pointers refer to the object callers get from graph().
    const AllocPlan& plan = alloc_.alloc_graph(*fresh->graph);
    cur_ = fresh;
    ++n_builds_;
    return plan;
  } catch (...) {
    entries_.pop_back();
    throw;
  }
}

}  // namespace minfer
