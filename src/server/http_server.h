// HttpServer: `minfer serve`'s HTTP front (cpp-httplib) over the Scheduler.
//
// Life cycle: bind() (port 0: any free port) and start() listen at once, answering /health with
// 503 "Loading model" until set_model() hands over the loaded engine and tokenizer; shutdown()
// stops taking work (503), lets in-flight requests end cleanly (their streams get a final chunk
// and [DONE]) within the grace period, then closes the listener.
//
// Routes (docs/SERVER.md): GET /health /v1/models /models /props /slots /metrics;
// POST /v1/completions /v1/chat/completions /completion /tokenize /detokenize /apply-template,
// /v1/embeddings /embeddings /embedding (501 without --embeddings).
// Errors are {"error": {"code", "message", "type"}}: 400 bad body, 401 key, 404 route, 405
// method, 413 body too large, 503 loading / busy (Retry-After) / shutting down.
//
// Ownership: owns the httplib server, its threads, the Scheduler and the Metrics; borrows the
// engine and tokenizer given to set_model (they must outlive the HttpServer). Thread safety:
// set_model and shutdown may be called from any thread (once each); handlers run on
// --threads-http threads. Failure: bind() throws Error(Io) naming host and port; handlers never
// throw out (an exception in one is a 500 answer). Cost: a thread per HTTP worker plus the
// decode loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/engine.h"
#include "model/pooling.h"
#include "server/metrics.h"
#include "server/params.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

struct ServedModel {
  SeqEngine* engine = nullptr;
  const tok::Tokenizer* tokenizer = nullptr;
  std::string id;    // the model id clients name (--alias, else the file name)
  std::string path;  // the GGUF file
  int64_t n_ctx_train = 0;
  int64_t n_params = 0;
  uint64_t size_bytes = 0;
  std::string chat_template;  // --chat-template NAME or a template's text; empty: the GGUF's
  // --pooling resolved against the file (model/pooling.h resolve_pooling); embeddings only.
  Pooling pooling = Pooling::None;
  int64_t n_embd = 0;
};

class HttpServer {
 public:
  explicit HttpServer(const ServerParams& p);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int bind();    // returns the bound port
  void start();  // listens on a background thread
  void set_model(const ServedModel& m);
  void shutdown();
  bool running() const;
  Metrics& metrics();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::server
