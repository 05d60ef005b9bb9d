// Dynamic split of [0, n) work units among the threads of one pool job (matmul's panels and
// row tiles, attention's query heads; issue #16).
//
// Why: with a static split (split_range) a decode matmul ends when its slowest thread ends, and
// on a shared memory bus one thread often gets less bandwidth than the other for a while, or
// starts late (wake-up), so the other waits at the end of every matmul (the lead's quiet
// profile: 15% of a Q8_0 step in that wait). Here each thread still starts at the front of its
// own contiguous share, the same share split_range gives, so in the common case it streams one
// contiguous range of memory as before; once its share is used up it takes chunks from the
// *back* of another thread's unclaimed share, so all threads finish within about one chunk of
// each other.
//
// Each share is one 64-bit atomic holding [front, back) of its unclaimed units: the owner
// claims from the front, thieves from the back, each by compare-and-swap of the whole pair, so
// every unit is handed out exactly once, whatever the timing. What a thread computes for a unit
// must not depend on which thread it is (matmul: each output row by one thread, with the same
// kernel and order of summation), then results do not depend on the schedule either.
//
// Claim sizes: a quarter of the share's unclaimed rest (half when stealing), at least one unit,
// at most max_claim units, rounded down to a multiple of `align` units where that leaves at
// least one, and at least min_claim units where that many are left (attention, both: a kv
// head's group of query heads, which share each K/V row load). Large claims early keep the
// per-claim cost (one uncontended CAS, ~10 ns) negligible; small ones near the end bound the final
// imbalance; max_claim bounds what a descheduled thread can hold back.
//
// Ownership: the shares live in caller-provided memory (bytes(nth), 64-byte aligned: matmul
// takes it from the Exec arena), one cache line per thread so owners do not share lines; a
// WorkSplit is a view of them. Thread safety: init() is called by one thread before the job is
// dispatched (the pool's dispatch publishes it); next() may then be called concurrently by
// threads 0..nth-1, each with its own ith, on views of the same memory. Failure: none (internal
// invariants asserted). Cost: one CAS per claim.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "backend/cpu/thread_pool.h"
#include "common/error.h"

namespace minfer::cpu {

class WorkSplit {
 public:
  struct Params {
    int64_t max_claim = INT32_MAX;  // units per claim at most (>= 1)
    int64_t align = 1;              // claims of `align` units or more are multiples of it
    int64_t min_claim = 1;          // units per claim at least, where that many are left
  };

  static size_t bytes(int nth) { return sizeof(Share) * static_cast<size_t>(nth); }

  // Before the job is dispatched, by one thread: builds the shares over `mem` (bytes(nth),
  // 64-byte aligned): thread i owns split_range's share i of [0, n_units). n_units < 2^32.
  static void init(void* mem, int64_t n_units, int nth) {
    MINFER_ASSERT(n_units >= 0 && n_units <= int64_t{UINT32_MAX} && nth >= 1,
                  "WorkSplit: bad unit or thread count");
    auto* shares = static_cast<Share*>(mem);
    for (int i = 0; i < nth; ++i) {
      int64_t b, e;
      split_range(n_units, i, nth, &b, &e);
      new (&shares[i]) Share{};
      shares[i].fb.store(pack(b, e), std::memory_order_relaxed);
    }
  }

  // A view of shares built by init() with the same nth; writes nothing.
  WorkSplit(void* mem, int nth, Params p) : shares_(static_cast<Share*>(mem)), nth_(nth), p_(p) {
    MINFER_ASSERT(
        p.max_claim >= 1 && p.align >= 1 && p.min_claim >= 1 && p.min_claim <= p.max_claim,
        "WorkSplit: bad claim params");
  }

  // Thread ith's next chunk [*b, *e): from its own share's front, else from another share's
  // back (the first, counting from ith + 1, that has units left). false: nothing left anywhere.
  bool next(int ith, int64_t* b, int64_t* e) {
    bool stolen = false;
    bool got = claim(shares_[ith], /*steal=*/false, b, e);
    for (int k = 1; !got && k < nth_; ++k)
      got = stolen = claim(shares_[(ith + k) % nth_], /*steal=*/true, b, e);
    if (got && claim_hook_) claim_hook_(ith, *b, *e, stolen);
    return got;
  }

  // Test seam: called after every claim (thread, chunk, whether it was stolen). A test that
  // sleeps in it for one thread forces the others to steal from that thread's share; one that
  // records the chunks checks the schedule. nullptr (the default): not called. Set it only
  // while no job uses a WorkSplit.
  using ClaimHook = void (*)(int ith, int64_t b, int64_t e, bool stolen);
  static void set_claim_hook(ClaimHook h) { claim_hook_ = h; }

 private:
  struct alignas(64) Share {
    std::atomic<uint64_t> fb{0};  // front in the low 32 bits, back in the high 32
  };
  static uint64_t pack(int64_t f, int64_t b) {
    return static_cast<uint64_t>(f) | (static_cast<uint64_t>(b) << 32);
  }

  int64_t claim_size(int64_t left, bool steal) const {
    int64_t c = steal ? (left + 1) / 2 : (left + 3) / 4;
    if (c > p_.max_claim) c = p_.max_claim;
    if (c >= p_.align) c -= c % p_.align;
    if (c < p_.min_claim) c = p_.min_claim < left ? p_.min_claim : left;
    return c < 1 ? 1 : c;
  }

  bool claim(Share& s, bool steal, int64_t* b, int64_t* e) {
    uint64_t v = s.fb.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t f = static_cast<int64_t>(v & 0xFFFFFFFFu), k = static_cast<int64_t>(v >> 32);
      if (f >= k) return false;
      const int64_t c = claim_size(k - f, steal);
      const uint64_t nv = steal ? pack(f, k - c) : pack(f + c, k);
      // Relaxed: the pair is the only shared state, and every claim is a read-modify-write of
      // it, so claims are totally ordered; the job's end publishes the results.
      if (s.fb.compare_exchange_weak(v, nv, std::memory_order_relaxed)) {
        *b = steal ? k - c : f;
        *e = steal ? k : f + c;
        return true;
      }
    }
  }

  Share* shares_;
  int nth_;
  Params p_;
  static inline ClaimHook claim_hook_ = nullptr;
};

}  // namespace minfer::cpu
