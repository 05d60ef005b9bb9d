// Metrics: the server's counters, rendered as Prometheus text for GET /metrics.
//
// Counters are atomics bumped by the decode loop (tokens, timings) and the HTTP threads
// (requests, errors); gauges (queue, busy slots, KV blocks) are read from the scheduler's
// last snapshot at render time.
// Ownership: plain counters. Thread safety: every member is atomic; render() may race with
// updates (each value is read once, the set is not a consistent cut). Failure: none.
// Cost: a relaxed atomic add per update.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "model/engine.h"

namespace minfer::server {

struct Metrics {
  std::atomic<uint64_t> prompt_tokens{0};  // prompt tokens evaluated (excluding reused)
  std::atomic<uint64_t> cached_tokens{0};  // prompt tokens reused from the cache
  std::atomic<uint64_t> generated_tokens{0};
  std::atomic<uint64_t> prompt_us{0};    // time spent in steps carrying prefill
  std::atomic<uint64_t> generate_us{0};  // time spent in steps carrying decode tokens
  std::atomic<uint64_t> requests{0};     // generation requests accepted
  std::atomic<uint64_t> requests_done{0};
  std::atomic<uint64_t> requests_cancelled{0};
  std::atomic<uint64_t> requests_failed{0};    // ended by an engine error
  std::atomic<uint64_t> requests_rejected{0};  // 503: queue full
  std::atomic<uint64_t> http_errors{0};        // 4xx/5xx answers
  std::atomic<uint64_t> decode_steps{0};

  struct Gauges {
    int64_t queue_length = 0;
    int64_t slots_busy = 0;
    int64_t slots_total = 0;
    KvReport kv;
  };
  std::string render(const Gauges& g) const;
};

}  // namespace minfer::server
