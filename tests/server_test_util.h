// Test helpers for the server: a hand-built SentencePiece vocabulary (no files needed), a
// FakeSeqEngine whose logits are a pure function of each sequence's token history (so a test
// knows the exact greedy text and any cross-slot corruption changes it), an in-process server
// on a free loopback port, and small HTTP helpers.
//
// FakeSeqEngine checks the SeqEngine contract like the real one: unknown sequences, positions
// that skip, sequences past n_ctx_seq are InvalidArgument; more than n_ctx tokens held in all is
// OutOfMemory; a failed decode leaves everything unchanged. It also records that every call
// comes from one thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/engine.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace minfer::testing {

using json = nlohmann::json;

// <unk> <s> </s>, 256 byte tokens, then whole words with the SPM space marker.
inline const std::vector<std::string>& fake_words() {
  static const std::vector<std::string> w = {"Once",        "upon",
                                             "a",           "time",
                                             "the",         "cat",
                                             "sat",         "on",
                                             "mat",         "dog",
                                             "ran",         "far",
                                             "away",        "and",
                                             "then",        "it",
                                             "was",         "happy",
                                             "sun",         "moon",
                                             "tree",        "bird",
                                             "sang",        "song",
                                             "caf\xC3\xA9", "\xF0\x9F\x98\x80",
                                             "STOP",        "end",
                                             "big",         "small"};
  return w;
}
constexpr int32_t kFirstWord = 3 + 256;

inline tok::Vocab fake_vocab() {
  tok::Vocab v;
  v.type = tok::VocabType::Spm;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {tok::TokenType::Unknown, tok::TokenType::Control, tok::TokenType::Control};
  v.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v.tokens.push_back(name);
    v.scores.push_back(0);
    v.types.push_back(tok::TokenType::Byte);
  }
  for (const std::string& w : fake_words()) {
    v.tokens.push_back("\xE2\x96\x81" + w);
    v.scores.push_back(-1);
    v.types.push_back(tok::TokenType::Normal);
  }
  v.apply_type_defaults();
  v.chat_template =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return v;
}

struct FakeParams {
  int32_t n_seq = 4;
  int64_t n_ctx = 4096;        // tokens held in all
  int64_t n_ctx_seq = 1024;    // per sequence
  int delay_us = 0;            // per decode call: simulated work
  bool eos_sometimes = false;  // EOS wins when a history hash says so (1 in 8)
  // Non-empty: every sequence answers with these tokens, then EOS (see FakeSeqEngine::script_next).
  std::vector<int32_t> script;
};

class FakeSeqEngine final : public SeqEngine {
 public:
  FakeSeqEngine(const FakeParams& p, int32_t n_vocab)
      : p_(p), n_vocab_(n_vocab), seqs_(size_t(p.n_seq)) {}

