#include "kv/block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "common/error.h"

namespace minfer::kv::detail {

// ---- KeyIndex ----

void KeyIndex::init(int32_t n_blocks) {
  size_t cap = 16;
  while (cap < 2 * static_cast<size_t>(n_blocks)) cap *= 2;
  slots_.assign(cap, -1);
  mask_ = cap - 1;
  size_ = 0;
}

int32_t KeyIndex::find(uint64_t key, std::span<const BlockMeta> meta) const {
  for (uint64_t i = key & mask_;; i = (i + 1) & mask_) {
    const int32_t b = slots_[i];
    if (b < 0) return -1;
    if (meta[static_cast<size_t>(b)].key == key) return b;
  }
}

void KeyIndex::insert(int32_t block, std::span<const BlockMeta> meta) {
  MINFER_ASSERT(size_ < static_cast<int64_t>(slots_.size() / 2));
  uint64_t i = meta[static_cast<size_t>(block)].key & mask_;
  while (slots_[i] >= 0) i = (i + 1) & mask_;
  slots_[i] = block;
  ++size_;
}

void KeyIndex::erase(int32_t block, std::span<const BlockMeta> meta) {
  uint64_t i = meta[static_cast<size_t>(block)].key & mask_;
  while (slots_[i] != block) {
    MINFER_ASSERT(slots_[i] >= 0, "kv: erasing a block the key index does not hold");
    i = (i + 1) & mask_;
  }
  // Backward shift: pull later entries of the probe run into the hole when their home slot
  // does not lie cyclically in (hole, j], so every remaining key stays reachable.
  uint64_t hole = i;
  for (uint64_t j = (i + 1) & mask_; slots_[j] >= 0; j = (j + 1) & mask_) {
    const uint64_t home = meta[static_cast<size_t>(slots_[j])].key & mask_;
    const bool stays = (hole <= j) ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole] = -1;
  --size_;
}

// ---- BlockPool ----

BlockPool::BlockPool(const Layout& layout, bool prefix_cache, int32_t commit_slack,
                     int32_t key_bits)
    : lay_(layout),
      prefix_cache_(prefix_cache),
      key_mask_(key_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << key_bits) - 1),
      slack_(std::max<int32_t>(commit_slack, 0)) {
  const uint64_t bytes = reserved_bytes();
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    fail(ErrorKind::Io, "kv cache: cannot reserve {} bytes of address space for {} blocks: {}",
         bytes, lay_.n_blocks, std::strerror(errno));
  }
  base_ = static_cast<uint8_t*>(p);
  meta_.resize(static_cast<size_t>(lay_.n_blocks));
  tokens_.assign(static_cast<size_t>(lay_.n_blocks) * lay_.block_size, 0);
  free_.reserve(static_cast<size_t>(lay_.n_blocks));
  uncommitted_.reserve(static_cast<size_t>(lay_.n_blocks));
  for (int32_t b = lay_.n_blocks - 1; b >= 1; --b) uncommitted_.push_back(b);
  std::make_heap(uncommitted_.begin(), uncommitted_.end(), std::greater<>());
  index_.init(lay_.n_blocks);
  // The null block: committed for good (padded batch rows write there), never handed out.
  if (mprotect(base_, lay_.block_stride, PROT_READ | PROT_WRITE) != 0) {
    const int err = errno;
    munmap(base_, bytes);
    fail(ErrorKind::OutOfMemory, "kv cache: cannot commit the null block: {}", std::strerror(err));
  }
  meta_[0].state = BlockState::Null;
  meta_[0].committed = true;
}

BlockPool::~BlockPool() {
  if (base_ != nullptr) munmap(base_, reserved_bytes());
}

uint64_t BlockPool::reserved_bytes() const {
  return static_cast<uint64_t>(lay_.n_blocks) * lay_.block_stride;
}

uint8_t* BlockPool::k_rows(int32_t block, int64_t layer, int32_t row) const {
  return base_ + static_cast<size_t>(block) * lay_.block_stride +
         static_cast<size_t>(layer) * lay_.layer_stride + static_cast<size_t>(row) * lay_.k_row;
}

uint8_t* BlockPool::v_rows(int32_t block, int64_t layer, int32_t row) const {
  return base_ + static_cast<size_t>(block) * lay_.block_stride +
         static_cast<size_t>(layer) * lay_.layer_stride +
         static_cast<size_t>(lay_.block_size) * lay_.k_row + static_cast<size_t>(row) * lay_.v_row;
}

void BlockPool::push_uncommitted(int32_t block) {
  uncommitted_.push_back(block);
  std::push_heap(uncommitted_.begin(), uncommitted_.end(), std::greater<>());
}

