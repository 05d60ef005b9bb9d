#include "server/http_server.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/error.h"
#include "server/conn_watch.h"
#include "server/http_impl.h"

namespace minfer::server {

namespace {

// Compares without an early exit, so the time taken does not tell how much of a guess matched.
bool constant_time_equal(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

// Routes and the methods they take (405 for another method, 404 for another path).
struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {
    {"/health", "GET"},
    {"/v1/health", "GET"},
    {"/v1/models", "GET"},
    {"/models", "GET"},
    {"/props", "GET"},
    {"/slots", "GET"},
    {"/metrics", "GET"},
    {"/v1/completions", "POST"},
    {"/completions", "POST"},
    {"/v1/chat/completions", "POST"},
    {"/chat/completions", "POST"},
    {"/completion", "POST"},
    {"/tokenize", "POST"},
    {"/detokenize", "POST"},
    {"/apply-template", "POST"},
};

bool is_public(const std::string& path) {
  return path == "/health" || path == "/v1/health" || path == "/v1/models" || path == "/models";
}

}  // namespace

void ServerParams::validate() const {
  if (port < 0 || port > 65535)
    fail(ErrorKind::InvalidArgument, "--port {} must be in [0, 65535]", port);
  if (threads_http < 0)
    fail(ErrorKind::InvalidArgument, "--threads-http {} must be >= 0", threads_http);
  if (timeout_s <= 0) fail(ErrorKind::InvalidArgument, "--timeout {} must be > 0", timeout_s);
  if (sched.n_batch <= 0) fail(ErrorKind::InvalidArgument, "-b {} must be > 0", sched.n_batch);
  if (sched.n_ubatch <= 0) fail(ErrorKind::InvalidArgument, "-ub {} must be > 0", sched.n_ubatch);
  if (sched.n_predict < -1)
    fail(ErrorKind::InvalidArgument, "-n {} must be >= -1", sched.n_predict);
  if (sched.max_queue < 0)
    fail(ErrorKind::InvalidArgument, "--queue-size {} must be >= 0", sched.max_queue);
}

void HttpServer::Impl::send_json(httplib::Response& res, const json& j, int status) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void HttpServer::Impl::send_error(httplib::Response& res, const ApiError& e) {
  metrics.http_errors++;
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.to_json(), e.status());
}

void HttpServer::Impl::install_handlers() {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!ready.load() && req.path != "/health" && req.path != "/v1/health") {
      send_error(res, unavailable("Loading model"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (p.api_key.empty() || is_public(req.path) || req.method == "OPTIONS")
      return httplib::Server::HandlerResponse::Unhandled;
    std::string key = req.get_header_value("Authorization");
    if (key.rfind("Bearer ", 0) == 0)
      key = key.substr(7);
    else if (req.has_header("X-Api-Key"))
      key = req.get_header_value("X-Api-Key");
    else
      key.clear();
    if (key.empty() || !constant_time_equal(key, p.api_key)) {
      send_error(res, ApiError(401, "authentication_error", "Invalid API Key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
        int status = res.status;
        std::string msg = "";
        if (status == 404) {
          const bool known = std::any_of(std::begin(kRoutes), std::end(kRoutes),
                                         [&](const Route& r) { return req.path == r.path; });
          if (known) {
            status = 405;
            msg = fmt::format("method {} is not allowed on {}", req.method, req.path);
          } else {
            msg = fmt::format("no route {} {}", req.method, req.path);
          }
        } else if (status == 413) {
          msg = fmt::format("the request body exceeds the limit of {} bytes", p.max_body_bytes);
        } else {
          msg = fmt::format("HTTP error {}", status);
        }
        const char* type = status == 404   ? "not_found_error"
                           : status == 405 ? "invalid_request_error"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error";
        send_error(res, ApiError(status, type, msg));
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const ApiError& e) {
          send_error(res, e);
          return;
        } catch (const json::exception& e) {  // a field of the wrong type in a simple route
          send_error(res, bad_request(std::string("bad request body: ") + e.what()));
          return;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, server_error(what));
      });
}

HttpServer::HttpServer(const ServerParams& p) : impl_(std::make_unique<Impl>(p)) {
  p.validate();
  Impl& m = *impl_;
  const size_t threads = size_t(p.threads_http > 0 ? p.threads_http : 16);
  m.svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  m.svr.set_payload_max_length(p.max_body_bytes);
  m.svr.set_read_timeout(p.timeout_s, 0);
  m.svr.set_write_timeout(p.timeout_s, 0);
  m.svr.set_keep_alive_max_count(1000);
  m.defaults.sampling.seed = p.sched.seed;
  m.defaults.n_predict = p.sched.n_predict;
  m.install_handlers();
  m.install_routes();
}

HttpServer::~HttpServer() {
  shutdown();
}

int HttpServer::bind() {
  Impl& m = *impl_;
  if (m.p.port == 0) {
    m.port = m.svr.bind_to_any_port(m.p.host.c_str());
  } else {
    m.port = m.svr.bind_to_port(m.p.host.c_str(), m.p.port) ? m.p.port : -1;
  }
  if (m.port <= 0) fail(ErrorKind::Io, "cannot listen on {}:{}", m.p.host, m.p.port);
  raise_listen_backlog(m.port, 1024);
  return m.port;
}

void HttpServer::start() {
  impl_->listener = std::thread([this] { impl_->svr.listen_after_bind(); });
}

bool HttpServer::running() const {
  return impl_->svr.is_running();
}

Metrics& HttpServer::metrics() {
  return impl_->metrics;
}

void HttpServer::set_model(const ServedModel& model) {
  Impl& m = *impl_;
  MINFER_ASSERT(model.engine && model.tokenizer && !m.ready.load());
  m.model = model;
  m.chat = std::make_unique<ChatFormatter>(model.tokenizer->vocab(), model.chat_template);
  m.sched = std::make_unique<Scheduler>(*model.engine, *model.tokenizer, m.p.sched, m.metrics);
  m.sched->start();
  m.ready.store(true);
}

void HttpServer::shutdown() {
  Impl& m = *impl_;
  if (m.stopping.exchange(true)) return;
  if (m.sched) m.sched->shutdown(m.p.sched.shutdown_grace_ms);
  // The streams received their final events: give their handlers a moment to write them.
  for (int i = 0; i < 200 && m.in_flight.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  m.svr.stop();
  if (m.listener.joinable()) m.listener.join();
}

}  // namespace minfer::server
