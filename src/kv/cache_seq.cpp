// kv::Cache: sequence operations (llama.cpp's memory API), prefix reuse, invariants, dumps.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "common/error.h"
#include "kv/cache.h"
#include "kv/cache_impl.h"

namespace minfer::kv {

void Cache::Impl::check_seq(int32_t seq, const char* what) const {
  if (seq < 0 || seq >= p.n_seq_max) {
    fail(ErrorKind::InvalidArgument, "kv cache: {}: seq id {} is outside [0, {}) (n_seq_max)", what,
         seq, p.n_seq_max);
  }
}

void Cache::Impl::assert_idle(const char* what) const {
  if (pending) {
    assert_fail(
        "!pending", __FILE__, __LINE__,
        fmt::format("kv: {} while a placement is pending (apply or roll it back first)", what));
  }
}

// A table's capacity is reserved whole the first time it gets a block (at most
// max_blocks_per_seq() ids, a few KiB): after that, growing it never allocates, so a decode
// step allocates nothing once the Placement's vectors have seen a batch of its size.
void Cache::Impl::reserve_table(Seq& q) const {
  const size_t cap = static_cast<size_t>(blocks_for(p.n_ctx_seq));
  if (q.table.capacity() < cap) q.table.reserve(cap);
}

void Cache::Impl::truncate(int32_t seq, int64_t n) {
  Seq& q = seqs[static_cast<size_t>(seq)];
  if (n >= q.len) return;
  const size_t keep = static_cast<size_t>(blocks_for(n));
  // Back to front: a released keyed tail is evicted before its parents (the parents are what
  // a new request shares most often).
  for (size_t j = q.table.size(); j-- > keep;) pool.unref(q.table[j]);
  q.table.resize(keep);
  q.len = n;
  if (n == 0) q.keyable = true;
}

// Keys, in the prefix cache, every block of seq that is full now and holds a position >= from.
// When the same rows are already keyed (the same tokens after the same parent block: a prompt
// recomputed because reuse_prefix stopped short of it, or two requests prefilled at once), the
// sequence takes that block instead and lets its own go, so the chain goes on and later blocks
// can be keyed too. Stops at the first block that cannot be keyed (its parent has no key, or a
// hash collision with other rows): a child's key names its parent block.
void Cache::Impl::key_full_blocks(int32_t seq, int64_t from) {
  Seq& q = seqs[static_cast<size_t>(seq)];
  if (!p.prefix_cache || !q.keyable) return;
  const int64_t B = block_size();
  for (int64_t j = from / B; (j + 1) * B <= q.len; ++j) {
    int32_t& b = q.table[static_cast<size_t>(j)];
    if (pool.meta(b).keyed) continue;
    const int32_t parent = j == 0 ? -1 : q.table[static_cast<size_t>(j - 1)];
    if (parent >= 0 && !pool.meta(parent).keyed) return;
    if (pool.add_key(b, parent)) continue;
    const int32_t same = pool.find(parent, pool.tokens(b));
    if (same < 0) return;
    pool.ref(same);
    pool.unref(b);
    b = same;
    ++dedup_blocks;
  }
}

std::span<const int32_t> Cache::table(int32_t seq) const {
  impl_->check_seq(seq, "table");
  return impl_->seqs[static_cast<size_t>(seq)].table;
}

int64_t Cache::seq_len(int32_t seq) const {
  impl_->check_seq(seq, "seq_len");
  return impl_->seqs[static_cast<size_t>(seq)].len;
}

int32_t Cache::slot(int32_t seq, int64_t pos) const {
  const Impl& m = *impl_;
  m.check_seq(seq, "slot");
  const Impl::Seq& q = m.seqs[static_cast<size_t>(seq)];
  if (pos < 0 || pos >= q.len) {
    fail(ErrorKind::InvalidArgument, "kv cache: slot: seq {} holds positions [0, {}), not {}", seq,
         q.len, pos);
  }
  const int32_t B = m.block_size();
  return q.table[static_cast<size_t>(pos / B)] * B + static_cast<int32_t>(pos % B);
}

void Cache::seq_rm(int32_t seq, int64_t p0, int64_t p1) {
  Impl& m = *impl_;
  m.assert_idle("seq_rm");
  m.check_seq(seq, "seq_rm");
  const int64_t len = m.seqs[static_cast<size_t>(seq)].len;
  p0 = std::max<int64_t>(p0, 0);
  if (p1 < 0 || p1 > len) p1 = len;
  if (p0 >= p1) return;  // nothing held there
  if (p1 < len) {
    fail(ErrorKind::InvalidArgument,
         "kv cache: seq_rm({}, {}, {}) would leave a hole: seq {} holds positions [0, {}) and "
         "positions stay contiguous, so only a tail (p1 < 0 or p1 >= the length) or the whole "
         "sequence can be removed; use seq_shift to drop a middle range and move the rest down",
         seq, p0, p1, seq, len);
  }
  // A kept partial block that is shared or keyed stays as it is: the next write copies it.
  m.truncate(seq, p0);
}

void Cache::seq_cp(int32_t src, int32_t dst) {
  Impl& m = *impl_;
  m.assert_idle("seq_cp");
  m.check_seq(src, "seq_cp source");
  m.check_seq(dst, "seq_cp destination");
  if (src == dst) return;
  m.truncate(dst, 0);
  const Impl::Seq& s = m.seqs[static_cast<size_t>(src)];
  Impl::Seq& d = m.seqs[static_cast<size_t>(dst)];
  for (int32_t b : s.table) m.pool.ref(b);
  m.reserve_table(d);
  d.table = s.table;
  d.len = s.len;
  d.keyable = s.keyable;
}

void Cache::seq_keep(int32_t seq) {
  Impl& m = *impl_;
  m.assert_idle("seq_keep");
  m.check_seq(seq, "seq_keep");
  for (int32_t s = 0; s < m.p.n_seq_max; ++s) {
    if (s != seq) m.truncate(s, 0);
  }
}

void Cache::clear() {
  Impl& m = *impl_;
  m.assert_idle("clear");
  for (int32_t s = 0; s < m.p.n_seq_max; ++s) m.truncate(s, 0);
  m.pool.drop_cached();
}

// Positions [n_keep, len) are rewritten from block j0 = n_keep / B on; blocks before j0 are
// untouched (they may stay shared and keyed).
// Destination blocks of a shift (scratch[k] for table index j0 + k): the old block when this
// sequence alone holds it unkeyed, else a fresh one. Returns the fresh blocks taken; on a
// refused commit gives them back and rethrows.
int64_t Cache::Impl::shift_destinations(const Seq& q, size_t j0, size_t nb_new) {
  scratch.clear();
  scratch_sources.clear();
  try {
    for (size_t j = j0; j < nb_new; ++j) {
      if (pool.writable(q.table[j])) {
        scratch.push_back(q.table[j]);
        continue;
      }
      detail::BlockPool::Source from{};
      scratch.push_back(pool.acquire(&from));
      scratch_sources.push_back(from);
    }
  } catch (...) {
    for (size_t k = scratch.size(), f = scratch_sources.size(); k-- > 0;) {
      if (scratch[k] != q.table[j0 + k]) pool.give_back(scratch[k], scratch_sources[--f]);
    }
    throw;
  }
  return static_cast<int64_t>(scratch_sources.size());
}

// Moves positions [n_keep + n_discard, len) down to [n_keep, n_new) into the destination
// blocks, in increasing position order: a row is read for a lower position than its own, so
// an in-place write never lands on a row still to be read. The kept rows of the first
// destination block are copied when it is a fresh one.
void Cache::Impl::shift_rows(const Seq& q, int64_t n_keep, int64_t n_discard, size_t j0) {
  const int32_t B = block_size();
  const std::vector<int32_t>& src = q.table;
  if (n_keep % B != 0 && scratch[0] != src[j0]) {
    pool.copy_rows(scratch[0], src[j0], static_cast<int32_t>(n_keep % B));
  }
  const int64_t n_new = q.len - n_discard;
  for (int64_t pos = n_keep; pos < n_new;) {
    const int64_t from = pos + n_discard;
    const int64_t run = std::min({B - pos % B, B - from % B, n_new - pos});
    pool.move_rows(scratch[static_cast<size_t>(pos / B) - j0], static_cast<int32_t>(pos % B),
                   src[static_cast<size_t>(from / B)], static_cast<int32_t>(from % B),
                   static_cast<int32_t>(run));
    pos += run;
  }
}

void Cache::seq_shift(int32_t seq, int64_t n_keep, int64_t n_discard, const RerotateFn& rerotate) {
  Impl& m = *impl_;
  m.assert_idle("seq_shift");
  m.check_seq(seq, "seq_shift");
  Impl::Seq& q = m.seqs[static_cast<size_t>(seq)];
  if (n_keep < 0 || n_discard < 0 || n_keep + n_discard > q.len) {
    fail(ErrorKind::InvalidArgument,
         "kv cache: seq_shift({}, n_keep {}, n_discard {}): seq {} holds {} tokens; need 0 <= "
         "n_keep, 0 <= n_discard and n_keep + n_discard <= the length",
         seq, n_keep, n_discard, seq, q.len);
  }
  if (n_discard == 0) return;
  const int64_t n_new = q.len - n_discard;
  if (n_new == n_keep) {  // nothing after the dropped range: a plain truncation
    m.truncate(seq, n_keep);
    return;
  }
  const int32_t B = m.block_size();
  const size_t j0 = static_cast<size_t>(n_keep / B);
  const size_t nb_new = static_cast<size_t>(m.blocks_for(n_new));
  // Blocks another sequence holds must be copied. Blocks only this sequence and the prefix
  // cache hold are copied too while there is room (the cached prefix survives); without room
  // they lose their key and are rewritten in place, the latest first (an early block is the
  // likeliest to be some other prompt's prefix), so a full pool can still shift.
  int64_t shared = 0;
  int64_t keyed_only = 0;
  for (size_t j = j0; j < nb_new; ++j) {
    const int32_t b = q.table[j];
    if (m.pool.writable(b)) continue;
    ++(m.pool.meta(b).ref == 1 ? keyed_only : shared);
  }
  if (shared > m.pool.available()) {
    fail(ErrorKind::OutOfMemory,
         "kv cache: seq_shift({}): needs {} fresh blocks for rows shared with other sequences, "
         "but {} are free or evictable of {}; raise -c",
         seq, shared, m.pool.available(), m.pool.n_usable());
  }
  int64_t unkey = shared + keyed_only - m.pool.available();
  for (size_t j = nb_new; unkey > 0 && j-- > j0;) {
    const int32_t b = q.table[j];
    if (!m.pool.writable(b) && m.pool.meta(b).ref == 1 && m.pool.release_key(b)) --unkey;
  }
  m.cow_copies += static_cast<uint64_t>(m.shift_destinations(q, j0, nb_new));
  m.shift_rows(q, n_keep, n_discard, j0);
  for (size_t j = q.table.size(); j-- > j0;) {
    if (j >= nb_new || m.scratch[j - j0] != q.table[j]) m.pool.unref(q.table[j]);
  }
  q.table.resize(j0);
  q.table.insert(q.table.end(), m.scratch.begin(), m.scratch.end());
  q.len = n_new;
  q.keyable = false;
  if (!rerotate) return;
  for (size_t j = j0; j < nb_new; ++j) {  // the moved rows of each rewritten block
    const int64_t first = std::max<int64_t>(n_keep, static_cast<int64_t>(j) * B);
    const int64_t last = std::min<int64_t>(n_new, static_cast<int64_t>(j + 1) * B);
    for (int32_t l = 0; l < m.p.n_layer; ++l) {
      rerotate(l, m.pool.k_rows(q.table[j], l, static_cast<int32_t>(first % B)), last - first,
               static_cast<int32_t>(-n_discard));
    }
  }
}

int64_t Cache::reuse_prefix(int32_t seq, std::span<const int32_t> tokens, int64_t max_tokens) {
  Impl& m = *impl_;
  m.assert_idle("reuse_prefix");
  m.check_seq(seq, "reuse_prefix");
  Impl::Seq& q = m.seqs[static_cast<size_t>(seq)];
  if (q.len != 0) {
    fail(ErrorKind::InvalidArgument,
         "kv cache: reuse_prefix: seq {} holds {} tokens; it must be empty (seq_rm it first)", seq,
         q.len);
  }
  if (!m.p.prefix_cache) return 0;
  const int64_t B = m.block_size();
  int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), m.p.n_ctx_seq);
  n = std::min<int64_t>(n, std::max<int64_t>(max_tokens, 0));
  const int64_t n_blocks = n / B;
  if (n_blocks > 0) m.reserve_table(q);
  m.prefix_lookups += static_cast<uint64_t>(n_blocks);
  int32_t parent = -1;
  for (int64_t j = 0; j < n_blocks; ++j) {
    const int32_t b = m.pool.find(parent, tokens.data() + j * B);
    if (b < 0) break;
    m.pool.ref(b);
    q.table.push_back(b);
    ++m.prefix_hits;
    parent = b;
  }
  q.len = static_cast<int64_t>(q.table.size()) * B;
  q.keyable = true;
  return q.len;
}

