// Arena plan from liveness intervals (see arena.h).
#include "alloc/arena.h"

#include <chrono>

#include "common/error.h"

namespace minfer {

uint64_t ArenaPlan::total_arena_bytes() const {
  uint64_t t = 0;
  for (uint64_t b : arena_bytes) t += b;
  return t;
}

uint64_t ArenaPlan::total_lower_bound() const {
  uint64_t t = 0;
  for (uint64_t b : lower_bound) t += b;
  return t;
}

uint64_t ArenaPlan::total_raw_lower_bound() const {
  uint64_t t = 0;
  for (uint64_t b : raw_lower_bound) t += b;
  return t;
}

std::vector<PlanBuffer> arena_buffers(const Liveness& lv, BackendKind backend) {
  std::vector<PlanBuffer> out;
  for (const LiveInterval& iv : lv.intervals) {
    if (iv.backend != backend) continue;
    // Sizes rounded up to the granule: every offset is then a multiple of it by construction,
    // and the live-bytes bound counts what an aligned arena can actually achieve.
    const uint64_t size = (iv.bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    out.push_back(PlanBuffer{iv.root, iv.first, static_cast<int64_t>(iv.last) + 1, size, 1});
  }
  return out;
}

ArenaPlan plan_arena(const Liveness& lv, const PlanParams& params) {
  auto t0 = std::chrono::steady_clock::now();
  ArenaPlan plan;
  plan.interval_offset.assign(lv.intervals.size(), 0);
  std::vector<size_t> index;  // planner buffer -> interval
  for (int b = 0; b < kNumBackends; ++b) {
    const auto kind = static_cast<BackendKind>(b);
    index.clear();
    for (size_t i = 0; i < lv.intervals.size(); ++i) {
      if (lv.intervals[i].backend == kind) index.push_back(i);
    }
    if (index.empty()) continue;
    std::vector<PlanBuffer> bufs = arena_buffers(lv, kind);
    MINFER_ASSERT(bufs.size() == index.size());
    OffsetPlan op = plan_offsets(bufs, params);
    for (size_t k = 0; k < index.size(); ++k) plan.interval_offset[index[k]] = op.offsets[k];
    plan.arena_bytes[static_cast<size_t>(b)] = op.height;
    plan.lower_bound[static_cast<size_t>(b)] = op.lower_bound;
    plan.method[static_cast<size_t>(b)] = op.method;
    for (size_t k = 0; k < index.size(); ++k) bufs[k].size = lv.intervals[index[k]].bytes;
    plan.raw_lower_bound[static_cast<size_t>(b)] = live_bytes_lower_bound(bufs);
  }
  plan.plan_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

}  // namespace minfer
