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

#include "common/dtype.h"

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

}  // namespace minfer
