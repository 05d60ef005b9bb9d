#include "server/scheduler.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "common/error.h"

namespace minfer::server {

namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

uint64_t us_since(Clock::time_point t) {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}

}  // namespace

Scheduler::Scheduler(SeqEngine& engine, const tok::Tokenizer& tk, const SchedulerParams& p,
                     Metrics& m)
    : eng_(engine),
      tk_(tk),
      p_(p),
      metrics_(m),
      n_ctx_seq_(engine.n_ctx_seq()),
      n_ctx_(engine.kv_capacity()),
      n_vocab_(static_cast<int32_t>(engine.n_vocab())),
      default_seed_(p.seed),
      block_size_(std::max<int64_t>(1, engine.kv_report().block_size)),
      grammar_vocab_(tk, n_vocab_) {
  MINFER_ASSERT(engine.n_seq_max() > 0 && p.n_batch > 0 && p.n_ubatch > 0);
  for (int32_t i = 0; i < engine.n_seq_max(); ++i)
    slots_.push_back(std::make_unique<Slot>(i, tk_, n_vocab_, &grammar_vocab_));
  publish();
}

Scheduler::~Scheduler() {
  shutdown(0);
}

void Scheduler::start() {
  MINFER_ASSERT(!thread_.joinable(), "Scheduler::start called twice");
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::shutdown(int64_t grace_ms) {
  std::deque<std::shared_ptr<Task>> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stop_) {
      accepting_ = false;
      stop_ = true;
      stop_deadline_ = Clock::now() + std::chrono::milliseconds(grace_ms);
      dropped.swap(queue_);
    }
  }
  cv_.notify_all();
  for (auto& t : dropped) {
    TaskEvent ev;
    ev.final = true;
    ev.error = unavailable("the server is shutting down");
    t->push(std::move(ev));
  }
  if (thread_.joinable()) thread_.join();
}

std::vector<std::shared_ptr<Task>> Scheduler::submit_embeddings(
    std::vector<std::vector<int32_t>> inputs, const EmbedSpec& spec) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(inputs[i].size());
    if (n == 0) throw bad_request(fmt::format("input {} is empty (no tokens)", i));
    if (n > n_ctx_seq_)  // all of it is evaluated, nothing generated
      throw ApiError(400, "exceed_context_size_error",
                     fmt::format("input {} is {} tokens, longer than the context of a slot ({} "
                                 "tokens)",
                                 i, n, n_ctx_seq_),
                     json{{"n_prompt_tokens", n}, {"n_ctx", n_ctx_seq_}});
  }
  GenParams gen;
  gen.cache_prompt = false;  // every row of the input is needed: nothing is reused
  return enqueue(std::move(inputs), gen, spec);
}

// Under the lock, all or nothing: a request (however many inputs) counts as one against the
// queue, its inputs wait for slots together.
std::vector<std::shared_ptr<Task>> Scheduler::enqueue(std::vector<std::vector<int32_t>> prompts,
                                                      const GenParams& gen,
                                                      const std::optional<EmbedSpec>& spec) {
  std::vector<std::shared_ptr<Task>> tasks;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!accepting_) throw unavailable("the server is shutting down");
    int64_t idle = 0;
    for (const SlotInfo& s : snap_.slots) idle += s.busy ? 0 : 1;
    if (static_cast<int64_t>(queue_.size()) >= p_.max_queue + idle) {
      metrics_.requests_rejected++;
      throw unavailable(
          fmt::format("the server is busy: {} requests are waiting; retry later", queue_.size()));
    }
    for (auto& in : prompts) {
      tasks.push_back(std::make_shared<Task>(next_id_++, std::move(in), gen, spec));
      queue_.push_back(tasks.back());
    }
    metrics_.requests += tasks.size();  // each task ends with its own final event
  }
  cv_.notify_all();
  return tasks;
}

