// Perfect packings: interval-packing instances whose optimum is known by construction (test and
// benchmark data for the offset planner, docs/PLANNER.md "Perfect packings").
//
// A `height`-byte by `steps`-step rectangle is cut into buffers (a buffer is a sub-rectangle:
// its lifetime is the time extent, its size the byte extent), so every step is covered exactly
// once: the lower bound (most bytes live at one step) is `height`, the construction is a plan of
// that height, and so it is the optimum. Three kinds of cuts, because a planner tuned on one
// structure can miss another:
//  * Guillotine: recursive edge-to-edge cuts, across time or across bytes.
//  * Pinwheel: the same, but some rectangles are cut into a pinwheel of five pieces, which no
//    edge-to-edge cut separates (the classic non-guillotine pattern).
//  * Sweep: an allocator-like trace: the byte range is always tiled by live buffers; at each
//    event a run of 1-3 adjacent buffers dies and its bytes are re-cut into 1-3 new buffers.
//    Brick-wall layouts, non-guillotine almost everywhere.
// Sizes are multiples of a granule (byte cuts fall on its multiples); alignments are optional
// and always satisfied by the constructed offset (a power of two dividing it), so they cannot
// raise the optimum. The buffers are shuffled, so their order says nothing about the solution.
//
// Deterministic: the same params give the same instance (std::mt19937_64, no distributions
// whose output is implementation-defined). Ownership: returns values. Thread safety: stateless.
// Cost: O(n log n). Failure: params outside the documented ranges throw
// Error(InvalidArgument) naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/offset_planner.h"

namespace minfer {

enum class PackingCuts : uint8_t { Guillotine, Pinwheel, Sweep };
const char* packing_cuts_name(PackingCuts c);

// How buffers' alignment fields are set: all 1; all the granule; or per buffer a random power
// of two (1 .. 64 x granule) that divides its constructed offset.
enum class PackingAlign : uint8_t { None, Granule, Mixed };

struct PackingParams {
  uint64_t seed = 1;
  PackingCuts cuts = PackingCuts::Guillotine;
  PackingAlign align = PackingAlign::None;
  uint32_t n_buffers = 500;  // buffers made (exactly; Sweep: at least, <= n + 3); 2 .. 100000
  uint64_t height = uint64_t{1} << 20;  // bytes: the optimum; a multiple of granule
  int64_t steps = 4096;                 // time extent (Guillotine, Pinwheel); >= 2
  uint64_t granule = 64;                // byte cuts on multiples of it; a power of two
  // Shape bias, log2: > 0 favours cuts across time (short-lived, wide buffers), < 0 cuts across
  // bytes (long-lived, thin ones). Guillotine and Pinwheel; Sweep uses `sweep_live` instead.
  double aspect = 0;
  double pinwheel_share = 0.3;  // Pinwheel: the chance that a split is a pinwheel
  uint32_t sweep_live = 16;     // Sweep: how many buffers are live at once, on average; >= 2
};

struct PerfectPacking {
  PackingParams params;
  std::vector<PlanBuffer> buffers;  // ids 0..n-1, shuffled
  std::vector<uint64_t> offsets;    // the construction: a plan of height `optimum`
  uint64_t optimum = 0;             // == params.height == the lower bound
  std::string describe() const;     // one line: kind, n, steps, granule, alignments, aspect
};

PerfectPacking make_perfect_packing(const PackingParams& params);

// Params of one instance of the benchmark's family, drawn from `seed`: 200-2,000 buffers, the
// three kinds of cuts, aspect biases from -3 to 3 (Sweep: 4-64 live), granules 1 to 4 KiB,
// the three alignment modes, 2^20 bytes high.
PackingParams draw_packing_params(uint64_t seed);

}  // namespace minfer
