// kv::Cache: the paged K/V cache of graph mode. One home for every byte of K and V, every
// sequence's block table, the prefix cache and the commit policy.
//
// Memory. One persistent region per backend (host memory today), reserved as address space
// for n_blocks blocks and committed a block at a time as tokens arrive. The region is
// BLOCK-MAJOR: block b holds, for every layer l, B rows of K then B rows of V:
//   K row of slot s in layer l: base + (s / B) * block_stride + l * layer_stride + (s % B) * k_row
//   V row of slot s in layer l: same + B * k_row
// (k_row = row_size(type_k, n_kv_embd), v_row likewise, layer_stride = B * (k_row + v_row),
// block_stride = n_layer * layer_stride rounded up to the page size). Block-major rather than
// one region per layer because a block is then one page-aligned range: commit and decommit are
// one mprotect/madvise each, even for tiny models whose per-layer block is far below a page.
// A slot is a physical row: slot = block_id * B + offset. Block 0 is reserved (never given to
// a sequence): padded batch rows of a bucketed graph write there.
//
// Sequences. Each seq id in [0, n_seq_max) has a block table; its tokens hold positions
// 0..len-1 and position p lives in slot table[p / B] * B + p % B (positions are contiguous:
// no holes). Blocks may be shared between sequences (refcount): seq_cp forks without copying
// anything, the partial last block included; the first write into a shared (or prefix-cached)
// block copies it first (copy-on-write: one block, every layer, only when written). A block is
// written in place only when exactly one table names it and the prefix cache does not hold it,
// or when every holder appends to it in the same batch at the same row (the last of them
// writes in place, the others copy), so forking a 2,000-token sequence and decoding both sides
// copies one block.
//
// Prefix cache. A FULL block whose previous block is keyed (or that is a sequence's first) is
// keyed at apply() by hash(parent block's key, its B token ids). When the
// last sequence holding a keyed block lets it go, the block stays cached (unreferenced) until
// evicted, least recently used first, when a fresh block is needed. reuse_prefix() attaches
// cached blocks whose key chain matches a new sequence's tokens. Hits are counted. The hash
// only finds candidates: a hit also compares the B token ids and the parent block (its id and
// generation), so a hash collision can never attach the wrong rows. A sequence that was
// shifted (seq_shift) keys nothing more until it is emptied: its rows no longer depend on its
// tokens alone.
//
// Lazy commit. Blocks are committed (made readable/writable, counted in committed_bytes) when
// first handed out; free blocks beyond a small slack are decommitted (madvise DONTNEED) so
// committed memory tracks tokens held. reserved_bytes is the address space. Fresh blocks come
// from the committed free list first (LIFO: hot pages), then the lowest uncommitted block (keeps
// the committed part of the region compact), then the least recently used cached block.
//
// Batches (the Engine's decode): place() finds a slot for every token of a batch without
// touching anything visible, apply() makes it so (after the forward pass wrote the rows, keys
// full blocks in the prefix cache); a failed forward pass calls rollback(). place() is atomic:
// on bad input it throws and the cache is unchanged. Between place() and apply()/rollback()
// table() and seq_len() still show the old state; the forward pass reads the tables the
// batch will leave behind from Placement::table(seq). Exactly one placement may be pending and
// no other mutating call may run meanwhile (MINFER_ASSERT). A position below a sequence's
// length truncates it at apply(), not at place(): until then the old rows stay untouched (the
// rows from the truncation point on are written into fresh blocks, the kept part of the first
// one copied), so rollback() restores everything but prefix-cache blocks place() had to evict
// (their rows may already be overwritten; they come back as free blocks).
//
// Ownership: owns the region and all bookkeeping. Thread safety: none (the engine's decode
// loop is the only user). Failure: Error(InvalidArgument) for a seq id outside [0,
// n_seq_max), a position that is not the sequence's next (skips, or a sequence's tokens out of
// order), a sequence past n_ctx_seq, seq_rm of a middle range (no holes: use seq_shift),
// reuse_prefix on a non-empty sequence, bad CacheParams (the field named); Error(OutOfMemory)
// when no free or evictable block is left (the message names the blocks needed, free, used,
// cached, total and the flag -c) or the OS refuses to commit a block; Error(Io) if the region
// cannot be reserved. Every throwing call leaves the cache unchanged. Internal invariants
// (refcounts, free lists) and misuse (a second place() or a sequence operation while a
// placement is pending) are MINFER_ASSERTs.
// Cost: place O(tokens + the batch's sequences' table lengths) (it writes their tables into
// the Placement), apply O(tokens + blocks touched); seq ops O(blocks of the sequence); a COW
// copy is one block's valid rows of every layer (memcpy), plus an mprotect when a block is
// first committed and a madvise + mprotect when one is decommitted. check_invariants() and
// to_string() are O(blocks + table entries). No heap allocation in steady state (tables and a
// reused Placement keep their capacity).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace minfer::kv {