std::shared_ptr<Task> Scheduler::submit(std::vector<int32_t> prompt, const GenParams& gen) {
  if (prompt.empty()) throw bad_request("the prompt is empty");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n >= n_ctx_seq_)  // one more position is needed to generate
    throw ApiError(400, "exceed_context_size_error",
                   fmt::format("the request exceeds the available context size: the prompt is {} "
                               "tokens, a slot holds {} (and one more is needed to generate)",
                               n, n_ctx_seq_),
                   json{{"n_prompt_tokens", n}, {"n_ctx", n_ctx_seq_}});
  std::vector<std::vector<int32_t>> one;
  one.push_back(std::move(prompt));
  return enqueue(std::move(one), gen, std::nullopt).front();
}

SchedulerSnapshot Scheduler::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return snap_;
}

void Scheduler::loop() {
  while (true) {
    const bool any_busy =
        std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->busy(); });
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (stop_ && (!any_busy || Clock::now() >= stop_deadline_)) break;
      if (!any_busy && !stop_)
        cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return stop_ || !queue_.empty(); });
    }
    try {
      step();
    } catch (const std::exception& e) {  // a bug or an engine failure: end the requests, not us
      fail_all(e.what());
    }
  }
  for (auto& s : slots_) {
    if (!s->busy()) continue;
    std::shared_ptr<Task> task = s->task();
    post(task, s->finish_interrupted());
  }
  publish();
}

void Scheduler::step() {
  drop_cancelled();
  admit();
  if (build_batch() > 0) decode_and_sample();
  publish();
}

void Scheduler::drop_cancelled() {
  for (auto& s : slots_) {
    if (s->busy() && s->task()->cancelled()) {
      metrics_.requests_cancelled++;
      TaskEvent ev;
      ev.final = true;
      ev.finish_reason = "cancelled";
      const bool embed = s->task()->embed().has_value();
      s->task()->push(std::move(ev));
      s->release();
      if (embed) forget(*s);  // an embedding input's sequence is never reused
    }
  }
}

void Scheduler::admit() {
  while (true) {
    std::shared_ptr<Task> task;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (queue_.empty() || stop_) return;
      if (queue_.front()->cancelled()) {  // gone before it started
        queue_.pop_front();
        metrics_.requests_cancelled++;
        continue;
      }
      if (std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return !s->busy(); }))
        return;
      task = queue_.front();
      queue_.pop_front();
    }
    // The idle slot sharing the longest prefix with the prompt; ties: least recently used.
    // A slot whose kept conversation the prompt shares less than half of counts as sharing
    // nothing: taking it would throw away more of another conversation than it saves (the
    // shared full blocks come back from the prefix cache on any slot), so an emptier or older
    // slot is better. Without this a request sharing only a template's opening (or the BOS)
    // with a long conversation took that conversation's slot while an empty one was idle.
    Slot* best = nullptr;
    size_t best_common = 0;
    for (auto& s : slots_) {
      if (s->busy()) continue;
      size_t c = task->gen().cache_prompt ? common_prefix(s->cache, task->prompt()) : 0;
      if (2 * c < s->cache.size()) c = 0;
      if (!best || c > best_common || (c == best_common && s->last_used < best->last_used)) {
        best = s.get();
        best_common = c;
      }
    }
    try {
      assign(*best, task);
    } catch (const std::exception& e) {  // the engine refused the slot's sequence ops
      TaskEvent ev;
      ev.final = true;
      ev.error = server_error(std::string("cannot start the request: ") + e.what());
      post(task, std::move(ev));
      if (best->busy()) best->release();
      best->cache.clear();
      try {
        eng_.seq_rm(best->id(), 0, -1);
      } catch (const std::exception&) {
      }
    }
  }
}

