// kv::Cache: construction, batches (place / apply / rollback) and stats. Sequence operations,
// prefix reuse, invariants and dumps are in cache_seq.cpp; the blocks in block_pool.cpp.
#include "kv/cache.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "kv/cache_impl.h"
#include "kv/cache_type.h"

namespace minfer::kv {

namespace {

void check_type(const char* which, GgmlType t, int64_t n_kv_embd) {
  if (!kv_cache_type_supported(t)) {
    fail(ErrorKind::InvalidArgument, "kv cache: {} type {} not supported (use f32, f16 or q8_0)",
         which, type_name(t));
  }
  const int64_t qb = type_traits(t).block_size;
  if (n_kv_embd % qb != 0) {
    fail(ErrorKind::InvalidArgument,
         "kv cache: {} type {}: the K/V row of {} values is not a multiple of its block of {}",
         which, type_name(t), n_kv_embd, qb);
  }
}

// Validates the params (Error(InvalidArgument) naming the field) and derives the geometry.
detail::Layout make_layout(CacheParams& p) {
  if (p.n_layer <= 0 || p.n_kv_embd <= 0) {
    fail(ErrorKind::InvalidArgument, "kv cache: n_layer {} and n_kv_embd {} must be positive",
         p.n_layer, p.n_kv_embd);
  }
  if (p.block_size <= 0 || p.n_seq_max <= 0 || p.n_ctx <= 0) {
    fail(ErrorKind::InvalidArgument,
         "kv cache: block_size {} (--kv-block), n_seq_max {} and n_ctx {} (-c) must be positive",
         p.block_size, p.n_seq_max, p.n_ctx);
  }
  if (p.n_ctx_seq == 0) p.n_ctx_seq = p.n_ctx;
  if (p.n_ctx_seq < 0 || p.n_ctx_seq > p.n_ctx) {
    fail(ErrorKind::InvalidArgument,
         "kv cache: n_ctx_seq {} must be in [1, n_ctx {}] (one sequence cannot hold more than "
         "the pool)",
         p.n_ctx_seq, p.n_ctx);
  }
  if (p.prefix_key_bits < 1 || p.prefix_key_bits > 64) {
    fail(ErrorKind::InvalidArgument, "kv cache: prefix_key_bits {} must be in [1, 64]",
         p.prefix_key_bits);
  }
  check_type("K", p.type_k, p.n_kv_embd);
  check_type("V", p.type_v, p.n_kv_embd);
  detail::Layout l;
  l.block_size = p.block_size;
  l.n_layer = p.n_layer;
  const int64_t n_blocks = (p.n_ctx + p.block_size - 1) / p.block_size + 1;
  // Slots are int32 (Placement::slots, graph inputs).
  if (n_blocks * static_cast<int64_t>(p.block_size) > std::numeric_limits<int32_t>::max()) {
    fail(ErrorKind::InvalidArgument, "kv cache: n_ctx {} (-c) is too large: slots must fit int32",
         p.n_ctx);
  }
  l.n_blocks = static_cast<int32_t>(n_blocks);
  l.k_row = row_size(p.type_k, p.n_kv_embd);
  l.v_row = row_size(p.type_v, p.n_kv_embd);
  l.layer_stride = static_cast<size_t>(p.block_size) * (l.k_row + l.v_row);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t raw = static_cast<size_t>(p.n_layer) * l.layer_stride;
  l.block_stride = (raw + page - 1) / page * page;
  return l;
}

}  // namespace

uint64_t cache_reserved_bytes(const CacheParams& p) {
  CacheParams q = p;
  const detail::Layout l = make_layout(q);
  return static_cast<uint64_t>(l.n_blocks) * l.block_stride;
}

Cache::Impl::Impl(const CacheParams& params, const detail::Layout& layout)
    : p(params), pool(layout, params.prefix_cache, params.commit_slack, params.prefix_key_bits) {
  seqs.resize(static_cast<size_t>(p.n_seq_max));
  batch_index.assign(static_cast<size_t>(p.n_seq_max), -1);
  pending_seqs.reserve(static_cast<size_t>(p.n_seq_max));
}

Cache::Cache(const CacheParams& p) {
  CacheParams q = p;
  const detail::Layout layout = make_layout(q);  // also fills q.n_ctx_seq
  impl_ = std::make_unique<Impl>(q, layout);
}

Cache::~Cache() = default;
Cache::Cache(Cache&&) noexcept = default;
Cache& Cache::operator=(Cache&&) noexcept = default;

const CacheParams& Cache::params() const {
  return impl_->p;
}

LayerView Cache::layer(int32_t l) const {
  const Impl& m = *impl_;
  MINFER_ASSERT(l >= 0 && l < m.p.n_layer, "kv: layer out of range");
  const detail::Layout& lay = m.pool.layout();
  LayerView v;
  v.k = m.pool.k_rows(0, l, 0);
  v.v = m.pool.v_rows(0, l, 0);
  v.block_stride = lay.block_stride;
  v.k_row = lay.k_row;
  v.v_row = lay.v_row;
  v.block_size = lay.block_size;
  v.type_k = m.p.type_k;
  v.type_v = m.p.type_v;
  return v;
}

int64_t Cache::max_blocks_per_seq() const {
  return impl_->blocks_for(impl_->p.n_ctx_seq);
}

bool Cache::pending() const {
  return impl_->pending;
}

// ---- batches ----

Placement Cache::place(std::span<const int32_t> token, std::span<const int32_t> pos,
                       std::span<const int32_t> seq) {
  Placement pl;
  place(token, pos, seq, pl);
  return pl;
}

// Pass 1 of place(): groups the batch by sequence and checks every position rule. Throws
// before anything outside `m.pending_seqs` / `m.batch_index` changed (the caller resets those).
void Cache::Impl::group_batch(std::span<const int32_t> pos, std::span<const int32_t> seq) {
  Impl& m = *this;
  for (size_t i = 0; i < seq.size(); ++i) {
    const int32_t s = seq[i];
    if (s < 0 || s >= m.p.n_seq_max) {
      fail(ErrorKind::InvalidArgument,
           "kv cache: batch token {}: seq id {} is outside [0, {}) (n_seq_max)", i, s,
           m.p.n_seq_max);
    }
    const int64_t p = pos[i];
    int32_t& bi = m.batch_index[static_cast<size_t>(s)];
    if (bi < 0) {
      const int64_t len = m.seqs[static_cast<size_t>(s)].len;
      if (p < 0 || p > len) {
        fail(ErrorKind::InvalidArgument,
             "kv cache: batch token {}: seq {} position {} is not its next position {} (a "
             "position may repeat or go below the length, truncating there, but not skip)",
             i, s, p, len);
      }
      bi = static_cast<int32_t>(m.pending_seqs.size());
      PendingSeq ps;
      ps.seq = s;
      ps.start = p;
      ps.end = p + 1;
      m.pending_seqs.push_back(ps);
    } else {
      PendingSeq& ps = m.pending_seqs[static_cast<size_t>(bi)];
      if (p != ps.end) {
        fail(ErrorKind::InvalidArgument,
             "kv cache: batch token {}: seq {} position {} should be {} (a sequence's tokens in "
             "a batch must have contiguous, increasing positions)",
             i, s, p, ps.end);
      }
      ++ps.end;
    }
  }
  for (const auto& ps : m.pending_seqs) {
    if (ps.end > m.p.n_ctx_seq) {
      fail(ErrorKind::InvalidArgument,
           "kv cache: seq {} would hold {} tokens, past the {} one sequence may hold (n_ctx_seq: "
           "raise -c or run fewer parallel sequences)",
           ps.seq, ps.end, m.p.n_ctx_seq);
    }
  }
}

// The block pending sequence i appends into (its partial last block), or -1.
int32_t Cache::Impl::append_block(size_t i) const {
  const PendingSeq& ps = pending_seqs[i];
  const Seq& q = seqs[static_cast<size_t>(ps.seq)];
  if (ps.start % block_size() == 0 || ps.start != q.len) return -1;
  return q.table[static_cast<size_t>(ps.start / block_size())];
}

// True when pending sequence i may write in place into the block it appends to although the
// block is shared: every holder appends to it in this batch at the same row, and i is the last
// of them. The others copy rows [0, row) at place(); i writes rows >= row, which no holder
// shows yet, so a rollback loses nothing. This is what makes a fork whose two sides decode in
// one batch cost one copy, not two.
bool Cache::Impl::last_of_all_holders(size_t i) const {
  const int32_t b = append_block(i);
  if (b < 0 || pool.meta(b).keyed) return false;
  const int64_t row = pending_seqs[i].start % block_size();
  int32_t holders = 0;
  for (size_t j = 0; j < pending_seqs.size(); ++j) {
    if (append_block(j) != b || pending_seqs[j].start % block_size() != row) continue;
    if (j > i) return false;
    ++holders;
  }
  return holders == pool.meta(b).ref;
}

// Pass 2: which blocks each sequence rewrites and how many fresh blocks the batch needs.
int64_t Cache::Impl::plan_blocks() {
  Impl& m = *this;
  const int32_t B = m.block_size();
  int64_t need = 0;
  for (size_t i = 0; i < m.pending_seqs.size(); ++i) {
    PendingSeq& ps = m.pending_seqs[i];
    const auto& q = m.seqs[static_cast<size_t>(ps.seq)];
    const int32_t idx = static_cast<int32_t>(ps.start / B);
    const bool partial = ps.start % B != 0;
    // Appending into the sequence's own unshared, unkeyed last block writes in place (as does
    // the last of several holders all appending to it, see last_of_all_holders); any other
    // partial block is copied first (shared or keyed: copy-on-write; truncated: the old rows
    // stay intact until apply() so rollback() can restore them).
    const int32_t app = m.append_block(i);
    const bool in_place = app >= 0 && (m.pool.writable(app) || m.last_of_all_holders(i));
    ps.cow_src = partial && !in_place ? q.table[static_cast<size_t>(idx)] : -1;
    ps.first_changed = idx + (in_place ? 1 : 0);
    need += m.blocks_for(ps.end) - ps.first_changed;
  }
  return need;
}

void Cache::Impl::fail_out_of_blocks(int64_t need) const {
  const Impl& m = *this;
  fail(ErrorKind::OutOfMemory,
       "kv cache: out of blocks: the batch needs {} more blocks of {} tokens but {} are free or "
       "evictable ({} used by sequences, {} cached, of {} blocks in all); raise the context size "
       "with -c or run fewer sequences",
       need, m.block_size(), m.pool.available(), m.pool.n_used(), m.pool.n_cached(),
       m.pool.n_usable());
}

// Pass 4: copies, the tables after apply(), slots and token ids. Cannot fail.
void Cache::Impl::fill_placement(std::span<const int32_t> token, std::span<const int32_t> pos,
                                 std::span<const int32_t> seq, Placement& out) {
  Impl& m = *this;
  const int32_t B = m.block_size();
  // Room for every table at its longest, so a reused Placement never reallocates once it has
  // seen a batch of as many sequences (the engine's block-table input is that size anyway).
  const size_t room = m.pending_seqs.size() * static_cast<size_t>(m.blocks_for(m.p.n_ctx_seq));
  if (out.tables.capacity() < room) out.tables.reserve(room);
  for (auto& ps : m.pending_seqs) {
    const auto& q = m.seqs[static_cast<size_t>(ps.seq)];
    out.seq_ids.push_back(ps.seq);
    out.seq_lens.push_back(ps.end);
    out.table_offset.push_back(static_cast<int32_t>(out.tables.size()));
    out.tables.insert(out.tables.end(), q.table.begin(), q.table.begin() + ps.first_changed);
    out.tables.insert(out.tables.end(), m.pending_blocks.begin() + ps.new_begin,
                      m.pending_blocks.begin() + ps.new_end);
    if (ps.cow_src >= 0) {
      m.pool.copy_rows(m.pending_blocks[static_cast<size_t>(ps.new_begin)], ps.cow_src,
                       static_cast<int32_t>(ps.start % B));
      ++m.pending_cow;
    }
  }
  out.table_offset.push_back(static_cast<int32_t>(out.tables.size()));
  out.slots.resize(token.size());
  for (size_t i = 0; i < token.size(); ++i) {
    const int32_t bi = m.batch_index[static_cast<size_t>(seq[i])];
    const int32_t blk =
        out.tables[static_cast<size_t>(out.table_offset[static_cast<size_t>(bi)] + pos[i] / B)];
    out.slots[i] = blk * B + pos[i] % B;
    // The block is the placement's own (fresh) or this sequence's private last block past its
    // length: nobody else sees the token yet.
    m.pool.tokens(blk)[pos[i] % B] = token[i];
  }
}

void Cache::place(std::span<const int32_t> token, std::span<const int32_t> pos,
                  std::span<const int32_t> seq, Placement& out) {
  Impl& m = *impl_;
  MINFER_ASSERT(!m.pending, "kv: place() while another placement is pending");
  if (pos.size() != token.size() || seq.size() != token.size()) {
    fail(ErrorKind::InvalidArgument,
         "kv cache: batch arrays differ in length: {} tokens, {} positions, {} seq ids",
         token.size(), pos.size(), seq.size());
  }
  out.slots.clear();
  out.seq_ids.clear();
  out.seq_lens.clear();
  out.table_offset.clear();
  out.tables.clear();
  out.undo.clear();
  m.pending_seqs.clear();
  m.pending_blocks.clear();
  m.pending_sources.clear();
  m.pending_cow = 0;
  auto reset_index = [&m] {
    for (const auto& ps : m.pending_seqs) m.batch_index[static_cast<size_t>(ps.seq)] = -1;
  };
  try {
    m.group_batch(pos, seq);
    const int64_t need = m.plan_blocks();
    if (need > m.pool.available()) m.fail_out_of_blocks(need);
    for (auto& ps : m.pending_seqs) {
      ps.new_begin = static_cast<int32_t>(m.pending_blocks.size());
      const int64_t n_new = m.blocks_for(ps.end) - ps.first_changed;
      for (int64_t k = 0; k < n_new; ++k) {
        detail::BlockPool::Source from{};
        m.pending_blocks.push_back(m.pool.acquire(&from));
        m.pending_sources.push_back(from);
      }
      ps.new_end = static_cast<int32_t>(m.pending_blocks.size());
    }
  } catch (...) {
    // Only a commit refused by the OS can throw once blocks are taken: give them back.
    m.give_back_pending();
    reset_index();
    m.pending_seqs.clear();
    throw;
  }
  m.fill_placement(token, pos, seq, out);
  reset_index();
  m.pending = true;
  out.undo.push_back(static_cast<int64_t>(++m.serial));
}

void Cache::apply(Placement& pl) {
  Impl& m = *impl_;
  MINFER_ASSERT(m.pending && !pl.undo.empty() && pl.undo[0] == static_cast<int64_t>(m.serial),
                "kv: apply() of a placement that is not the pending one");
  for (const auto& ps : m.pending_seqs) {
    auto& q = m.seqs[static_cast<size_t>(ps.seq)];
    // Back to front, so a released keyed tail enters the LRU list before its parents and is
    // evicted first.
    for (size_t j = q.table.size(); j-- > static_cast<size_t>(ps.first_changed);) {
      m.pool.unref(q.table[j]);
    }
    q.table.resize(static_cast<size_t>(ps.first_changed));
    m.reserve_table(q);
    q.table.insert(q.table.end(), m.pending_blocks.begin() + ps.new_begin,
                   m.pending_blocks.begin() + ps.new_end);
    q.len = ps.end;
    m.key_full_blocks(ps.seq, ps.start);
  }
  m.cow_copies += m.pending_cow;
  m.pending_cow = 0;
  m.pending_seqs.clear();
  m.pending_blocks.clear();
  m.pending_sources.clear();
  m.pending = false;
  pl.undo.clear();
}

// Back in the reverse order of acquire(): the free list and the uncommitted blocks end up as
// they were before place() (evicted blocks excepted: they come back free).
void Cache::Impl::give_back_pending() {
  for (size_t k = pending_blocks.size(); k-- > 0;) {
    pool.give_back(pending_blocks[k], pending_sources[k]);
  }
  pending_blocks.clear();
  pending_sources.clear();
}

void Cache::rollback(Placement& pl) {
  Impl& m = *impl_;
  MINFER_ASSERT(m.pending && !pl.undo.empty() && pl.undo[0] == static_cast<int64_t>(m.serial),
                "kv: rollback() of a placement that is not the pending one");
  m.give_back_pending();
  m.pending_cow = 0;
  m.pending_seqs.clear();
  m.pending = false;
  pl.undo.clear();
}

CacheStats Cache::stats() const {
  const Impl& m = *impl_;
  CacheStats s;
  s.n_blocks = m.pool.n_usable();
  s.blocks_used = m.pool.n_used();
  s.blocks_cached = m.pool.n_cached();
  s.blocks_free = m.pool.n_free();
  s.blocks_committed = m.pool.n_committed();
  s.blocks_free_committed = m.pool.n_free_committed();
  s.reserved_bytes = m.pool.reserved_bytes();
  s.block_bytes = m.pool.layout().block_stride;
  s.committed_bytes = static_cast<uint64_t>(s.blocks_committed + 1) * s.block_bytes;
  for (const auto& q : m.seqs) s.tokens_held += q.len;
  s.prefix_hits = m.prefix_hits;
  s.prefix_lookups = m.prefix_lookups;
  s.cow_copies = m.cow_copies;
  s.evictions = m.pool.evictions();
  s.dedup_blocks = m.dedup_blocks;
  return s;
}

}  // namespace minfer::kv