struct CacheParams {
  int64_t n_layer = 0;
  int64_t n_kv_embd = 0;  // n_head_kv * head_dim
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  int64_t n_ctx = 4096;     // tokens the pool holds in all (blocks = ceil(n_ctx / B) + 1 null)
  int32_t block_size = 16;  // B, tokens per block (--kv-block)
  int32_t n_seq_max = 1;    // seq ids are [0, n_seq_max)
  int64_t n_ctx_seq = 0;    // most tokens one sequence may hold; 0 = n_ctx
  bool prefix_cache = true;
  // Free committed blocks kept for reuse before freeing more decommits them (madvise); a small
  // slack avoids a syscall pair per block when sequences come and go.
  int32_t commit_slack = 2;
  // Bits of each prefix-cache key kept, 1..64. Only tests lower it: with few bits keys collide
  // all the time, which lookups must survive (they verify tokens and the parent block).
  int32_t prefix_key_bits = 64;
};

// Where one layer's rows live (see the file comment for the addressing).
struct LayerView {
  uint8_t* k = nullptr;     // K rows of block 0, this layer
  uint8_t* v = nullptr;     // V rows of block 0, this layer
  size_t block_stride = 0;  // bytes from one block to the next
  size_t k_row = 0;         // bytes per K row (row_size(type_k, n_kv_embd))
  size_t v_row = 0;
  int32_t block_size = 0;
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  uint8_t* k_slot(int64_t slot) const {
    return k + (slot / block_size) * block_stride + (slot % block_size) * k_row;
  }
  uint8_t* v_slot(int64_t slot) const {
    return v + (slot / block_size) * block_stride + (slot % block_size) * v_row;
  }
};

struct CacheStats {
  int64_t n_blocks = 0;               // usable blocks (excluding the null block)
  int64_t blocks_used = 0;            // referenced by at least one sequence
  int64_t blocks_cached = 0;          // unreferenced but kept by the prefix cache
  int64_t blocks_free = 0;            // neither
  int64_t blocks_committed = 0;       // committed (used + cached + committed free slack)
  int64_t blocks_free_committed = 0;  // the slack: free but still committed
  uint64_t reserved_bytes = 0;
  uint64_t committed_bytes = 0;  // (blocks_committed + the null block) * block_bytes
  uint64_t block_bytes = 0;      // block_stride
  int64_t tokens_held = 0;       // sum of sequence lengths
  uint64_t prefix_hits = 0;      // blocks reused by reuse_prefix
  uint64_t prefix_lookups = 0;   // blocks asked for by reuse_prefix
  uint64_t cow_copies = 0;       // blocks copied on write (place, seq_shift)
  uint64_t evictions = 0;        // cached blocks taken back for new rows
  uint64_t dedup_blocks = 0;     // filled blocks apply() swapped for the same keyed rows
};

// Result of place(): per batch token, its slot; per sequence of the batch, the block table it
// will have after apply() (what attention reads during the forward pass); internal undo
// information for rollback(). Plain data; reusing one Placement across steps reuses its
// vectors' capacity.
struct Placement {
  std::vector<int32_t> slots;         // per batch token
  std::vector<int32_t> seq_ids;       // the batch's sequences, in order of first appearance
  std::vector<int64_t> seq_lens;      // per seq_ids[i]: its length after apply()
  std::vector<int32_t> table_offset;  // seq_ids.size() + 1 offsets into tables
  std::vector<int32_t> tables;        // per seq_ids[i]: its block table after apply()
  // Implementation detail (undo log); opaque to callers.
  std::vector<int64_t> undo;

  // The block table seq will have after apply(); empty if seq is not in the batch.
  std::span<const int32_t> table(int32_t seq) const {
    for (size_t i = 0; i < seq_ids.size(); ++i) {
      if (seq_ids[i] == seq) {
        return std::span<const int32_t>(tables).subspan(
            table_offset[i], static_cast<size_t>(table_offset[i + 1] - table_offset[i]));
      }
    }
    return {};
  }
};

// Re-rotates stored K rows by `delta` positions (context shift). Supplied by the engine (the
// rope kernels live in the backend): k points at n_rows rows of LayerView::k_row bytes each.
using RerotateFn = std::function<void(int32_t layer, uint8_t* k, int64_t n_rows, int32_t delta)>;

class Cache {
 public:
  explicit Cache(const CacheParams& p);
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;
  Cache(Cache&&) noexcept;  // the region moves with it; LayerView pointers stay valid
  Cache& operator=(Cache&&) noexcept;

  const CacheParams& params() const;
  LayerView layer(int32_t l) const;
  int64_t max_blocks_per_seq() const;  // ceil(n_ctx_seq / B): a block table's capacity
  // Slots the region addresses, the null block included: (ceil(n_ctx / B) + 1) * B.
  int64_t n_slots() const {
    const CacheParams& p = params();
    return ((p.n_ctx + p.block_size - 1) / p.block_size + 1) * p.block_size;
  }

