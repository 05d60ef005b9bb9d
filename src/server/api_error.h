// ApiError: an HTTP error in OpenAI's shape, {"error": {"code", "message", "type", ...}}.
//
// Request parsing, validation and the scheduler throw it; the routes turn it into a response
// with its status code. `extra` holds endpoint-specific fields merged into the error object
// (exceed_context_size_error's n_prompt_tokens and n_ctx).
// Ownership: a value. Thread safety: none needed. Failure: none. Cost: a few strings.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace minfer::server {

// Ordered: a request's objects keep the client's key order, which a chat template's
// `tools | tojson` prints as it is (Python's dicts, and llama-server, keep it too).
using json = nlohmann::ordered_json;

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, json extra = json::object())
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        extra_(std::move(extra)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const json& extra() const { return extra_; }

  // {"error": {"code": status, "message": ..., "type": ..., extra...}}
  json to_json() const {
    json e = {{"code", status_}, {"message", what()}, {"type", type_}};
    for (auto it = extra_.begin(); it != extra_.end(); ++it) e[it.key()] = it.value();
    return json{{"error", e}};
  }

 private:
  int status_;
  std::string type_;
  json extra_;
};

// The common ones (llama-server's type names).
inline ApiError bad_request(const std::string& msg) {
  return ApiError(400, "invalid_request_error", msg);
}
inline ApiError unavailable(const std::string& msg) {
  return ApiError(503, "unavailable_error", msg);
}
inline ApiError server_error(const std::string& msg) {
  return ApiError(500, "server_error", msg);
}

}  // namespace minfer::server
