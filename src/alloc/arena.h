// Arena plan: byte offsets for every owned buffer of a graph inside ONE arena per backend,
// computed by the offset planner from the graph's liveness intervals.
//
// Input is the allocator's Liveness (alloc/liveness.h), so everything it decided is honoured:
// build-order steps, inputs and outputs pinned to the end, in-place aliases and views folded
// into their owner's interval (an alias group is one interval), dead nodes without storage.
// Persistent KV regions and weights are not intervals and stay OUTSIDE the arena.
// A closed interval [first, last] becomes the half-open lifetime [first, last + 1), and its
// bytes are rounded up to kArenaAlignment, so every offset is aligned by construction and the
// reported lower bound (most granule-rounded bytes live at once) is one an aligned arena can
// reach. raw_lower_bound counts the unrounded bytes.
//
// Plain data in, plain data out: the GraphAllocator's Arena mode places its BufRefs with it and
// `minfer plan` prints it. Ownership: returns values, keeps nothing. Thread safety: pure
// function. Failure: plan_offsets' Error(InvalidArgument) (never for a Liveness built by
// compute_liveness). Cost: one plan_offsets per backend.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "alloc/liveness.h"
#include "planner/offset_planner.h"

namespace minfer {

// Offsets inside the arena are multiples of this (SIMD loads, cache lines).
inline constexpr uint64_t kArenaAlignment = 64;

struct ArenaPlan {
  std::vector<uint64_t> interval_offset;                 // per Liveness::intervals[i]
  std::array<uint64_t, kNumBackends> arena_bytes{};      // the arena's size per backend
  std::array<uint64_t, kNumBackends> lower_bound{};      // most (rounded) bytes live at once
  std::array<uint64_t, kNumBackends> raw_lower_bound{};  // the same without the rounding
  std::array<std::string, kNumBackends> method{};        // planner strategy that won
  double plan_us = 0;                                    // all backends together

  uint64_t total_arena_bytes() const;
  uint64_t total_lower_bound() const;
  uint64_t total_raw_lower_bound() const;
};

// The planner instance of one backend (ids are the intervals' root node ids).
std::vector<PlanBuffer> arena_buffers(const Liveness& lv, BackendKind backend);

ArenaPlan plan_arena(const Liveness& lv, const PlanParams& params = {});

}  // namespace minfer