  // ---- batches ----
  // Slots for tokens (seq[i], pos[i], token[i]). Every pos must be the next position of its
  // sequence (counting the batch's earlier tokens of the same sequence); a pos below the
  // sequence's length first truncates it there (llama.cpp's overwrite). Throws (cache
  // unchanged) on bad input or too few blocks.
  Placement place(std::span<const int32_t> token, std::span<const int32_t> pos,
                  std::span<const int32_t> seq);
  // The same, into `out` (its vectors keep their capacity: no allocation in steady state).
  void place(std::span<const int32_t> token, std::span<const int32_t> pos,
             std::span<const int32_t> seq, Placement& out);
  // The rows are written: commit the new lengths, key full blocks. A block that became full
  // with rows the prefix cache already holds (same tokens, same parent block) is swapped for
  // the cached one, so read tables after apply() anew rather than keeping the Placement's.
  void apply(Placement& pl);
  void rollback(Placement& pl);  // the forward pass failed: as if place() never ran
  bool pending() const;          // a placement awaits apply() or rollback()

  // ---- sequences (llama.cpp's memory API meanings) ----
  std::span<const int32_t> table(int32_t seq) const;  // block ids, ceil(len / B) of them
  int64_t seq_len(int32_t seq) const;                 // = next position
  int32_t slot(int32_t seq, int64_t pos) const;       // pos < seq_len(seq)
  void seq_rm(int32_t seq, int64_t p0, int64_t p1);   // p1 < 0: to the end; only a tail
                                                      // (p1 >= len) or the whole sequence
  void seq_cp(int32_t src, int32_t dst);              // fork: dst becomes a copy of src
  void seq_keep(int32_t seq);                         // drop every other sequence
  // Context shift: drop positions [n_keep, n_keep + n_discard) and move the rest down
  // n_discard positions, re-rotating their K rows by -n_discard (llama.cpp's seq_rm + seq_add).
  // Rows move (positions stay contiguous in the table); a destination block another sequence
  // or the prefix cache holds is replaced by a fresh one first (Error(OutOfMemory), cache
  // unchanged, if none is left). rerotate runs once per layer per rewritten block, on the
  // moved rows, after the bookkeeping is done; it must not throw (if it does, the sequence's
  // K rows are undefined: drop the sequence). An empty rerotate skips the re-rotation.
  void seq_shift(int32_t seq, int64_t n_keep, int64_t n_discard, const RerotateFn& rerotate);
  void clear();  // every sequence empty; cached blocks dropped too

  // ---- prefix cache ----
  // For an EMPTY sequence: attaches the longest run of cached full blocks whose key chain
  // matches tokens' leading whole blocks, never more than max_tokens tokens. Returns the
  // tokens reused (a multiple of B).
  int64_t reuse_prefix(int32_t seq, std::span<const int32_t> tokens, int64_t max_tokens);
  // What reuse_prefix would attach for `tokens` (a multiple of B, at most max_tokens), changing
  // nothing (no counters either): a scheduler compares it with what a slot already holds.
  // Cost: one hash lookup per whole block.
  int64_t cached_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const;

  CacheStats stats() const;
  // Every sequence's table and the pool's counts, one line each (tests, `minfer plan`).
  // Shared blocks are marked '*', prefix-cached (keyed) ones 'k'.
  std::string to_string() const;
  // Checks every internal invariant (refcounts match tables, no block both free and used,
  // committed counts); MINFER_ASSERTs. For tests.
  void check_invariants() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The address space a Cache with these params reserves (CacheStats::reserved_bytes: the KV
// at full use), without reserving it: what the RAM guard weighs before anything is mapped.
// Throws Error(InvalidArgument) for params the Cache constructor would refuse.
uint64_t cache_reserved_bytes(const CacheParams& p);

// RAM guard: the memory this process may use: MemAvailable (/proc/meminfo) and the cgroup
// limit (v2 memory.max minus memory.current, or v1), whichever is lower. 0 if unknown.
uint64_t available_memory_bytes();
// The same from explicit files (tests): meminfo as /proc/meminfo, proc_cgroup as
// /proc/self/cgroup, cgroup_root where the cgroup hierarchy is mounted (/sys/fs/cgroup).
uint64_t available_memory_bytes(const std::string& meminfo, const std::string& proc_cgroup,
                                const std::string& cgroup_root);

struct RamNeed {
  uint64_t weights = 0;  // bytes of weights that will be resident
  uint64_t kv = 0;       // KV at full use (reserved bytes)
  uint64_t compute = 0;  // activations (compute arena) and other buffers
  uint64_t margin = 0;   // head room
};
// Throws Error(OutOfMemory) naming each term in MiB and the available memory when
// need.weights + kv + compute + margin > available (and available is known), unless
// overcommit; the message tells the user about -c, -ctk/-ctv and --kv-overcommit.
void check_ram(const RamNeed& need, uint64_t available, bool overcommit);

}  // namespace minfer::kv
