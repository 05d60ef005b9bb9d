// Engine: what the CLI drives to turn tokens into logits, whatever executes them.
//
// The graph Session (model/session.h) implements it; the eager engine (src/eager) implements it
// too, so `minfer run --exec graph|eager` swaps engines behind one generation loop.
//
// Ownership: an Engine borrows the Model, which must outlive it. Thread safety: none.
// Failure: eval() throws Error(InvalidArgument) when positions would run past the context (a
// prompt longer than the context), never crashing.
// Cost: eval() is one forward pass over the given tokens; both engines do no heap allocation
// per decode step after warm-up (asserted by model_test and eager_forward_test) and return
// logits in memory they own (valid until the next eval()).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"

namespace minfer {

struct MemReport {
  uint64_t kv_bytes = 0;               // persistent K/V cache
  GgmlType kv_type_k = GgmlType::F32;  // its element types
  GgmlType kv_type_v = GgmlType::F32;
  uint64_t compute_bytes = 0;             // transient activations (graph: pool bytes; eager: peak)
  uint64_t cached_bytes = 0;              // eager: bytes held by the buffer pool
  int64_t outstanding = 0;                // eager: buffers checked out
  int64_t heap_allocs_after_warmup = -1;  // -1: not measured
  std::string detail;                     // engine-specific extra lines
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Evaluates `tokens` at positions start_pos, start_pos + 1, ... (the KV cache must hold the
  // positions before start_pos). Returns the logits of the batch rows listed in `out_rows`
  // (indices into tokens, strictly increasing), n_vocab floats per row, in that order.
  // The span is valid until the next eval. Cached positions >= start_pos are overwritten.
  virtual std::span<const float> eval(std::span<const int32_t> tokens, int64_t start_pos,
                                      std::span<const int32_t> out_rows) = 0;
  // Logits of the last token only (prefill and decode).
  std::span<const float> eval_last(std::span<const int32_t> tokens, int64_t start_pos) {
    const int32_t last = static_cast<int32_t>(tokens.size()) - 1;
    return eval(tokens, start_pos, std::span<const int32_t>(&last, 1));
  }

  virtual int64_t n_ctx() const = 0;
  virtual int64_t n_vocab() const = 0;
  virtual MemReport mem_report() const = 0;
  virtual std::string name() const = 0;  // "graph" / "eager"
};

// One step of many sequences, as llama.cpp's llama_batch: per token its id, position, sequence
// and whether its logits are wanted. Tokens of one sequence appear in increasing, contiguous
// positions starting at that sequence's current length (or below it: the sequence is first
// truncated there). Sequences in prefill and in decode may share a batch.
struct Batch {
  std::vector<int32_t> token;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq;
  std::vector<uint8_t> logits;  // 1: return this token's logits row

  void clear() {
    token.clear();
    pos.clear();
    seq.clear();
    logits.clear();
  }
  void add(int32_t tok, int32_t p, int32_t s, bool want_logits) {
    token.push_back(tok);
    pos.push_back(p);
    seq.push_back(s);
    logits.push_back(want_logits ? 1 : 0);
  }
  size_t size() const { return token.size(); }
};

struct KvReport {
  int64_t n_seq_max = 0;
  int64_t block_size = 0;
  int64_t blocks_total = 0, blocks_used = 0, blocks_cached = 0, blocks_free = 0;
  uint64_t reserved_bytes = 0, committed_bytes = 0;
  int64_t tokens_held = 0;
  uint64_t prefix_hits = 0, prefix_lookups = 0;
};

// Many sequences over one paged KV cache (graph mode; the server and batched-bench drive it).
// Ownership and thread safety as Engine: one thread drives it.
// Failure: decode() throws Error(InvalidArgument) for a malformed batch (unknown sequence, a
// position that skips, a sequence past its context) and Error(OutOfMemory) when the cache has
// too few free blocks; in both cases the cache is unchanged.
class SeqEngine {
 public:
  virtual ~SeqEngine() = default;
  // Runs the batch (in micro-batches of at most n_ubatch tokens). Returns one n_out_row() row
  // per batch token whose logits flag is set, in batch order; valid until the next call.
  virtual std::span<const float> decode(const Batch& batch) = 0;

  virtual int64_t seq_len(int32_t seq) const = 0;               // tokens held = next position
  virtual void seq_rm(int32_t seq, int64_t p0, int64_t p1) = 0;  // p1 < 0: to the end
  virtual void seq_cp(int32_t src, int32_t dst) = 0;            // fork without copying
  virtual void seq_keep(int32_t seq) = 0;
  // Drop [n_keep, n_keep + n_discard) and shift the rest down (K re-rotated), as llama.cpp's
  // --context-shift.
  virtual void seq_shift(int32_t seq, int64_t n_keep, int64_t n_discard) = 0;
  virtual void clear() = 0;
  // For an empty sequence: attach cached blocks matching a prefix of `tokens` (at most
  // max_tokens tokens). Returns the tokens reused; the caller decodes from there.
  virtual int64_t reuse_prefix(int32_t seq, std::span<const int32_t> tokens,
                               int64_t max_tokens) = 0;
  // What reuse_prefix would attach for `tokens` now, changing nothing (0: no prefix cache).
  virtual int64_t cached_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const {
    return 0;
  }

  virtual int32_t n_seq_max() const = 0;
  virtual int64_t kv_capacity() const = 0;  // tokens the KV pool holds in all (-c)
  virtual int64_t n_ctx_seq() const = 0;    // most tokens one sequence may hold
  virtual int64_t n_vocab() const = 0;
  // Floats per row decode() returns: n_vocab (logits), or n_embd while the engine outputs
  // embeddings (final-norm hidden states: SessionParams::embeddings, set_embeddings).
  virtual int64_t n_out_row() const { return n_vocab(); }
  // What the next decode() returns: embeddings (true) or logits. The server switches per step
  // (a step never mixes the two, as llama-server's). An engine without embeddings refuses
  // `true` with Error(Unsupported).
  virtual void set_embeddings(bool on) {
    if (on) fail(ErrorKind::Unsupported, "this engine does not compute embeddings");
  }
  virtual KvReport kv_report() const = 0;
};

}  // namespace minfer