  static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
  }
  // Logits after `history`: words score 5 + [0, 3), everything else [0, 3).
  static void logits_for(const std::vector<int32_t>& history, int32_t n_vocab, bool eos_sometimes,
                         float* out) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : history) h = mix(h, uint64_t(t) + 1);
    for (int32_t v = 0; v < n_vocab; ++v) {
      const float r = float(mix(h, uint64_t(v) * 7919) % 3000) / 1000.0f;
      out[v] = r + (v >= kFirstWord ? 5.0f : 0.0f);
    }
    if (eos_sometimes && h % 8 == 0) out[2] = 100.0f;
  }
  // The scripted token after `history`: script[k] for the longest k such that the history ends
  // with script[0..k), EOS (2) once all of it was written. A test that makes the model "write"
  // a given text picks a script whose opening does not end its prompt.
  static int32_t script_next(const std::vector<int32_t>& script,
                             const std::vector<int32_t>& history) {
    for (size_t k = std::min(script.size(), history.size());; --k)  // k = 0 always matches
      if (std::equal(script.begin(), script.begin() + std::ptrdiff_t(k),
                     history.end() - std::ptrdiff_t(k)))
        return k == script.size() ? 2 : script[k];
  }
  // What greedy decoding produces after `prompt`, n tokens (no EOS handling).
  static std::vector<int32_t> greedy(std::vector<int32_t> prompt, int n, int32_t n_vocab) {
    std::vector<float> row(size_t(n_vocab), 0.0f);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      logits_for(prompt, n_vocab, false, row.data());
      const int32_t t = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
      out.push_back(t);
      prompt.push_back(t);
    }
    return out;
  }

  std::span<const float> decode(const Batch& b) override {
    std::lock_guard<std::mutex> lk(mu_);
    check_thread();
    if (p_.delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(p_.delay_us));
    std::vector<std::vector<int32_t>> next = seqs_;  // validate on a copy: failure changes nothing
    std::vector<uint8_t> touched(seqs_.size(), 0);
    out_.clear();
    std::vector<std::vector<int32_t>> rows_hist;
    for (size_t i = 0; i < b.size(); ++i) {
      const int32_t s = b.seq[i];
      if (s < 0 || s >= p_.n_seq) fail(ErrorKind::InvalidArgument, "unknown seq {}", s);
      auto& q = next[size_t(s)];
      if (b.pos[i] > int64_t(q.size()) || b.pos[i] < 0)
        fail(ErrorKind::InvalidArgument, "seq {} position {} skips (len {})", s, b.pos[i],
             q.size());
      if (b.pos[i] < int64_t(q.size())) q.resize(size_t(b.pos[i]));
      q.push_back(b.token[i]);
      if (int64_t(q.size()) > p_.n_ctx_seq) fail(ErrorKind::InvalidArgument, "seq {} full", s);
      touched[size_t(s)] = 1;
      if (b.logits[i]) rows_hist.push_back(q);
    }
    int64_t held = 0;
    for (const auto& q : next) held += int64_t(q.size());
    if (held > p_.n_ctx) fail(ErrorKind::OutOfMemory, "fake KV full: {} > {}", held, p_.n_ctx);
    seqs_ = std::move(next);
    out_.resize(rows_hist.size() * size_t(n_vocab_));
    for (size_t r = 0; r < rows_hist.size(); ++r) {
      float* row = out_.data() + r * size_t(n_vocab_);
      logits_for(rows_hist[r], n_vocab_, p_.eos_sometimes, row);
      if (!p_.script.empty()) row[script_next(p_.script, rows_hist[r])] = 100.0f;
    }
    n_decodes++;
    max_batch = std::max<int64_t>(max_batch, int64_t(b.size()));
    max_seqs_in_batch = std::max<int64_t>(
        max_seqs_in_batch, int64_t(std::count(touched.begin(), touched.end(), uint8_t(1))));
    return out_;
  }
  int64_t seq_len(int32_t s) const override { return int64_t(seqs_.at(size_t(s)).size()); }
  void seq_rm(int32_t s, int64_t p0, int64_t p1) override {
    check_thread();
    auto& q = seqs_.at(size_t(s));
    if (p0 == 0 && !q.empty()) retired_.push_back(q);
    if (p1 < 0 || p1 >= int64_t(q.size()))
      q.resize(size_t(std::min<int64_t>(p0, int64_t(q.size()))));
  }
  void seq_cp(int32_t src, int32_t dst) override { seqs_.at(size_t(dst)) = seqs_.at(size_t(src)); }
  void seq_keep(int32_t s) override {
    for (size_t i = 0; i < seqs_.size(); ++i)
      if (int32_t(i) != s) seqs_[i].clear();
  }
  void seq_shift(int32_t s, int64_t n_keep, int64_t n_discard) override {
    auto& q = seqs_.at(size_t(s));
    q.erase(q.begin() + n_keep, q.begin() + n_keep + n_discard);
    n_shifts++;
  }
  void clear() override {
    for (auto& q : seqs_) q.clear();
  }
  // Blocks of 4 tokens: the longest 4-multiple prefix shared with a live or retired sequence.
  int64_t reuse_prefix(int32_t s, std::span<const int32_t> toks, int64_t max_tokens) override {
    check_thread();
    const int64_t n = cached_prefix(toks, max_tokens);
    seqs_.at(size_t(s)).assign(toks.begin(), toks.begin() + n);
    prefix_lookups += uint64_t(toks.size() / 4);
    prefix_hits += uint64_t(n / 4);
    return n;
  }
  int64_t cached_prefix(std::span<const int32_t> toks, int64_t max_tokens) const override {
    size_t best = 0;
    auto consider = [&](const std::vector<int32_t>& q) {
      size_t n = 0;
      while (n < q.size() && n < toks.size() && q[n] == toks[n]) ++n;
      best = std::max(best, n);
    };
    for (const auto& q : seqs_) consider(q);
    for (const auto& q : retired_) consider(q);
    return std::min<int64_t>(int64_t(best), max_tokens) / 4 * 4;
  }
  int32_t n_seq_max() const override { return p_.n_seq; }
  int64_t kv_capacity() const override { return p_.n_ctx; }
  int64_t n_ctx_seq() const override { return p_.n_ctx_seq; }
  int64_t n_vocab() const override { return n_vocab_; }
  KvReport kv_report() const override {
    KvReport r;
    r.n_seq_max = p_.n_seq;
    r.block_size = 4;
    r.blocks_total = p_.n_ctx / 4;
    for (const auto& q : seqs_) r.blocks_used += (int64_t(q.size()) + 3) / 4;
    r.blocks_free = r.blocks_total - r.blocks_used;
    for (const auto& q : seqs_) r.tokens_held += int64_t(q.size());
    r.prefix_hits = prefix_hits;
    r.prefix_lookups = prefix_lookups;
    return r;
  }

  std::atomic<int64_t> n_decodes{0}, max_batch{0}, max_seqs_in_batch{0}, n_shifts{0};
  std::atomic<bool> wrong_thread{false};
  uint64_t prefix_hits = 0, prefix_lookups = 0;

 private:
  void check_thread() {
    const auto me = std::this_thread::get_id();
    if (owner_ == std::thread::id())
      owner_ = me;
    else if (owner_ != me)
      wrong_thread = true;
  }
  FakeParams p_;
  int32_t n_vocab_;
  std::vector<std::vector<int32_t>> seqs_;
  std::vector<std::vector<int32_t>> retired_;
  std::vector<float> out_;
  std::mutex mu_;
  std::thread::id owner_;
};

