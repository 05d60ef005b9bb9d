// The arithmetic of `minfer perplexity` (llama-perplexity's): per-row negative log-likelihood in
// float64 log-softmax, the running PPL estimate and its uncertainty, the KL-divergence base file
// (llama-perplexity's `--kl-divergence-base` format, so files cross between the two tools) and
// the KL-divergence statistics against it.
//
// Ownership: plain values; KlBaseWriter / KlBaseReader own their stream.
// Thread safety: none; score_rows spreads one chunk's rows over its own short-lived threads.
// Failure: a base file that cannot be opened, has the wrong magic, a size that does not match its
// header, another vocabulary or another context throws Error(InvalidArgument) naming the file and
// the figures that differ. Writing failures throw Error(Io).
// Cost: a row is two passes over n_vocab logits (max; exp in float64); a base file holds
// (n_vocab + 4) x 2 bytes per scored token (uint16 log-probabilities over [max - 16, max]).
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace minfer::app::ppl {

// -log softmax(logits)[tok], the maximum and the sum of exponentials in float64.
double row_nll(std::span<const float> logits, int32_t tok);

// Running sums over scored tokens (llama-perplexity's nll / nll2 / count).
struct PplSums {
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  void add(double v) {
    nll += v;
    nll2 += v * v;
    ++count;
  }
  void merge(const PplSums& o) {
    nll += o.nll;
    nll2 += o.nll2;
    count += o.count;
  }
  double ppl() const;  // exp(mean nll)
  // ppl x the standard error of the mean nll: sqrt((E[v^2] - E[v]^2) / (count - 1)); 0 when the
  // variance is not positive or count < 2.
  double ppl_uncertainty() const;
};

// Floats per base-file row, as uint16 values: two floats (scale, min log-prob) then n_vocab
// values, padded to an even count.
inline int64_t base_row_u16(int64_t n_vocab) {
  return 2 * ((n_vocab + 1) / 2) + 4;
}

// Writes one row of the base file into `out` (base_row_u16 values): log-probabilities clamped
// to [max_logit - 16, max_logit] and quantized to 65535 steps. Returns the row's nll.
double quantize_log_probs(std::span<const float> logits, int32_t tok, uint16_t* out);

// KL-divergence running sums against a base (llama-perplexity's kl_divergence_result).
struct KlSums {
  double nll = 0, nll2 = 0, nll_base = 0, nll_base2 = 0, nll_nll_base = 0;
  double kld = 0, kld2 = 0, p_diff = 0, p_diff2 = 0, p_diff4 = 0;
  double max_p_diff = 0;
  int64_t same_top = 0, count = 0;
  void merge(const KlSums& o);
};

// Scores one row against its base row: adds to `s`, returns the row's KL divergence and sets
// p_diff to p(tok) - p_base(tok).
double kl_row(std::span<const float> logits, const uint16_t* base, int32_t tok, KlSums& s,
              float& p_diff);

// Runs fn(begin, end, part) over [0, n) cut into at most n_threads contiguous parts, each on its
// own thread (part 0 on the caller's); parts are numbered in order so callers merge partial sums
// deterministically.
void parallel_parts(int64_t n, int n_threads, const std::function<void(int64_t, int64_t, int)>& fn);

// The base file: "_logits_", int32 n_ctx, int32 n_vocab, int32 n_chunk, the n_chunk x n_ctx
// evaluated token ids (int32, without the BOS substitution), then per chunk n_ctx - 1 - n_ctx/2
// rows of base_row_u16(n_vocab) uint16 values. Little-endian.
struct KlBaseHeader {
  int32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
  std::vector<int32_t> tokens;
  int64_t rows_per_chunk() const { return n_ctx - 1 - n_ctx / 2; }
  uint64_t file_bytes() const;  // the size a file with this header must have
};

class KlBaseWriter {
 public:
  // Writes the header; throws Error(Io) naming the path when the file cannot be written.
  KlBaseWriter(const std::string& path, const KlBaseHeader& h);
  void write_chunk(const std::vector<uint16_t>& rows);  // rows_per_chunk rows
  void close();                                         // flushes; throws Error(Io) on failure

 private:
  std::string path_;
  std::ofstream out_;
};

class KlBaseReader {
 public:
  // Opens and validates `path` against the model's vocabulary and the run's -c (the size must
  // match the header exactly, so the counts are bounded by the file before anything is sized).
  KlBaseReader(const std::string& path, int64_t n_vocab, int64_t n_ctx);
  const KlBaseHeader& header() const { return h_; }
  void read_chunk(std::vector<uint16_t>& rows);  // the next chunk's rows

 private:
  std::string path_;
  std::ifstream in_;
  KlBaseHeader h_;
};

// llama-perplexity's per-chunk KL line: chunk, PPL, ln(PPL(Q)/PPL(base)), KLD, Δp RMS, same top.
void print_kl_chunk_line(FILE* out, int chunk, const KlSums& s);
// Its final statistics: perplexity, KL divergence (mean, percentiles), token probability.
// `kld` and `p_diff` are sorted in place.
void print_kl_summary(FILE* out, const KlSums& s, std::vector<float>& kld,
                      std::vector<float>& p_diff);

}  // namespace minfer::app::ppl