void Scheduler::assign(Slot& s, std::shared_ptr<Task> task) {
  const auto& prompt = task->prompt();
  int64_t keep = task->gen().cache_prompt ? int64_t(common_prefix(s.cache, prompt)) : 0;
  keep = std::min<int64_t>(keep, int64_t(prompt.size()) - 1);  // the last token gives logits
  // Less than a block in common with this slot's own tokens (often just BOS) while the prompt
  // has whole blocks: start afresh so the prefix cache can attach blocks other slots left
  // behind (at worst < one block of this slot's tokens is evaluated again).
  if (keep < block_size_ && int64_t(prompt.size()) - 1 >= block_size_) keep = 0;
  // The engine's prefix cache may hold more of the prompt than this slot: blocks of a request
  // of the same conversation still running on another slot, or of one whose slot was taken
  // since. Then start afresh and attach them. Requests of one conversation arriving together
  // (issue #19: a balancer routes a session to one replica) otherwise take slots that share
  // only the template's opening with them and evaluate the whole conversation again.
  if (keep > 0 && task->gen().cache_prompt && int64_t(prompt.size()) - 1 >= keep + block_size_ &&
      eng_.cached_prefix(prompt, int64_t(prompt.size()) - 1) > keep)
    keep = 0;
  if (keep < int64_t(s.cache.size())) {
    eng_.seq_rm(s.id(), keep, -1);
    s.cache.resize(size_t(keep));
  }
  if (keep == 0 && task->gen().cache_prompt) {
    const int64_t got =
        std::clamp<int64_t>(eng_.reuse_prefix(s.id(), prompt, int64_t(prompt.size()) - 1), 0,
                            int64_t(prompt.size()) - 1);
    s.cache.assign(prompt.begin(), prompt.begin() + got);
    keep = got;
  }
  metrics_.cached_tokens += uint64_t(keep);
  s.last_used = ++step_no_;
  s.begin(std::move(task), keep, default_seed_);
}

bool Scheduler::step_wants_embd() const {
  bool embd = false, gen = false;
  for (const auto& s : slots_) {
    const bool work = (s->state() == Slot::State::Generate && s->pending >= 0) ||
                      (s->state() == Slot::State::Prefill && s->prompt_left() > 0);
    if (work) (s->task()->embed() ? embd : gen) = true;
  }
  // Both kinds waiting: they take turns, so a long generation never holds embeddings back
  // (nor a stream of embedding requests a generation).
  return embd && (!gen || !step_embd_);
}

int64_t Scheduler::build_batch() {
  batch_.clear();
  bool generating = false;
  step_embd_ = step_wants_embd();
  for (auto& s : slots_) {
    s->batch_row = -1;
    s->n_batch_tokens = 0;
    if (s->state() != Slot::State::Generate || s->pending < 0 || step_embd_) continue;
    if (int64_t(s->cache.size()) + 1 > n_ctx_seq_) {  // --context-shift (else it had ended)
      const int64_t n_keep = tk_.vocab().add_bos ? 1 : 0;
      const int64_t n_discard = (int64_t(s->cache.size()) - n_keep) / 2;
      eng_.seq_shift(s->id(), n_keep, n_discard);
      s->cache.erase(s->cache.begin() + n_keep, s->cache.begin() + n_keep + n_discard);
    }
    batch_.add(s->pending, int32_t(s->cache.size()), s->id(), true);
    s->n_batch_tokens = 1;
    generating = true;
  }
  int64_t budget = p_.n_batch - int64_t(batch_.size());
  if (generating) budget = std::min<int64_t>(budget, p_.n_ubatch);
  for (auto& s : slots_) {  // prefill in admission order would be fairer; slot order is stable
    if (budget <= 0) break;
    if (s->state() != Slot::State::Prefill) continue;
    const std::optional<EmbedSpec>& embed = s->task()->embed();
    if (embed.has_value() != step_embd_) continue;  // its kind waits for a step of its own
    const int64_t n = std::min(s->prompt_left(), budget);
    const auto& p = s->task()->prompt();
    const int64_t at = int64_t(s->cache.size());
    const auto np = int64_t(p.size());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = at + i;
      // The rows the output needs: the last (logits to sample, or last pooling), the first
      // (cls), every one (mean, none).
      bool out = pos + 1 == np;
      if (embed)
        out = embed->pooling == Pooling::Cls    ? pos == 0
              : embed->pooling == Pooling::Last ? pos + 1 == np
                                                : true;
      batch_.add(p[size_t(pos)], int32_t(pos), s->id(), out);
    }
    s->n_batch_tokens = n;
    budget -= n;
  }
  return int64_t(batch_.size());
}

bool Scheduler::try_decode(const Batch& b, std::span<const float>& out, std::string& err,
                           bool& oom) {
  try {
    out = eng_.decode(b);
    return true;
  } catch (const Error& e) {
    err = e.what();
    oom = e.kind() == ErrorKind::OutOfMemory;
  } catch (const std::exception& e) {
    err = e.what();
    oom = false;
  }
  return false;
}

