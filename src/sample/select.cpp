#include "sample/select.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/error.h"

namespace minfer {
namespace {

constexpr int64_t kBlock = 64;

// The plain chain's order (sampler.cpp's by_logit_desc): better logit, then the lower id.
bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Maximum of x[0, kBlock), NaN ignored (-inf when every value is NaN or -inf). Only compared
// against a bound to decide whether the block needs a closer look.
inline float block_max(const float* x) {
#if defined(__SSE2__)
  // _mm_max_ps(a, b) is a > b ? a : b, so a NaN in x leaves the accumulator as it was.
  __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  for (int64_t i = 0; i < kBlock; i += 16) {
    m0 = _mm_max_ps(_mm_loadu_ps(x + i), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), m1);
    m2 = _mm_max_ps(_mm_loadu_ps(x + i + 8), m2);
    m3 = _mm_max_ps(_mm_loadu_ps(x + i + 12), m3);
  }
  m0 = _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3));
  m0 = _mm_max_ps(m0, _mm_shuffle_ps(m0, m0, _MM_SHUFFLE(1, 0, 3, 2)));
  m0 = _mm_max_ps(m0, _mm_shuffle_ps(m0, m0, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtss_f32(m0);
#else
  float m = -INFINITY;
  for (int64_t i = 0; i < kBlock; ++i) m = x[i] > m ? x[i] : m;
  return m;
#endif
}

}  // namespace

int32_t argmax_fast(std::span<const float> logits) {
  MINFER_ASSERT(!logits.empty());
  const float* x = logits.data();
  const auto n = static_cast<int64_t>(logits.size());
  if (std::isnan(x[0])) return 0;  // nothing compares greater than it in the plain loop
  // The first block whose maximum strictly beats every earlier value holds the first
  // occurrence of the row's maximum; the tail after the last whole block is scanned plainly.
  float best = x[0];
  int64_t block = 0;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const float m = block_max(x + i);
    if (m > best) {
      best = m;
      block = i;
    }
  }
  int64_t idx = block;
  const int64_t block_end = std::min(block + kBlock, n);
  while (idx < block_end && !(x[idx] == best)) ++idx;
  MINFER_ASSERT(idx < block_end, "argmax: the maximum's block does not hold it");
  for (int64_t j = i; j < n; ++j) {
    if (x[j] > best) {
      best = x[j];
      idx = j;
    }
  }
  return static_cast<int32_t>(idx);
}

void select_top_k(std::span<const float> logits, int32_t k, std::span<const Candidate> overrides,
                  std::vector<Candidate>& out) {
  MINFER_ASSERT(!logits.empty() && k >= 1);
  const float* x = logits.data();
  const auto n = static_cast<int64_t>(logits.size());
  const auto kk = static_cast<size_t>(std::min<int64_t>(k, n));
  out.clear();
  // A heap whose front is the worst kept candidate (std's max-heap under `better`).
  size_t oi = 0;  // overrides cursor: ids are asked for in increasing order
  auto overridden = [&](int64_t id) {
    while (oi < overrides.size() && overrides[oi].id < id) ++oi;
    return oi < overrides.size() && overrides[oi].id == id;
  };
  int64_t i = 0;
  for (; i < n && out.size() < kk; ++i) {
    if (overridden(i)) continue;
    out.push_back({static_cast<int32_t>(i), x[i], 0.0f});
    std::push_heap(out.begin(), out.end(), better);
  }
  // Full: a later id enters only with a strictly greater logit (an equal one has the higher
  // id, so it ranks below the front). `thr` is the front's logit.
  if (out.size() == kk && i < n) {
    float thr = out.front().logit;
    auto consider = [&](int64_t j) {
      if (!(x[j] > thr) || overridden(j)) return;
      std::pop_heap(out.begin(), out.end(), better);
      out.back() = {static_cast<int32_t>(j), x[j], 0.0f};
      std::push_heap(out.begin(), out.end(), better);
      thr = out.front().logit;
    };
    for (; i + kBlock <= n; i += kBlock) {
      if (!(block_max(x + i) > thr)) continue;
      for (int64_t j = i; j < i + kBlock; ++j) consider(j);
    }
    for (; i < n; ++i) consider(i);
  }
  // The overridden ids, with their own logits, ranked by the full order (ids not in sequence).
  for (const Candidate& c : overrides) {
    MINFER_ASSERT(c.id >= 0 && c.id < n, "select_top_k: override id outside the row");
    const Candidate o{c.id, c.logit, 0.0f};
    if (out.size() < kk) {
      out.push_back(o);
      std::push_heap(out.begin(), out.end(), better);
    } else if (better(o, out.front())) {
      std::pop_heap(out.begin(), out.end(), better);
      out.back() = o;
      std::push_heap(out.begin(), out.end(), better);
    }
  }
  std::sort_heap(out.begin(), out.end(), better);  // best first
}

namespace {

// A key whose ascending unsigned order is the logit's descending order; -0 and +0 (equal as
// floats) get the same key so their ids decide, as in the comparison sort.
inline uint32_t desc_key(float logit) {
  uint32_t b = std::bit_cast<uint32_t>(logit);
  if (b == 0x80000000u) b = 0;
  const uint32_t asc = (b & 0x80000000u) ? ~b : (b ^ 0x80000000u);
  return ~asc;
}

}  // namespace

void sort_by_logit_desc(std::vector<Candidate>& items, std::vector<Candidate>& tmp) {
  constexpr int kBits = 11, kBuckets = 1 << kBits, kPasses = 3;
  std::array<std::array<uint32_t, kBuckets>, kPasses> count{};
  for (const Candidate& c : items) {
    const uint32_t k = desc_key(c.logit);
    for (int p = 0; p < kPasses; ++p) ++count[p][(k >> (p * kBits)) & (kBuckets - 1)];
  }
  tmp.resize(items.size());
  std::vector<Candidate>* src = &items;
  std::vector<Candidate>* dst = &tmp;
  for (int p = 0; p < kPasses; ++p) {
    // A digit every key shares moves nothing: skip the pass.
    if (std::find(count[p].begin(), count[p].end(), uint32_t(items.size())) != count[p].end())
      continue;
    uint32_t sum = 0;
    for (uint32_t& c : count[p]) sum += std::exchange(c, sum);  // bucket starts
    for (const Candidate& c : *src) {
      const uint32_t d = (desc_key(c.logit) >> (p * kBits)) & (kBuckets - 1);
      (*dst)[count[p][d]++] = c;
    }
    std::swap(src, dst);
  }
  if (src != &items) items.swap(tmp);
}

}  // namespace minfer
