// TEMPORARY (issue #13): a one-sequence SeqEngine over the classic Engine::eval, so that
// `minfer serve` runs before the graph Session implements SeqEngine itself (paged KV cache,
// many sequences). Remove it once Session is a SeqEngine.
//
// Ownership: borrows the Engine. Thread safety: none (the server's decode loop is its only
// user). Failure: Error(InvalidArgument) for a batch with a sequence other than 0 or positions
// that are not contiguous from at most the current length; seq_shift is Error(Unsupported).
// Cost: decode is one Engine::eval.
#pragma once

#include <vector>

#include "common/error.h"
#include "model/engine.h"

namespace minfer::app {

class SingleSeqEngine final : public SeqEngine {
 public:
  explicit SingleSeqEngine(Engine& e) : e_(e) {}

  std::span<const float> decode(const Batch& b) override {
    if (b.size() == 0) return {};
    const int64_t start = b.pos[0];
    if (start > len_) fail(ErrorKind::InvalidArgument, "position {} skips past {}", start, len_);
    rows_.clear();
    for (size_t i = 0; i < b.size(); ++i) {
      if (b.seq[i] != 0) fail(ErrorKind::InvalidArgument, "sequence {} (only 0 here)", b.seq[i]);
      if (b.pos[i] != start + int64_t(i)) fail(ErrorKind::InvalidArgument, "positions skip");
      if (b.logits[i]) rows_.push_back(int32_t(i));
    }
    if (start + int64_t(b.size()) > e_.n_ctx())
      fail(ErrorKind::OutOfMemory, "the sequence would exceed the context of {} tokens",
           e_.n_ctx());
    std::span<const float> out = e_.eval(b.token, start, rows_);
    len_ = start + int64_t(b.size());
    return out;
  }
  int64_t seq_len(int32_t) const override { return len_; }
  void seq_rm(int32_t, int64_t p0, int64_t) override { len_ = std::min(len_, p0); }
  void seq_cp(int32_t, int32_t) override { fail(ErrorKind::Unsupported, "seq_cp: one sequence"); }
  void seq_keep(int32_t) override {}
  void seq_shift(int32_t, int64_t, int64_t) override {
    fail(ErrorKind::Unsupported, "context shift needs the paged KV cache");
  }
  void clear() override { len_ = 0; }
  int64_t reuse_prefix(int32_t, std::span<const int32_t>, int64_t) override { return 0; }
  int32_t n_seq_max() const override { return 1; }
  int64_t n_ctx() const override { return e_.n_ctx(); }
  int64_t n_ctx_seq() const override { return e_.n_ctx(); }
  int64_t n_vocab() const override { return e_.n_vocab(); }
  KvReport kv_report() const override {
    KvReport r;
    r.n_seq_max = 1;
    r.tokens_held = len_;
    r.reserved_bytes = r.committed_bytes = e_.mem_report().kv_bytes;
    return r;
  }

 private:
  Engine& e_;
  int64_t len_ = 0;
  std::vector<int32_t> rows_;
};

}  // namespace minfer::app