int64_t Cache::cached_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const {
  const Impl& m = *impl_;
  if (!m.p.prefix_cache) return 0;
  const int64_t B = m.block_size();
  int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), m.p.n_ctx_seq);
  n = std::min<int64_t>(n, std::max<int64_t>(max_tokens, 0));
  int32_t parent = -1;
  int64_t j = 0;
  for (; j < n / B; ++j) {  // the walk reuse_prefix makes, without attaching
    const int32_t b = m.pool.find(parent, tokens.data() + j * B);
    if (b < 0) break;
    parent = b;
  }
  return j * B;
}

void Cache::check_invariants() const {
  const Impl& m = *impl_;
  const detail::Layout& lay = m.pool.layout();
  std::vector<int32_t> refs(static_cast<size_t>(lay.n_blocks), 0);
  std::vector<int32_t> seen(static_cast<size_t>(lay.n_blocks), -1);  // last seq naming it
  for (int32_t s = 0; s < m.p.n_seq_max; ++s) {
    const Impl::Seq& q = m.seqs[static_cast<size_t>(s)];
    MINFER_ASSERT(q.len >= 0 && q.len <= m.p.n_ctx_seq, "kv: sequence length out of range");
    MINFER_ASSERT(static_cast<int64_t>(q.table.size()) == m.blocks_for(q.len),
                  "kv: table size != ceil(len / B)");
    for (int32_t b : q.table) {
      MINFER_ASSERT(b >= 1 && b < lay.n_blocks, "kv: table names the null or no block");
      MINFER_ASSERT(seen[static_cast<size_t>(b)] != s, "kv: a table names a block twice");
      seen[static_cast<size_t>(b)] = s;
      ++refs[static_cast<size_t>(b)];
    }
    if (!q.keyable) continue;
    // A keyable sequence's keyed blocks form an unbroken chain from its first block.
    bool chain = true;
    for (size_t j = 0; j < q.table.size(); ++j) {
      const detail::BlockMeta& bm = m.pool.meta(q.table[j]);
      if (!bm.keyed) {
        chain = false;
        continue;
      }
      MINFER_ASSERT(chain, "kv: a keyed block after an unkeyed one");
      MINFER_ASSERT(bm.parent == (j == 0 ? -1 : q.table[j - 1]), "kv: keyed block's parent");
      MINFER_ASSERT(j == 0 || bm.parent_gen == m.pool.meta(q.table[j - 1]).gen);
    }
  }
  MINFER_ASSERT(m.pending || (m.pending_blocks.empty() && m.pending_seqs.empty()));
  for (int32_t b : m.pending_blocks) ++refs[static_cast<size_t>(b)];
  for (int32_t bi : m.batch_index) MINFER_ASSERT(bi == -1, "kv: batch index left set");
  m.pool.check(refs);
}