// An in-process server over a FakeSeqEngine on 127.0.0.1, a free port; stopped by the
// destructor. `vocab` must keep fake_vocab()'s ids (the engine's logits assume them).
struct TestServer {
  explicit TestServer(const FakeParams& fp = {}, server::ServerParams sp = {},
                      tok::Vocab vocab = fake_vocab())
      : tk(std::move(vocab)),
        eng(fp, tk.n_tokens()),
        srv((sp.port = 0, sp.host = "127.0.0.1", sp)) {
    port = srv.bind();
    srv.start();
    server::ServedModel m;
    m.engine = &eng;
    m.tokenizer = &tk;
    m.id = "fake";
    m.path = "fake.gguf";
    srv.set_model(m);
    httplib::Client c("127.0.0.1", port);
    for (int i = 0; i < 200; ++i) {  // bounded: 2 s
      if (auto r = c.Get("/health"); r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~TestServer() { srv.shutdown(); }
  httplib::Client client(int timeout_s = 30) const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(timeout_s, 0);
    c.set_write_timeout(timeout_s, 0);
    return c;
  }
  // The text greedy decoding gives for a completions prompt (BOS + SPM tokens).
  std::string greedy_text(const std::string& prompt, int n) const {
    auto ids = tk.tokenize(prompt, {.add_special = true, .parse_special = true});
    auto out = FakeSeqEngine::greedy(ids, n, tk.n_tokens());
    tok::StreamDecoder d(tk);
    std::string s;
    for (int32_t t : out) s += d.push(t);
    return s + d.flush();
  }

  tok::Tokenizer tk;
  FakeSeqEngine eng;
  server::HttpServer srv;
  int port = 0;
};

// The official `openai` npm client (v4): its node_modules folder, installed once into
// $HOME/.cache/minfer-npm (outside the repo). Empty, with `why`, where npm or node is absent or
// the install fails.
inline std::string openai_npm_modules(std::string* why) {
  namespace fs = std::filesystem;
  if (std::system("command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1") != 0) {
    *why = "npm/node absent: the openai client test needs them";
    return {};
  }
  const char* home = std::getenv("HOME");
  const fs::path cache = fs::path(home ? home : "/tmp") / ".cache" / "minfer-npm";
  if (!fs::exists(cache / "node_modules" / "openai" / "package.json")) {
    fs::create_directories(cache);
    const std::string install = "timeout 600 npm install --no-audit --no-fund --prefix '" +
                                cache.string() + "' openai@4 >&2";
    if (std::system(install.c_str()) != 0) {
      *why = "npm install openai@4 failed";
      return {};
    }
  }
  return (cache / "node_modules").string();
}

// SSE body -> the JSON payloads of its data: lines ("[DONE]" kept as a string).
inline std::vector<json> sse_payloads(const std::string& body, bool* done = nullptr) {
  std::vector<json> out;
  size_t at = 0;
  if (done) *done = false;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string ev = body.substr(at, end - at);
    at = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;
    const std::string p = ev.substr(6);
    if (p == "[DONE]") {
      if (done) *done = true;
      continue;
    }
    out.push_back(json::parse(p));
  }
  return out;
}

}  // namespace minfer::testing
