#include "alloc/graph_cache.h"

#include <utility>

namespace minfer {

bool GraphCache::try_reuse(const GraphParams& params) {
  if (!graph_ || !params_ || !(*params_ == params) || !alloc_.has_plan()) return false;
  ++n_reuses_;
  return true;
}

const AllocPlan& GraphCache::replace_graph(Graph graph, const GraphParams& params) {
  graph_.reset();
  params_.reset();
  graph_.emplace(std::move(graph));
  try {
    // The graph lives in graph_ from here on, so the plan's node ids and the scheduler's
    // resolved pointers refer to the object callers get from graph().
    const AllocPlan& plan = alloc_.alloc_graph(*graph_);
    params_ = params;
    ++n_builds_;
    return plan;
  } catch (...) {
    graph_.reset();
    throw;
  }
}

}  // namespace minfer