std::string Cache::to_string() const {
  const Impl& m = *impl_;
  const CacheStats s = stats();
  std::string out = fmt::format(
      "kv::Cache B {} | blocks {}: used {}, cached {}, free {} ({} committed) | committed {} "
      "blocks + null = {} bytes of {} reserved | tokens {} | prefix hits {}/{} | cow {} | "
      "evictions {}{}\n",
      m.block_size(), s.n_blocks, s.blocks_used, s.blocks_cached, s.blocks_free,
      s.blocks_free_committed, s.blocks_committed, s.committed_bytes, s.reserved_bytes,
      s.tokens_held, s.prefix_hits, s.prefix_lookups, s.cow_copies, s.evictions,
      m.pending ? " | placement pending" : "");
  for (int32_t seq = 0; seq < m.p.n_seq_max; ++seq) {
    const Impl::Seq& q = m.seqs[static_cast<size_t>(seq)];
    if (q.len == 0) continue;
    out += fmt::format("seq {} len {}{}:", seq, q.len, q.keyable ? "" : " (shifted)");
    for (int32_t b : q.table) {
      const detail::BlockMeta& bm = m.pool.meta(b);
      out += fmt::format(" {}{}{}", b, bm.ref > 1 ? "*" : "", bm.keyed ? "k" : "");
    }
    out += '\n';
  }
  return out;
}

}  // namespace minfer::kv