int32_t BlockPool::pop_uncommitted() {
  std::pop_heap(uncommitted_.begin(), uncommitted_.end(), std::greater<>());
  const int32_t b = uncommitted_.back();
  uncommitted_.pop_back();
  return b;
}

void BlockPool::commit(int32_t block) {
  uint8_t* p = base_ + static_cast<size_t>(block) * lay_.block_stride;
  if (mprotect(p, lay_.block_stride, PROT_READ | PROT_WRITE) != 0) {
    fail(ErrorKind::OutOfMemory, "kv cache: the OS refused to commit block {} ({} bytes): {}",
         block, lay_.block_stride, std::strerror(errno));
  }
  meta_[static_cast<size_t>(block)].committed = true;
  ++n_committed_;
}

int32_t BlockPool::acquire(Source* source) {
  int32_t b = -1;
  Source from = Source::FreeList;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!uncommitted_.empty()) {
    commit(uncommitted_.front());  // throws before anything changed
    b = pop_uncommitted();
    from = Source::Uncommitted;
  } else {
    from = Source::Evicted;
    MINFER_ASSERT(lru_head_ >= 0, "kv: acquire() with no free or cached block (caller checks)");
    b = lru_head_;
    lru_remove(b);
    unkey(b);
    --n_cached_;
    ++evictions_;
  }
  BlockMeta& m = meta_[static_cast<size_t>(b)];
  MINFER_ASSERT(m.ref == 0 && m.committed && !m.keyed);
  m.state = BlockState::Used;
  m.ref = 1;
  ++n_used_;
  if (source != nullptr) *source = from;
  return b;
}

void BlockPool::give_back(int32_t block, Source source) {
  BlockMeta& m = meta_[static_cast<size_t>(block)];
  MINFER_ASSERT(m.state == BlockState::Used && m.ref == 1 && !m.keyed, "kv: give_back()");
  m.ref = 0;
  --n_used_;
  if (source == Source::Evicted) {
    release_free(block);
    return;
  }
  m.state = BlockState::Free;
  uint8_t* p = base_ + static_cast<size_t>(block) * lay_.block_stride;
  if (source == Source::Uncommitted && madvise(p, lay_.block_stride, MADV_DONTNEED) == 0 &&
      mprotect(p, lay_.block_stride, PROT_NONE) == 0) {
    m.committed = false;
    --n_committed_;
    push_uncommitted(block);
    return;
  }
  free_.push_back(block);
}

void BlockPool::ref(int32_t block) {
  BlockMeta& m = meta_[static_cast<size_t>(block)];
  if (m.state == BlockState::Cached) {
    lru_remove(block);
    --n_cached_;
    ++n_used_;
    m.state = BlockState::Used;
  }
  MINFER_ASSERT(m.state == BlockState::Used, "kv: ref() of a free or null block");
  ++m.ref;
}

void BlockPool::unref(int32_t block) {
  BlockMeta& m = meta_[static_cast<size_t>(block)];
  MINFER_ASSERT(m.state == BlockState::Used && m.ref > 0, "kv: unref() of an unheld block");
  if (--m.ref > 0) return;
  --n_used_;
  if (m.keyed) {
    m.state = BlockState::Cached;
    lru_push_back(block);
    ++n_cached_;
  } else {
    release_free(block);
  }
}

bool BlockPool::writable(int32_t block) const {
  const BlockMeta& m = meta_[static_cast<size_t>(block)];
  return m.state == BlockState::Used && m.ref == 1 && !m.keyed;
}

bool BlockPool::release_key(int32_t block) {
  const BlockMeta& m = meta_[static_cast<size_t>(block)];
  if (m.state == BlockState::Used && m.ref == 1) unkey(block);
  return writable(block);
}

// Keeps `slack_` free blocks committed (hot, no syscall to reuse); beyond that the pages go
// back to the OS so committed memory follows the tokens held. A failed madvise/mprotect (e.g.
// the process's mapping count limit) only keeps the block committed.
void BlockPool::release_free(int32_t block) {
  BlockMeta& m = meta_[static_cast<size_t>(block)];
  m.state = BlockState::Free;
  if (static_cast<int64_t>(free_.size()) < slack_) {
    free_.push_back(block);
    return;
  }
  uint8_t* p = base_ + static_cast<size_t>(block) * lay_.block_stride;
  if (madvise(p, lay_.block_stride, MADV_DONTNEED) != 0 ||
      mprotect(p, lay_.block_stride, PROT_NONE) != 0) {
    free_.push_back(block);
    return;
  }
  m.committed = false;
  --n_committed_;
  push_uncommitted(block);
}

