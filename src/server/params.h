// ServerParams: everything `minfer serve` configures, as plain values (flags map onto them;
// docs/SERVER.md lists the flag of each).
// Ownership: a value. Thread safety: read-only once the server starts. Failure: validate()
// throws Error(InvalidArgument) naming the flag. Cost: none.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/reasoning.h"

namespace minfer::server {

struct SchedulerParams {
  int32_t n_batch = 2048;            // -b: most tokens one decode step carries
  int32_t n_ubatch = 512;            // -ub: prefill tokens per step while streams are generating
  int64_t n_predict = -1;            // -n: server-wide cap on generated tokens (-1: none)
  int32_t max_queue = 64;            // --queue-size: requests waiting beyond the slots; then 503
  bool context_shift = false;        // --context-shift: drop old tokens instead of ending at n_ctx
  uint32_t seed = 0xFFFFFFFFu;       // -s: default seed of requests that give none (random)
  int64_t shutdown_grace_ms = 5000;  // SIGTERM: in-flight requests may finish within this
};

struct ServerParams {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (printed)
  std::string api_key;  // empty: no key required
  std::string alias;    // model id in /v1/models (default: the file name)
  std::string model_path;
  bool metrics = false;              // GET /metrics
  bool slots = true;                 // GET /slots
  int threads_http = 0;              // 0: n_parallel + 4
  int timeout_s = 600;               // read/write timeout of HTTP connections
  size_t max_body_bytes = 8u << 20;  // bodies past this: 413
  // --reasoning-format: how chat answers' thinking is returned (a request's field overrides).
  ReasoningFormat reasoning_format = ReasoningFormat::Auto;
  // --chat-template-kwargs: extra template variables, an object (or null); a request's
  // chat_template_kwargs override them key by key.
  nlohmann::ordered_json chat_template_kwargs;
  // --embeddings: serve /v1/embeddings, /embeddings and /embedding (without it they answer
  // 501, as llama-server); completions are still served, never in the same decode step.
  bool embeddings = false;
  int embd_normalize = 2;  // default of requests' embd_normalize (euclidean)
  SchedulerParams sched;
  void validate() const;
};

}  // namespace minfer::server
