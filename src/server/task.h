// Task: one generation request (or one input of an embeddings request) travelling from an HTTP thread to the decode loop and back.
//
// The HTTP thread fills the input (prompt tokens, GenParams), submits it to the Scheduler and
// then reads TaskEvents: one per generated token (text safe to send, see text_stream.h, and
// its logprobs), and a final one (finish reason, usage, timings, or an error). Setting
// `cancelled` (client gone) makes the decode loop free the slot at its next step; the loop then
// posts a final event nobody may read.
//
// Ownership: shared (std::shared_ptr) by the HTTP handler and the scheduler; whoever is last
// frees it. Thread safety: the input is written before submit and read-only after; the event
// channel is a mutex-guarded queue (one producer: the decode loop; one consumer); `cancelled`
// is atomic. Failure: none. Cost: one lock per event.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/pooling.h"
#include "server/api_error.h"
#include "server/request.h"

namespace minfer::server {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // alternatives, most likely first
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV was reused
};

struct Timings {
  double prompt_ms = 0, predicted_ms = 0;
  int64_t prompt_n = 0, predicted_n = 0;
};

struct TaskEvent {
  std::string text;                    // safe to send (complete UTF-8, no possible stop start)
  std::vector<int32_t> tokens;         // tokens generated since the previous event
  std::vector<TokenLogprob> logprobs;  // when requested, one per token
  bool final = false;
  std::string finish_reason;  // final: "stop" | "length"
  std::string stop_type;      // final, native: "eos" | "word" | "limit"
  std::string stopping_word;
  Usage usage;
  Timings timings;
  int32_t slot_id = -1;
  std::optional<ApiError> error;  // final: the request failed
  // final, embedding tasks: the pooled and normalized vector (pooling none: every token's row,
  // n_embd floats each, not normalized, as llama-server).
  std::vector<float> embedding;
};

// An embedding task (serve --embeddings): its prompt is evaluated without generating; the rows
// `pooling` reads are pooled and normalized (model/pooling.h) into the final event.
struct EmbedSpec {
  Pooling pooling = Pooling::Last;
  int normalize = 2;  // embd_normalize (ignored for pooling none)
};

class Task {
 public:
  Task(uint64_t id, std::vector<int32_t> prompt, GenParams gen,
       std::optional<EmbedSpec> embed = std::nullopt)
      : id_(id), prompt_(std::move(prompt)), gen_(std::move(gen)), embed_(embed) {}

  uint64_t id() const { return id_; }
  const std::vector<int32_t>& prompt() const { return prompt_; }
  const GenParams& gen() const { return gen_; }
  const std::optional<EmbedSpec>& embed() const { return embed_; }  // set: an embedding task

  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  void push(TaskEvent ev) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (ev.final) finished_ = true;
      events_.push_back(std::move(ev));
    }
    cv_.notify_all();
  }
  // Moves every queued event into `out` (appending); waits up to `timeout` for the first.
  // Returns false when nothing arrived in time.
  bool wait(std::vector<TaskEvent>& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return false;
    while (!events_.empty()) {
      out.push_back(std::move(events_.front()));
      events_.pop_front();
    }
    return true;
  }
  bool finished() const {
    std::lock_guard<std::mutex> lk(mu_);
    return finished_;
  }

 private:
  const uint64_t id_;
  const std::vector<int32_t> prompt_;
  const GenParams gen_;
  const std::optional<EmbedSpec> embed_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TaskEvent> events_;
  bool finished_ = false;
};

}  // namespace minfer::server
