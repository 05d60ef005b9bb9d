// Internals of HttpServer shared by http_server.cpp (life cycle, auth, errors) and the route
// files (routes.cpp, generate.cpp). Not part of the layer's interface.
// Ownership, thread safety, failure and cost: as HttpServer (http_server.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include <httplib.h>

#include "server/chat.h"
#include "server/http_server.h"
#include "server/request.h"
#include "server/scheduler.h"

namespace minfer::server {

struct HttpServer::Impl {
  explicit Impl(const ServerParams& params) : p(params) {}

  ServerParams p;
  httplib::Server svr;
  std::thread listener;
  int port = -1;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};
  ServedModel model;
  std::unique_ptr<ChatFormatter> chat;
  std::unique_ptr<Scheduler> sched;
  Metrics metrics;
  std::atomic<int> in_flight{0};  // generation handlers (and streams) still running
  std::atomic<uint64_t> next_id{1};
  GenParams defaults;  // server-wide request defaults (seed, n_predict cap)

  void install_handlers();         // http_server.cpp: auth, errors
  void install_routes();           // routes.cpp: the three below
  void install_info_routes();      // health, models, props, slots, metrics
  void install_text_routes();      // tokenize, detokenize, apply-template
  void install_generate_routes();  // completions, chat, native completion
  void install_embedding_routes();  // embeddings_route.cpp: /v1/embeddings, /embedding(s)
  void handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint ep);
  void handle_embeddings(const httplib::Request& req, httplib::Response& res, bool oai);

  // Sends `e` as the response (and counts it).
  void send_error(httplib::Response& res, const ApiError& e);
  void send_json(httplib::Response& res, const json& j, int status = 200);
  std::vector<int32_t> prompt_tokens(GenRequest& r) const;
  // A chat request's template variables over the server's (--chat-template-kwargs).
  void apply_chat_defaults(GenRequest& r) const;
};

}  // namespace minfer::server
