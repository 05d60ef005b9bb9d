// kv::detail::BlockPool (internal to src/kv; kv::Cache is the public face): the paged cache's
// blocks. Owns the reserved region (one mmap of n_blocks * block_stride bytes, PROT_NONE until
// a block is committed), each block's refcount and state, the committed free list, the
// uncommitted blocks, the prefix cache's LRU list and key index, and the token id of every row
// (what a prefix-cache hit compares).
//
// A block is in exactly one state: Null (block 0, committed, never handed out), Free (ref 0,
// unkeyed; on the committed free list or uncommitted), Used (ref > 0; keyed or not) or Cached
// (ref 0, keyed, on the LRU list). Keyed blocks are immutable: their rows and tokens are what
// the key says, so nothing writes into them (the Cache copies first).
//
// Ownership: owns the mapping (munmap in the destructor). Thread safety: none. Failure:
// acquire() throws Error(OutOfMemory) if the OS refuses to commit a block (nothing changed);
// the constructor throws Error(Io) if the region cannot be reserved; misuse (unref of a free
// block, acquire with nothing available) is a MINFER_ASSERT. Cost: acquire/unref O(log n)
// (the uncommitted heap) plus an mprotect/madvise when a block is committed/decommitted; key
// lookups O(1) expected plus a B-token compare.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace minfer::kv::detail {

// Byte geometry of the block-major region (see kv/cache.h).
struct Layout {
  int32_t block_size = 0;  // B
  int64_t n_layer = 0;
  size_t k_row = 0;
  size_t v_row = 0;
  size_t layer_stride = 0;  // B * (k_row + v_row)
  size_t block_stride = 0;  // n_layer * layer_stride rounded up to the page size
  int32_t n_blocks = 0;     // including the null block 0
};

enum class BlockState : uint8_t { Null, Free, Used, Cached };

struct BlockMeta {
  int32_t ref = 0;
  BlockState state = BlockState::Free;
  bool committed = false;
  bool keyed = false;
  uint32_t gen = 0;         // bumped whenever the block loses its key: children keyed under the
                            // old contents stop matching
  uint64_t key = 0;         // keyed: hash(parent_key, tokens)
  uint64_t parent_key = 0;  // keyed: the parent's key (kRootKey for a first block)
  int32_t parent = -1;      // keyed: the block holding the previous B tokens (-1: none)
  uint32_t parent_gen = 0;  // keyed: the parent's gen when this block was keyed
  int32_t lru_prev = -1;    // Cached: neighbours on the LRU list
  int32_t lru_next = -1;
};

// Block ids by key: open addressing, linear probing, backward-shift deletion (no tombstones),
// capacity a power of two >= 2x the blocks, allocated once. Keys are unique in the index.
class KeyIndex {
 public:
  void init(int32_t n_blocks);
  int32_t find(uint64_t key, std::span<const BlockMeta> meta) const;  // -1: absent
  void insert(int32_t block, std::span<const BlockMeta> meta);
  void erase(int32_t block, std::span<const BlockMeta> meta);
  int64_t size() const { return size_; }

 private:
  std::vector<int32_t> slots_;  // block id or -1
  uint64_t mask_ = 0;
  int64_t size_ = 0;
};

class BlockPool {
 public:
  static constexpr uint64_t kRootKey = 0x6b762d726f6f7421ull;  // parent key of a first block

  // key_bits < 64 keeps only that many bits of each key (tests: forces collisions).
  BlockPool(const Layout& layout, bool prefix_cache, int32_t commit_slack, int32_t key_bits = 64);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const Layout& layout() const { return lay_; }
  uint8_t* base() const { return base_; }
  uint64_t reserved_bytes() const;
  uint8_t* k_rows(int32_t block, int64_t layer, int32_t row) const;
  uint8_t* v_rows(int32_t block, int64_t layer, int32_t row) const;
  int32_t* tokens(int32_t block) { return &tokens_[static_cast<size_t>(block) * lay_.block_size]; }
  const int32_t* tokens(int32_t block) const {
    return &tokens_[static_cast<size_t>(block) * lay_.block_size];
  }
  const BlockMeta& meta(int32_t block) const { return meta_[static_cast<size_t>(block)]; }

