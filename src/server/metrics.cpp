#include "server/metrics.h"

#include <fmt/format.h>

namespace minfer::server {

namespace {

void put(std::string& out, const char* name, const char* type, const char* help, double v) {
  out += fmt::format("# HELP minfer:{} {}\n# TYPE minfer:{} {}\nminfer:{} {}\n", name, help, name,
                     type, name, v);
}

}  // namespace

std::string Metrics::render(const Gauges& g) const {
  std::string o;
  const double pt = double(prompt_tokens.load()), gt = double(generated_tokens.load());
  const double pus = double(prompt_us.load()), gus = double(generate_us.load());
  put(o, "prompt_tokens_total", "counter", "Prompt tokens evaluated.", pt);
  put(o, "prompt_tokens_cached_total", "counter", "Prompt tokens reused from the KV cache.",
      double(cached_tokens.load()));
  put(o, "tokens_predicted_total", "counter", "Generated tokens.", gt);
  put(o, "prompt_seconds_total", "counter", "Time in steps carrying prefill.", pus / 1e6);
  put(o, "tokens_predicted_seconds_total", "counter", "Time in steps carrying decode.", gus / 1e6);
  put(o, "prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
      pus > 0 ? pt / (pus / 1e6) : 0.0);
  put(o, "predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
      gus > 0 ? gt / (gus / 1e6) : 0.0);
  put(o, "requests_total", "counter", "Generation requests accepted.", double(requests.load()));
  put(o, "requests_finished_total", "counter", "Requests finished.", double(requests_done.load()));
  put(o, "requests_cancelled_total", "counter", "Requests cancelled (client gone).",
      double(requests_cancelled.load()));
  put(o, "requests_failed_total", "counter", "Requests ended by an engine error.",
      double(requests_failed.load()));
  put(o, "requests_rejected_total", "counter", "Requests refused with 503 (queue full).",
      double(requests_rejected.load()));
  put(o, "http_errors_total", "counter", "HTTP answers with status >= 400.",
      double(http_errors.load()));
  put(o, "decode_steps_total", "counter", "Decode steps (batches).", double(decode_steps.load()));
  put(o, "requests_deferred", "gauge", "Requests waiting in the queue.", double(g.queue_length));
  put(o, "requests_processing", "gauge", "Busy slots.", double(g.slots_busy));
  put(o, "slots_total", "gauge", "Slots (-np).", double(g.slots_total));
  put(o, "kv_blocks_total", "gauge", "KV blocks in the pool.", double(g.kv.blocks_total));
  put(o, "kv_blocks_used", "gauge", "KV blocks held by sequences.", double(g.kv.blocks_used));
  put(o, "kv_blocks_cached", "gauge", "KV blocks kept by the prefix cache.",
      double(g.kv.blocks_cached));
  put(o, "kv_blocks_free", "gauge", "KV blocks free.", double(g.kv.blocks_free));
  put(o, "kv_committed_bytes", "gauge", "KV bytes committed.", double(g.kv.committed_bytes));
  put(o, "kv_reserved_bytes", "gauge", "KV bytes reserved.", double(g.kv.reserved_bytes));
  put(o, "kv_tokens", "gauge", "Tokens held in the KV cache.", double(g.kv.tokens_held));
  put(o, "prefix_cache_hits_total", "counter", "KV blocks reused by the prefix cache.",
      double(g.kv.prefix_hits));
  put(o, "prefix_cache_lookups_total", "counter", "KV blocks looked up in the prefix cache.",
      double(g.kv.prefix_lookups));
  return o;
}

}  // namespace minfer::server
