#include "alloc/graph_cache.h"

#include <algorithm>
#include <utility>

namespace minfer {

void GraphCache::park_current() {
  if (cur_ == nullptr) return;
  if (alloc_.has_plan() && alloc_.can_swap_plans()) {
    cur_->saved = AllocPlan{};
    alloc_.swap_plan(cur_->saved);
  }
  cur_ = nullptr;
}

bool GraphCache::try_reuse(const GraphParams& params) {
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

const AllocPlan& GraphCache::replace_graph(Graph graph, const GraphParams& params) {
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