void BlockPool::copy_rows(int32_t dst, int32_t src, int32_t n_rows) {
  if (n_rows <= 0) return;
  for (int64_t l = 0; l < lay_.n_layer; ++l) {
    std::memcpy(k_rows(dst, l, 0), k_rows(src, l, 0), static_cast<size_t>(n_rows) * lay_.k_row);
    std::memcpy(v_rows(dst, l, 0), v_rows(src, l, 0), static_cast<size_t>(n_rows) * lay_.v_row);
  }
  std::memcpy(tokens(dst), tokens(src), static_cast<size_t>(n_rows) * sizeof(int32_t));
}

void BlockPool::move_rows(int32_t dst, int32_t dst_row, int32_t src, int32_t src_row,
                          int32_t n_rows) {
  if (n_rows <= 0 || (dst == src && dst_row == src_row)) return;
  for (int64_t l = 0; l < lay_.n_layer; ++l) {
    std::memmove(k_rows(dst, l, dst_row), k_rows(src, l, src_row),
                 static_cast<size_t>(n_rows) * lay_.k_row);
    std::memmove(v_rows(dst, l, dst_row), v_rows(src, l, src_row),
                 static_cast<size_t>(n_rows) * lay_.v_row);
  }
  std::memmove(tokens(dst) + dst_row, tokens(src) + src_row,
               static_cast<size_t>(n_rows) * sizeof(int32_t));
}

// ---- prefix cache ----

