// kv::Cache::Impl (internal to src/kv): the state behind kv::Cache, shared by cache.cpp
// (construction, batches, stats) and cache_seq.cpp (sequence operations, prefix reuse,
// invariants, dumps). Ownership, thread safety and failure modes as kv::Cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/error.h"
#include "kv/block_pool.h"
#include "kv/cache.h"

namespace minfer::kv {

struct Cache::Impl {
  struct Seq {
    std::vector<int32_t> table;  // ceil(len / B) block ids
    int64_t len = 0;
    // False once the sequence was shifted: its rows then depend on discarded tokens too, so
    // none of its blocks may be keyed for reuse until it is emptied.
    bool keyable = true;
  };
  // One sequence of the pending placement. The table after apply() is
  // table[0, first_changed) followed by blocks[new_begin, new_end) of the pending blocks.
  struct PendingSeq {
    int32_t seq = 0;
    int64_t start = 0;  // first position written (truncates the sequence there at apply())
    int64_t end = 0;    // length after apply()
    int32_t first_changed = 0;
    int32_t new_begin = 0;
    int32_t new_end = 0;
    int32_t cow_src = -1;  // block whose rows [0, start % B) the first new block copies
  };

  Impl(const CacheParams& params, const detail::Layout& layout);

  int32_t block_size() const { return pool.layout().block_size; }
  int64_t blocks_for(int64_t n_tokens) const {
    return (n_tokens + block_size() - 1) / block_size();
  }
  void check_seq(int32_t seq, const char* what) const;
  void assert_idle(const char* what) const;
  void reserve_table(Seq& q) const;
  void truncate(int32_t seq, int64_t n);            // releases blocks from ceil(n / B) on
  void key_full_blocks(int32_t seq, int64_t from);  // key blocks full now, from position from

  // place()'s passes (cache.cpp): group and check the batch; count the fresh blocks needed;
  // throw Error(OutOfMemory); fill the Placement (copies, tables, slots, token ids).
  void group_batch(std::span<const int32_t> pos, std::span<const int32_t> seq);
  int64_t plan_blocks();
  int32_t append_block(size_t i) const;
  bool last_of_all_holders(size_t i) const;
  void give_back_pending();
  // seq_shift's steps (cache_seq.cpp).
  int64_t shift_destinations(const Seq& q, size_t j0, size_t nb_new);
  void shift_rows(const Seq& q, int64_t n_keep, int64_t n_discard, size_t j0);
  [[noreturn]] void fail_out_of_blocks(int64_t need) const;
  void fill_placement(std::span<const int32_t> token, std::span<const int32_t> pos,
                      std::span<const int32_t> seq, Placement& out);

  CacheParams p;
  detail::BlockPool pool;
  std::vector<Seq> seqs;
  std::vector<int32_t> batch_index;  // per seq id: its index in pending_seqs, or -1 (place())

  // The pending placement (at most one).
  bool pending = false;
  uint64_t serial = 0;
  std::vector<PendingSeq> pending_seqs;
  std::vector<int32_t> pending_blocks;  // fresh blocks, held (ref 1) by the placement
  std::vector<detail::BlockPool::Source> pending_sources;  // where each came from
  uint64_t pending_cow = 0;

  std::vector<int32_t> scratch;                            // seq_shift's destination blocks
  std::vector<detail::BlockPool::Source> scratch_sources;  // where its fresh ones came from

  uint64_t cow_copies = 0;
  uint64_t prefix_hits = 0;
  uint64_t prefix_lookups = 0;
  uint64_t dedup_blocks = 0;
};

}  // namespace minfer::kv