void Scheduler::decode_and_sample() {
  const auto t0 = Clock::now();
  bool has_prefill = false, has_decode = false;
  std::vector<Slot*> rows;  // slots in logits-row order
  for (size_t i = 0; i < batch_.size(); ++i)
    if (batch_.logits[i]) rows.push_back(slots_[size_t(batch_.seq[i])].get());
  for (auto& s : slots_) {
    if (s->n_batch_tokens == 0) continue;
    (s->state() == Slot::State::Generate ? has_decode : has_prefill) = true;
  }
  std::span<const float> out;
  std::string err;
  bool oom = false;
  if (step_embd_ != embd_mode_) {
    eng_.set_embeddings(step_embd_);
    embd_mode_ = step_embd_;
  }
  bool ok = try_decode(batch_, out, err, oom);
  if (!ok && oom) {  // idle slots' kept conversations give their blocks back, then retry
    bool freed = false;
    for (auto& s : slots_)
      if (!s->busy() && !s->cache.empty()) {
        forget(*s);
        freed = true;
      }
    if (freed) ok = try_decode(batch_, out, err, oom);
  }
  if (ok) {
    metrics_.decode_steps++;
    for (auto& s : slots_) {
      if (s->n_batch_tokens == 0) continue;
      if (s->state() == Slot::State::Generate)
        s->on_decoded_pending();
      else {
        s->on_decoded_prompt(s->n_batch_tokens);
        metrics_.prompt_tokens += uint64_t(s->n_batch_tokens);
      }
    }
    sample_rows(out, rows);
  } else {
    decode_fallback(err);
  }
  finish_embeddings();
  const uint64_t us = us_since(t0);
  if (has_decode) metrics_.generate_us += us;
  if (has_prefill) metrics_.prompt_us += us;
}

void Scheduler::sample_rows(std::span<const float> logits, const std::vector<Slot*>& who) {
  const size_t nv = size_t(eng_.n_out_row());  // n_vocab, or n_embd in an embeddings step
  for (size_t r = 0; r < who.size(); ++r) {
    Slot& s = *who[r];
    if (!s.busy()) continue;
    if (s.task()->embed()) {  // hidden states: gathered until the whole input is evaluated
      const auto row = logits.subspan(r * nv, nv);
      s.embd_rows.insert(s.embd_rows.end(), row.begin(), row.end());
      continue;
    }
    std::shared_ptr<Task> task = s.task();  // on_logits releases the slot when the request ends
    TaskEvent ev = s.on_logits(logits.subspan(r * nv, nv), n_ctx_seq_, p_.context_shift);
    metrics_.generated_tokens += uint64_t(ev.tokens.size());
    post(task, std::move(ev));
  }
}

void Scheduler::finish_embeddings() {
  const int64_t n_embd = eng_.n_out_row();
  for (auto& s : slots_) {
    if (s->state() != Slot::State::Prefill || s->prompt_left() > 0 || !s->task()->embed()) continue;
    const EmbedSpec spec = *s->task()->embed();
    std::shared_ptr<Task> task = s->task();
    TaskEvent ev;
    ev.final = true;
    ev.slot_id = s->id();
    ev.usage.prompt_tokens = s->n_prompt();
    ev.finish_reason = "stop";
    const auto want = pooling_rows(spec.pooling, s->n_prompt()).size() * size_t(n_embd);
    if (s->embd_rows.size() != want) {  // a bug, not the client's: never a wrong vector
      ev.error = server_error(
          fmt::format("embedding rows lost: {} floats, {} expected", s->embd_rows.size(), want));
    } else {
      ev.embedding = pool(spec.pooling, s->embd_rows, n_embd);
      // llama-server normalizes only pooled vectors; pooling none returns the raw rows.
      if (spec.pooling != Pooling::None) normalize(ev.embedding, n_embd, spec.normalize);
    }
    s->embd_rows.clear();
    s->release();
    forget(*s);  // each input's sequence is freed at its end
    post(task, std::move(ev));
  }
}