// xxHash64's round and avalanche over the token ids, two per 64-bit lane, seeded with the
// parent's key: a strong 64-bit mix, so the index rarely probes. Exactness does not rest on
// it (find() compares tokens and the parent's identity).
uint64_t BlockPool::hash_block(uint64_t parent_key, const int32_t* tokens, int32_t n) {
  constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full,
                     P3 = 0x165667B19E3779F9ull, P4 = 0x85EBCA77C2B2AE63ull;
  auto rotl = [](uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  uint64_t h = parent_key * P1 + P4 + static_cast<uint64_t>(n);
  for (int32_t i = 0; i < n; i += 2) {
    const uint64_t lo = static_cast<uint32_t>(tokens[i]);
    const uint64_t hi = i + 1 < n ? static_cast<uint32_t>(tokens[i + 1]) : 0xFFFFFFFFull;
    uint64_t lane = rotl((lo | (hi << 32)) * P2, 31) * P1;
    h = rotl(h ^ lane, 27) * P1 + P4;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

bool BlockPool::add_key(int32_t block, int32_t parent) {
  if (!prefix_cache_) return false;
  BlockMeta& m = meta_[static_cast<size_t>(block)];
  MINFER_ASSERT(m.state == BlockState::Used && !m.keyed);
  const uint64_t pkey = parent < 0 ? kRootKey : meta_[static_cast<size_t>(parent)].key;
  MINFER_ASSERT(parent < 0 || meta_[static_cast<size_t>(parent)].keyed);
  const uint64_t key = key_of(pkey, tokens(block));
  if (index_.find(key, meta_) >= 0) return false;
  m.keyed = true;
  m.key = key;
  m.parent_key = pkey;
  m.parent = parent;
  m.parent_gen = parent < 0 ? 0 : meta_[static_cast<size_t>(parent)].gen;
  index_.insert(block, meta_);
  return true;
}

int32_t BlockPool::find(int32_t parent, const int32_t* toks) const {
  if (!prefix_cache_) return -1;
  const uint64_t pkey = parent < 0 ? kRootKey : meta_[static_cast<size_t>(parent)].key;
  const int32_t c = index_.find(key_of(pkey, toks), meta_);
  if (c < 0) return -1;
  const BlockMeta& m = meta_[static_cast<size_t>(c)];
  if (m.parent != parent) return -1;
  if (parent >= 0 && m.parent_gen != meta_[static_cast<size_t>(parent)].gen) return -1;
  if (std::memcmp(tokens(c), toks, static_cast<size_t>(lay_.block_size) * sizeof(int32_t)) != 0) {
    return -1;
  }
  return c;
}

void BlockPool::unkey(int32_t block) {
  BlockMeta& m = meta_[static_cast<size_t>(block)];
  if (!m.keyed) return;
  index_.erase(block, meta_);
  m.keyed = false;
  ++m.gen;
}

void BlockPool::drop_cached() {
  while (lru_head_ >= 0) {
    const int32_t b = lru_head_;
    lru_remove(b);
    unkey(b);
    --n_cached_;
    release_free(b);
  }
}

void BlockPool::lru_push_back(int32_t block) {
  BlockMeta& m = meta_[static_cast<size_t>(block)];
  m.lru_prev = lru_tail_;
  m.lru_next = -1;
  if (lru_tail_ >= 0) {
    meta_[static_cast<size_t>(lru_tail_)].lru_next = block;
  } else {
    lru_head_ = block;
  }
  lru_tail_ = block;
}

void BlockPool::lru_remove(int32_t block) {
  BlockMeta& m = meta_[static_cast<size_t>(block)];
  if (m.lru_prev >= 0) {
    meta_[static_cast<size_t>(m.lru_prev)].lru_next = m.lru_next;
  } else {
    lru_head_ = m.lru_next;
  }
  if (m.lru_next >= 0) {
    meta_[static_cast<size_t>(m.lru_next)].lru_prev = m.lru_prev;
  } else {
    lru_tail_ = m.lru_prev;
  }
  m.lru_prev = m.lru_next = -1;
}

// ---- invariants ----

void BlockPool::check(std::span<const int32_t> refs) const {
  const size_t n = static_cast<size_t>(lay_.n_blocks);
  MINFER_ASSERT(refs.size() == n);
  std::vector<uint8_t> where(n, 0);  // 1 free list, 2 uncommitted, 3 LRU
  for (int32_t b : free_) {
    MINFER_ASSERT(b > 0 && where[static_cast<size_t>(b)] == 0, "kv: free list entry twice");
    where[static_cast<size_t>(b)] = 1;
  }
  for (int32_t b : uncommitted_) {
    MINFER_ASSERT(b > 0 && where[static_cast<size_t>(b)] == 0, "kv: uncommitted entry twice");
    where[static_cast<size_t>(b)] = 2;
  }
  int64_t lru_len = 0;
  for (int32_t b = lru_head_, prev = -1; b >= 0;
       prev = b, b = meta_[static_cast<size_t>(b)].lru_next) {
    MINFER_ASSERT(b > 0 && where[static_cast<size_t>(b)] == 0, "kv: LRU entry twice");
    MINFER_ASSERT(meta_[static_cast<size_t>(b)].lru_prev == prev, "kv: LRU links broken");
    where[static_cast<size_t>(b)] = 3;
    ++lru_len;
    MINFER_ASSERT(lru_len <= static_cast<int64_t>(n));
  }
  MINFER_ASSERT(lru_len == n_cached_, "kv: LRU length != cached count");
  const BlockMeta& null = meta_[0];
  MINFER_ASSERT(null.state == BlockState::Null && null.ref == 0 && null.committed && !null.keyed &&
                    refs[0] == 0 && where[0] == 0,
                "kv: the null block was handed out");
  int64_t used = 0, cached = 0, committed = 0, keyed = 0;
  for (size_t b = 1; b < n; ++b) {
    const BlockMeta& m = meta_[b];
    MINFER_ASSERT(m.ref == refs[b], "kv: block refcount != holders");
    committed += m.committed ? 1 : 0;
    keyed += m.keyed ? 1 : 0;
    switch (m.state) {
      case BlockState::Used:
        MINFER_ASSERT(m.ref > 0 && m.committed && where[b] == 0);
        ++used;
        break;
      case BlockState::Cached:
        MINFER_ASSERT(m.ref == 0 && m.keyed && m.committed && where[b] == 3);
        ++cached;
        break;
      case BlockState::Free:
        MINFER_ASSERT(m.ref == 0 && !m.keyed, "kv: free block holds a key");
        MINFER_ASSERT(where[b] == (m.committed ? 1 : 2), "kv: free block not on its list");
        break;
      case BlockState::Null:
        MINFER_ASSERT(false, "kv: a second null block");
    }
    if (m.keyed) {
      MINFER_ASSERT(prefix_cache_);
      MINFER_ASSERT(index_.find(m.key, meta_) == static_cast<int32_t>(b), "kv: key not indexed");
      MINFER_ASSERT(key_of(m.parent_key, tokens(static_cast<int32_t>(b))) == m.key,
                    "kv: a keyed block's tokens changed");
    }
  }
  MINFER_ASSERT(used == n_used_ && cached == n_cached_, "kv: state counts drifted");
  MINFER_ASSERT(used + cached + n_free() == n_usable(), "kv: a block is in no state");
  MINFER_ASSERT(committed == n_committed_, "kv: committed count drifted");
  MINFER_ASSERT(keyed == index_.size(), "kv: key index size != keyed blocks");
}

}  // namespace minfer::kv::detail