  // ---- allocation ----
  int64_t available() const { return n_free() + n_cached_; }  // what acquire() can hand out
  // Where acquire() found a block; give_back() returns it there (rollback).
  enum class Source : uint8_t { FreeList, Uncommitted, Evicted };
  // ref 1, Used; from the free list, then uncommitted, then by LRU eviction.
  int32_t acquire(Source* source = nullptr);
  // Undoes acquire() of a block still held once and unkeyed: back on the free list, or
  // decommitted again (an evicted block's key and rows are gone: it becomes free).
  // Blocks given back in the reverse order of acquiring restore the lists exactly.
  void give_back(int32_t block, Source source);
  void ref(int32_t block);             // one more holder (a Cached block leaves the LRU list)
  void unref(int32_t block);           // one holder fewer; at 0: Cached if keyed, else Free
  bool writable(int32_t block) const;  // one holder and no key: may be written in place
  // A block with one holder that the prefix cache also indexes: drops its key, so that holder
  // may write it in place (the cached prefix through it is lost; blocks keyed below it become
  // unreachable, as after an eviction). Other blocks are left alone. True when now writable.
  bool release_key(int32_t block);

  // ---- rows ----
  // Rows [0, n_rows) of every layer's K and V, and their tokens, from src to dst.
  void copy_rows(int32_t dst, int32_t src, int32_t n_rows);
  // n_rows rows of every layer's K and V (and tokens) from (src, src_row) to (dst, dst_row);
  // the ranges may overlap (memmove).
  void move_rows(int32_t dst, int32_t dst_row, int32_t src, int32_t src_row, int32_t n_rows);

  // ---- prefix cache ----
  static uint64_t hash_block(uint64_t parent_key, const int32_t* tokens, int32_t n);
  uint64_t key_of(uint64_t parent_key, const int32_t* tokens) const {
    return hash_block(parent_key, tokens, lay_.block_size) & key_mask_;
  }
  // Keys a full Used block whose previous B tokens live in `parent` (keyed; -1: first block).
  // False when the key is already taken (the same rows elsewhere, or a hash collision).
  bool add_key(int32_t block, int32_t parent);
  // The cached or used block holding `tokens` after `parent` (-1: at the start), or -1.
  // Verifies the tokens and the parent's identity, so a hash collision never matches.
  int32_t find(int32_t parent, const int32_t* tokens) const;
  void drop_cached();  // every Cached block loses its key and becomes Free

  // ---- counts ----
  int64_t n_usable() const { return lay_.n_blocks - 1; }
  int64_t n_used() const { return n_used_; }
  int64_t n_cached() const { return n_cached_; }
  int64_t n_free() const { return static_cast<int64_t>(free_.size() + uncommitted_.size()); }
  int64_t n_free_committed() const { return static_cast<int64_t>(free_.size()); }
  int64_t n_committed() const { return n_committed_; }  // usable blocks only
  int64_t n_keyed() const { return index_.size(); }
  uint64_t evictions() const { return evictions_; }

  // MINFER_ASSERTs every invariant; refs[b] is the number of holders the caller knows of.
  void check(std::span<const int32_t> refs) const;

 private:
  void commit(int32_t block);
  void release_free(int32_t block);
  void unkey(int32_t block);
  void lru_push_back(int32_t block);
  void lru_remove(int32_t block);
  void push_uncommitted(int32_t block);
  int32_t pop_uncommitted();

  Layout lay_;
  bool prefix_cache_ = true;
  uint64_t key_mask_ = ~uint64_t{0};
  int32_t slack_ = 2;
  uint8_t* base_ = nullptr;
  std::vector<BlockMeta> meta_;
  std::vector<int32_t> tokens_;       // n_blocks * B token ids
  std::vector<int32_t> free_;         // committed free blocks, LIFO
  std::vector<int32_t> uncommitted_;  // min-heap: the lowest block is committed first
  int32_t lru_head_ = -1;             // least recently used
  int32_t lru_tail_ = -1;
  KeyIndex index_;
  int64_t n_used_ = 0;
  int64_t n_cached_ = 0;
  int64_t n_committed_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace minfer::kv::detail