void Scheduler::decode_fallback(const std::string& first_err) {
  // Generating slots first (a finished prompt is worth more than a new one), then prefills.
  std::vector<Slot*> order;
  for (auto& s : slots_)
    if (s->n_batch_tokens > 0 && s->state() == Slot::State::Generate) order.push_back(s.get());
  for (auto& s : slots_)
    if (s->n_batch_tokens > 0 && s->state() == Slot::State::Prefill) order.push_back(s.get());
  bool progress = false;
  Slot* stalled = nullptr;  // a prefill that found no KV blocks: retried next step
  Batch one;
  for (Slot* s : order) {
    one.clear();
    for (size_t i = 0; i < batch_.size(); ++i)
      if (batch_.seq[i] == s->id())
        one.add(batch_.token[i], batch_.pos[i], batch_.seq[i], batch_.logits[i] != 0);
    std::span<const float> out;
    std::string err;
    bool oom = false;
    if (try_decode(one, out, err, oom)) {
      progress = true;
      metrics_.decode_steps++;
      const bool wants_row = std::find(one.logits.begin(), one.logits.end(), 1) != one.logits.end();
      if (s->state() == Slot::State::Generate)
        s->on_decoded_pending();
      else {
        s->on_decoded_prompt(s->n_batch_tokens);
        metrics_.prompt_tokens += uint64_t(s->n_batch_tokens);
      }
      if (wants_row) sample_rows(out, {s});
      continue;
    }
    if (oom && s->state() == Slot::State::Prefill) {
      if (!stalled || s->prompt_left() > stalled->prompt_left()) stalled = s;
      continue;
    }
    std::shared_ptr<Task> task = s->task();
    const ApiError e = oom ? unavailable("out of KV cache blocks: " + err + " (raise -c)")
                           : server_error("decode failed: " + err);
    post(task, s->finish_error(e));
    if (oom) forget(*s);  // its blocks are what the others need
  }
  // Nobody moved: the largest stalled prefill gives up so the others can go on.
  if (!progress && stalled) {
    std::shared_ptr<Task> task = stalled->task();
    post(task, stalled->finish_error(unavailable("out of KV cache blocks for this prompt (" +
                                                 first_err + "); raise -c")));
  }
}

void Scheduler::fail_all(const std::string& what) {
  std::fprintf(stderr, "minfer serve: decode loop error: %s\n", what.c_str());
  for (auto& s : slots_) {
    if (!s->busy()) continue;
    std::shared_ptr<Task> task = s->task();
    post(task, s->finish_error(server_error("internal error: " + what)));
    try {
      forget(*s);
    } catch (const std::exception&) {
      s->cache.clear();
    }
  }
  publish();
}

void Scheduler::forget(Slot& s) {
  eng_.seq_rm(s.id(), 0, -1);
  s.cache.clear();
}

void Scheduler::post(const std::shared_ptr<Task>& task, TaskEvent ev) {
  if (!ev.final) {
    task->push(std::move(ev));
    return;
  }
  if (ev.error)
    metrics_.requests_failed++;
  else
    metrics_.requests_done++;
  // Held until publish(): a client that has its final response then finds its slot idle in
  // /slots, and a next turn sent at once is not judged against a stale snapshot.
  finals_.emplace_back(task, std::move(ev));
}

void Scheduler::publish() {
  SchedulerSnapshot snap;
  for (auto& s : slots_) {
    SlotInfo i;
    i.id = s->id();
    i.busy = s->busy();
    i.state = s->state() == Slot::State::Idle      ? "idle"
              : s->state() == Slot::State::Prefill ? "prefill"
                                                   : "generating";
    i.task_id = s->task() ? s->task()->id() : 0;
    i.n_cache = int64_t(s->cache.size());
    i.n_prompt = s->n_prompt();
    i.n_generated = s->busy() ? s->n_generated() : 0;
    snap.slots.push_back(i);
  }
  snap.kv = eng_.kv_report();
  snap.steps = metrics_.decode_steps.load();
  {
    std::lock_guard<std::mutex> lk(mu_);
    snap.queue_length = int64_t(queue_.size());
    snap_ = std::move(snap);
  }
  for (auto& [task, ev] : finals_) task->push(std::move(ev));
  finals_.clear();
}

}  // namespace minfer::server
