// Pooling and normalization of embeddings, as llama.cpp's `--pooling` and `--embd-normalize`.
//
// An embeddings engine (SessionParams::embeddings) returns each flagged token's final-norm
// hidden state; pooling turns one sequence's rows into its vector(s) here, in plain code:
//   none: every token's row (one vector per token), mean: their average, cls: the first
//   token's, last: the last token's. `rank` (reranker heads) is not implemented.
// Which rows a pooling needs (pooling_rows) is what the caller flags in its Batch, so cls and
// last compute the final layer's FFN and norm for one row only.
// The default pooling is the GGUF's "<arch>.pooling_type" (Qwen3-Embedding: last), else none,
// as llama.cpp resolves an unspecified --pooling.
//
// Ownership: plain values and caller-owned spans. Thread safety: pure functions.
// Failure: parse_pooling / parse_normalize throw Error(InvalidArgument) naming the flag and
// the value; gguf_pooling throws Error(Unsupported) for a pooling_type it does not implement.
// Cost: O(rows x n_embd) per call.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace minfer {
class SeqEngine;
namespace gguf {
class File;
}

// The values are llama.cpp's LLAMA_POOLING_TYPE_* (and the GGUF key's).
enum class Pooling : int8_t { Unspecified = -1, None = 0, Mean = 1, Cls = 2, Last = 3 };

std::string_view pooling_name(Pooling p);  // "none" | "mean" | "cls" | "last" | "unspecified"
// "none" | "mean" | "cls" | "last"; `flag` names the option in the error ("--pooling").
Pooling parse_pooling(std::string_view s, std::string_view flag);
// The file's "<arch>.pooling_type", or Unspecified when the key is absent.
Pooling gguf_pooling(const gguf::File& f);
// Unspecified -> the file's pooling, and where the file has none: None (llama.cpp's rule).
Pooling resolve_pooling(Pooling requested, const gguf::File& f);

// --embd-normalize: -1 none, 0 max-abs scaled to int16 range, 1 taxicab, 2 euclidean (the
// default), p > 2 p-norm. Throws for other values, naming `flag`.
int parse_normalize(std::string_view s, std::string_view flag);

// The token rows (indices into a sequence of n_tokens) whose hidden states `p` reads.
// Increasing; n_tokens > 0.
std::vector<int32_t> pooling_rows(Pooling p, int64_t n_tokens);

// Pools the rows pooling_rows(p, n) returned (`rows`, n_rows x n_embd, in that order) of a
// sequence of n tokens. None: the rows as they are (n vectors); otherwise one vector.
std::vector<float> pool(Pooling p, std::span<const float> rows, int64_t n_embd);

// One sequence's vector(s) on engine `e` (outputting embeddings): `seq` is cleared, `tokens`
// evaluated from position 0 in batches of at most n_batch flagging pooling_rows, then pooled
// and normalized with `norm` (pooling none: each token's row, as llama-embedding). Attention is
// causal, so the batching does not change the result. Throws what e.decode throws.
std::vector<float> embed_sequence(SeqEngine& e, int32_t seq, std::span<const int32_t> tokens,
                                  Pooling p, int norm, int32_t n_batch);

// Normalizes each n_embd-long vector of `v` in place as llama.cpp's common_embd_normalize:
// sums in double, a zero norm leaves zeros.
void normalize(std::span<float> v, int64_t n_embd, int mode);

}  // namespace minfer
