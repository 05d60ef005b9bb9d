// Offset planner internals: the decomposition search's set finder (offset_planner_decompose.cpp,
// docs/PLANNER.md "Decomposition search"): a block's items, their boundary index, and the
// depth-first search for a set of items of constant height from a seed item. Not a public API.
// Ownership: values and references into the caller's vectors, valid for one call. Thread
// safety: none needed (state is per call). Cost: see each function.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace minfer::planner_detail::decompose {

struct Item {
  uint32_t lo, hi;  // sections [lo, hi)
  uint64_t size, align;
  // -1: the buffer `buf`. Else a rectangle: while its block is being reduced, the index of its
  // members in the Decomposer's blocks_; once the block is final, the index of its node.
  int32_t block;
  uint32_t buf;
  bool tried;  // already a seed without success in this block
};

struct Group {
  uint64_t sum;
  uint32_t first, last;  // its members: Index::members[first, last)
};
// A block's boundaries and the items ending and starting at each. Rebuilt after every
// contraction, so it lives in flat arrays reused from one rebuild to the next (with a vector per
// boundary, allocation took a fifth of the decomposition's CPU).
struct Index {
  std::vector<uint32_t> times;  // distinct boundaries, ascending
  // Per boundary k, entries [x_at[k], x_at[k + 1]) of x: items ending there, items born there,
  // groups of the births (births by death, sum descending).
  std::vector<uint32_t> end_at, birth_at, group_at;
  std::vector<uint32_t> ends, births, members;
  std::vector<Group> groups;

  static std::span<const uint32_t> range(const std::vector<uint32_t>& v,
                                         const std::vector<uint32_t>& at, size_t k) {
    return {v.data() + at[k], v.data() + at[k + 1]};
  }
  std::span<const uint32_t> ends_of(size_t k) const { return range(ends, end_at, k); }
  std::span<const uint32_t> births_of(size_t k) const { return range(births, birth_at, k); }
  std::span<const Group> groups_of(size_t k) const {
    return {groups.data() + group_at[k], groups.data() + group_at[k + 1]};
  }
  std::span<const uint32_t> members_of(const Group& g) const {
    return {members.data() + g.first, members.data() + g.last};
  }
  size_t boundary(uint32_t t) const {  // the index of boundary t
    return static_cast<size_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
  }
};

// Rebuilds `ix` for `items` (sorted by start, then end: the Decomposer's item_before); scratch
// vectors are reused between calls. whole_groups: items born together that also die together
// form one group, which the search takes whole (else every birth is its own group). O(m log m).
void build_index(const std::vector<Item>& items, bool whole_groups, Index& ix,
                 std::vector<uint32_t>& scratch, std::vector<uint32_t>& scratch2);

// A block being reduced: its items (sorted), their index, the items already in a set found this
// round (`used`), its time range [p, q), how many items do not / do span all of it, and whether
// parallel sets are left to whole-group contraction.
struct SeedBlock {
  const std::vector<Item>& items;
  const Index& ix;
  const std::vector<uint8_t>& used;
  uint32_t p, q;
  size_t n_nonfull, n_full;
  bool defer_parallel;
};
struct SeedResult {
  bool found = false;         // `set` holds the set containing the seed
  bool touched_used = false;  // met an item set aside: the result may differ without it
};
// A set containing items[x] (born at boundary k0) whose bytes are constant over its time range,
// the first one found, closing as early as possible (see the .cpp), into `set`. At most 2,048
// steps, all also counted in `steps`; stops once `steps` passes `budget`.
SeedResult seed_search(const SeedBlock& block, uint32_t x, size_t k0, std::vector<uint32_t>& set,
                       uint64_t& steps, uint64_t budget);

}  // namespace minfer::planner_detail::decompose
