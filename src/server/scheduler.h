// Scheduler: the slots, the request queue and the one decode-loop thread that owns the
// SeqEngine (continuous batching).
//
// Each step of the loop:
//   1. frees the slots whose request was cancelled (client gone) or, after shutdown's grace
//      period, interrupted;
//   2. admits queued requests into idle slots, choosing the idle slot whose cached tokens share
//      the longest prefix with the prompt (then least recently used); that prefix is kept
//      (cache_prompt) when it is at least a KV block, else the sequence starts afresh and the
//      engine's prefix cache (reuse_prefix) may attach whole blocks other slots left behind;
//   3. builds ONE Batch: every generating slot's pending token, then chunks of prompts being
//      prefilled (at most -b tokens in all, and at most -ub prompt tokens while any slot is
//      generating, so running streams keep a steady pace);
//   4. decodes it; if that throws (e.g. out of KV blocks), idle slots' cached sequences are
//      dropped and the batch retried, then each slot's part is decoded alone and only the
//      slots whose part fails are ended with an error;
//   5. samples every slot that got a logits row and posts its event to its Task (a request's
//      final event after the step's /slots snapshot, so its client then sees the slot idle).
// Embedding tasks (submit_embeddings) prefill like prompts, flagging only the rows their
// pooling reads, with the engine switched to hidden states for that step (a step carries
// embedding tasks or generation, never both); once a prompt is evaluated its rows are pooled
// and normalized into the final event and its sequence is dropped.
//
// Ownership: borrows the SeqEngine, Tokenizer and Metrics (they must outlive it); owns slots,
// queue and thread. Thread safety: submit(), snapshot() and shutdown() may be called from any
// thread (one mutex guards the queue and the snapshot); only the loop touches the engine.
// Failure: submit() throws ApiError 400 (exceed_context_size_error) for a prompt that cannot
// fit one sequence, 503 when the queue is full or the server is shutting down. Engine errors
// end the affected requests, never the loop. Cost: per step, O(batch tokens) bookkeeping plus
// O(n_vocab) per sampled token; the engine's decode dominates.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "model/engine.h"
#include "server/metrics.h"
#include "server/params.h"
#include "server/slot.h"
#include "server/task.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

struct SlotInfo {
  int32_t id = 0;
  bool busy = false;
  const char* state = "idle";
  uint64_t task_id = 0;
  int64_t n_cache = 0;  // tokens the sequence holds
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
};

struct SchedulerSnapshot {
  std::vector<SlotInfo> slots;
  int64_t queue_length = 0;
  KvReport kv;
  uint64_t steps = 0;
};

class Scheduler {
 public:
  Scheduler(SeqEngine& engine, const tok::Tokenizer& tk, const SchedulerParams& p, Metrics& m);
  ~Scheduler();  // shutdown(0) if still running
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void start();
  // Stops accepting (submit answers 503, queued requests end with 503), lets in-flight
  // requests run up to `grace_ms`, then ends them cleanly and joins the loop. Idempotent.
  void shutdown(int64_t grace_ms);

  std::shared_ptr<Task> submit(std::vector<int32_t> prompt, const GenParams& gen);
  // The inputs of one embeddings request, each its own task (its own slot and sequence, freed
  // when its vector is posted), queued together. Throws as submit (400 exceed_context_size_error
  // for an input longer than a slot's context, naming its index, length and the limit; 503
  // when the queue cannot take them all).
  std::vector<std::shared_ptr<Task>> submit_embeddings(std::vector<std::vector<int32_t>> inputs,
                                                       const EmbedSpec& spec);
  SchedulerSnapshot snapshot() const;

  int32_t n_slots() const { return static_cast<int32_t>(slots_.size()); }
  int64_t n_ctx_seq() const { return n_ctx_seq_; }
  int64_t n_ctx() const { return n_ctx_; }  // the KV pool (-c), all slots together

 private:
  std::vector<std::shared_ptr<Task>> enqueue(std::vector<std::vector<int32_t>> prompts,
                                             const GenParams& gen,
                                             const std::optional<EmbedSpec>& spec);
  void loop();
  void step();
  void drop_cancelled();
  void admit();
  void assign(Slot& s, std::shared_ptr<Task> task);
  int64_t build_batch();
  void decode_and_sample();
  bool try_decode(const Batch& b, std::span<const float>& out, std::string& err, bool& oom);
  void decode_fallback(const std::string& err);
  void sample_rows(std::span<const float> logits, const std::vector<Slot*>& who);
  // Embedding slots whose whole prompt is evaluated: pool, post, free the sequence.
  void finish_embeddings();
  // Whether this step decodes embedding tasks (a step never mixes hidden states and logits;
  // when both kinds have work they alternate step by step).
  bool step_wants_embd() const;
  // Non-final events go to the task at once; final ones wait for the next publish().
  void post(const std::shared_ptr<Task>& task, TaskEvent ev);
  void forget(Slot& s);
  void fail_all(const std::string& what);  // ends every busy slot with a 500  // drops the slot's
                                           // sequence from the engine (its blocks go back)
  void publish();

  SeqEngine& eng_;
  const tok::Tokenizer& tk_;
  const SchedulerParams p_;
  Metrics& metrics_;
  const int64_t n_ctx_seq_, n_ctx_;
  const int32_t n_vocab_;
  const uint32_t default_seed_;
  const int64_t block_size_;  // KV block: prefix-cache granularity
  bool embd_mode_ = false;    // what the engine outputs now (SeqEngine::set_embeddings)
  bool step_embd_ = false;    // this (after build_batch: the last) step: embedding tasks only

  GrammarVocab grammar_vocab_;                // built at the first constrained request
  std::vector<std::unique_ptr<Slot>> slots_;  // loop thread only
  Batch batch_;
  uint64_t step_no_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool accepting_ = true;
  bool stop_ = false;
  Clock::time_point stop_deadline_;
  uint64_t next_id_ = 1;
  SchedulerSnapshot snap_;
  std::vector<std::pair<std::shared_ptr<Task>, TaskEvent>> finals_;  // loop thread only
  std::thread thread_;
};

}  // namespace minfer::server
