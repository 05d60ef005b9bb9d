// minfer perplexity: a model's perplexity over a text, as llama.cpp's llama-perplexity.
//
//   minfer perplexity -m FILE (-f FILE | -p TEXT) [-c 512] [-b 2048] [--chunks N] [-t N]
//                     [--kl-divergence-base BASE [--kl-divergence]]
//
// The text is tokenized once (BOS as the vocabulary says) and cut into chunks of -c tokens;
// each chunk starts a fresh sequence whose first token is replaced by BOS (where the vocabulary
// adds one) and only its second half is scored (position >= c/2: the model always has c/2
// tokens of context), each row's -log p(next token) in float64 log-softmax (perplexity.h).
// -b / -c chunks run together in one SeqEngine batch, one sequence each (llama-perplexity's
// n_seq); -b below -c feeds one chunk in several batches. Output on stdout: "[1]x,[2]y,..."
// (the running PPL after each chunk) and "Final estimate: PPL = X +/- Y"; stderr: what was
// loaded and the time per pass.
// --kl-divergence-base BASE without --kl-divergence writes the base model's log-probabilities
// of every scored token (llama-perplexity's file format, perplexity.h); with --kl-divergence it
// reads them, scores this model's chunks of the same tokens against them and prints
// llama-perplexity's KL table and statistics (mean KLD ±, percentiles, "Same top p").
// Errors (Error(InvalidArgument), named): a text shorter than 2 x c tokens, -b neither below
// nor a multiple of -c, a context the model cannot hold, a base file of another vocabulary,
// context or token sequence.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "perplexity.h"

namespace minfer::app {

namespace {

struct PplOptions {
  EngineOptions engine;
  std::string prompt, prompt_file;
  int32_t n_chunks = -1;  // -1: every whole chunk of the text
  std::string kl_base;    // --kl-divergence-base
  bool kl = false;        // --kl-divergence: read kl_base instead of writing it
};

// The chunk loop's shape, llama-perplexity's: n_seq chunks per pass when -b holds several.
struct Shape {
  int64_t n_ctx = 0, n_batch = 0, n_seq = 1, n_chunk = 0;
  int64_t first() const { return n_ctx / 2; }
  int64_t rows() const { return n_ctx - 1 - first(); }  // scored tokens per chunk
  int64_t passes_per_chunk() const { return (n_ctx + n_batch - 1) / n_batch; }
};

// Evaluates chunks [c0, c0 + n) of `tokens` together and returns the scored rows of each chunk
// (rows() x n_vocab floats per chunk, chunk after chunk), valid until the next call. Rows are
// flagged only where scored: positions first() .. n_ctx - 2 (the last token's prediction is past
// the chunk). One pass per chunk (-b >= -c) returns the engine's own rows; a chunk fed in
// several passes collects its rows in `buf`.
std::span<const float> eval_chunks(SeqEngine& e, const std::vector<int32_t>& tokens, const Shape& s,
                                   int64_t c0, int64_t n, int32_t bos, std::vector<float>& buf) {
  e.clear();
  const auto n_vocab = static_cast<size_t>(e.n_vocab());
  const bool one_pass = s.passes_per_chunk() == 1;
  if (!one_pass) buf.resize(static_cast<size_t>(n * s.rows()) * n_vocab);
  std::vector<size_t> filled(static_cast<size_t>(n), 0);  // floats written per chunk
  Batch b;
  for (int64_t j = 0; j < s.passes_per_chunk(); ++j) {
    const int64_t p0 = j * s.n_batch, len = std::min(s.n_ctx - p0, s.n_batch);
    b.clear();
    for (int64_t q = 0; q < n; ++q)
      for (int64_t k = 0; k < len; ++k) {
        const int64_t pos = p0 + k;
        const int32_t tok =
            pos == 0 && bos >= 0 ? bos : tokens[static_cast<size_t>((c0 + q) * s.n_ctx + pos)];
        b.add(tok, static_cast<int32_t>(pos), static_cast<int32_t>(q),
              pos >= s.first() && pos < s.n_ctx - 1);
      }
    const std::span<const float> rows = e.decode(b);
    if (one_pass) {
      MINFER_ASSERT(rows.size() == static_cast<size_t>(n * s.rows()) * n_vocab,
                    "perplexity: decode returned the flagged rows");
      return rows;
    }
    // decode returns the flagged rows in batch order: chunk q's rows of this pass, then q + 1's.
    size_t at = 0;
    for (int64_t q = 0; q < n; ++q) {
      const int64_t lo = std::max(p0, s.first()), hi = std::min(p0 + len, s.n_ctx - 1);
      const size_t m = hi > lo ? static_cast<size_t>(hi - lo) * n_vocab : 0;
      std::copy(rows.begin() + static_cast<ptrdiff_t>(at),
                rows.begin() + static_cast<ptrdiff_t>(at + m),
                buf.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(q * s.rows()) * n_vocab +
                                                     filled[static_cast<size_t>(q)]));
      filled[static_cast<size_t>(q)] += m;
      at += m;
    }
    MINFER_ASSERT(at == rows.size(), "perplexity: decode returned the flagged rows");
  }
  return buf;
}

// The shape the flags ask for; bad -c / -b / --chunks throw before the model loads.
Shape make_shape(const PplOptions& o) {
  Shape s;
  s.n_ctx = o.engine.n_ctx;
  if (s.n_ctx < 4) fail(ErrorKind::InvalidArgument, "-c {} must be >= 4", s.n_ctx);
  s.n_batch = o.engine.n_batch;
  if (s.n_batch <= 0) fail(ErrorKind::InvalidArgument, "-b {} must be > 0", s.n_batch);
  if (s.n_batch >= s.n_ctx && s.n_batch % s.n_ctx != 0)
    fail(ErrorKind::InvalidArgument,
         "-b {} must be below -c {} or a multiple of it (each pass holds whole chunks)", s.n_batch,
         s.n_ctx);
  s.n_seq = std::max<int64_t>(1, s.n_batch / s.n_ctx);
  s.n_batch = std::min(s.n_batch, s.n_ctx * s.n_seq);
  if (o.n_chunks == 0 || o.n_chunks < -1)
    fail(ErrorKind::InvalidArgument, "--chunks {} must be > 0", o.n_chunks);
  return s;
}

struct Scorer {
  Scorer(SeqEngine& engine, int n_threads, int64_t n_rows)
      : e(engine), threads(n_threads), rows(n_rows) {}
  SeqEngine& e;
  int threads;
  int64_t rows;  // scored tokens per chunk

  // Per chunk: PPL mode adds to `sums`; writing a base appends to it; KL mode adds to `kl`.
  ppl::PplSums sums;
  ppl::KlSums kl;
  std::vector<float> kld_values, p_diff_values;
  std::optional<ppl::KlBaseWriter> writer;
  std::optional<ppl::KlBaseReader> reader;
  std::vector<uint16_t> base_rows;

  void score_chunk(const float* logits, const int32_t* next, int chunk_no) {
    const auto n_vocab = e.n_vocab();
    const int64_t n = rows;
    auto row = [&](int64_t r) {
      return std::span<const float>(logits + r * n_vocab, static_cast<size_t>(n_vocab));
    };
    if (reader) {
      reader->read_chunk(base_rows);
      const int64_t nv = ppl::base_row_u16(n_vocab);
      const size_t at = kld_values.size();
      kld_values.resize(at + static_cast<size_t>(n));
      p_diff_values.resize(at + static_cast<size_t>(n));
      std::vector<ppl::KlSums> part(static_cast<size_t>(threads));
      ppl::parallel_parts(n, threads, [&](int64_t lo, int64_t hi, int p) {
        for (int64_t r = lo; r < hi; ++r)
          kld_values[at + static_cast<size_t>(r)] = static_cast<float>(
              ppl::kl_row(row(r), base_rows.data() + r * nv, next[r], part[static_cast<size_t>(p)],
                          p_diff_values[at + static_cast<size_t>(r)]));
      });
      for (const auto& s : part) kl.merge(s);
      ppl::print_kl_chunk_line(stdout, chunk_no, kl);
      return;
    }
    std::vector<ppl::PplSums> part(static_cast<size_t>(threads));
    if (writer) base_rows.resize(static_cast<size_t>(n * ppl::base_row_u16(n_vocab)));
    ppl::parallel_parts(n, threads, [&](int64_t lo, int64_t hi, int p) {
      for (int64_t r = lo; r < hi; ++r)
        part[static_cast<size_t>(p)].add(
            writer ? ppl::quantize_log_probs(row(r), next[r],
                                             base_rows.data() + r * ppl::base_row_u16(n_vocab))
                   : ppl::row_nll(row(r), next[r]));
    });
    for (const auto& s : part) sums.merge(s);
    if (writer) writer->write_chunk(base_rows);
    std::printf("[%d]%.4f,", chunk_no, sums.ppl());
    std::fflush(stdout);
  }
};

// The tokens to score: the text's (BOS as the vocabulary says), or with --kl-divergence the
// base file's, which the text, when given, must match.
std::vector<int32_t> text_tokens(const PplOptions& o, const std::string& text,
                                 const tok::Tokenizer& tk, const SeqEngine& seq, int64_t n_ctx,
                                 std::optional<ppl::KlBaseReader>& reader) {
  if (!o.kl) return tk.tokenize(text, {.add_special = true});
  reader.emplace(o.kl_base, seq.n_vocab(), n_ctx);
  const std::vector<int32_t>& tokens = reader->header().tokens;
  if (!text.empty()) {
    std::vector<int32_t> mine = tk.tokenize(text, {.add_special = true});
    mine.resize(std::min(mine.size(), tokens.size()));
    if (mine != tokens)
      fail(ErrorKind::InvalidArgument,
           "--kl-divergence-base {}: its {} tokens are not this text's (first {} tokens); "
           "leave out -f / -p to score the base file's own tokens",
           o.kl_base, tokens.size(), mine.size());
  }
  return tokens;
}

// Evaluates and scores every chunk, printing as it goes (stdout) and the time of the first pass
// (stderr). Returns the seconds it took.
double score_all(Scorer& sc, const Shape& s, const std::vector<int32_t>& tokens, int32_t bos,
                 bool kl) {
  std::vector<float> buf;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < s.n_chunk; c += s.n_seq) {
    const int64_t n = std::min(s.n_seq, s.n_chunk - c);
    const auto tp = std::chrono::steady_clock::now();
    const std::span<const float> logits = eval_chunks(sc.e, tokens, s, c, n, bos, buf);
    if (c == 0) {
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
      fmt::print(stderr, "minfer: {:.2f} seconds per pass - ETA {:.2f} minutes\n", sec,
                 sec * static_cast<double>((s.n_chunk + s.n_seq - 1) / s.n_seq) / 60);
      if (kl)
        std::printf(
            "\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL "
            "Divergence              Δp RMS            Same top p\n");
    }
    for (int64_t q = 0; q < n; ++q)
      sc.score_chunk(logits.data() + static_cast<size_t>(q * s.rows() * sc.e.n_vocab()),
                     tokens.data() + (c + q) * s.n_ctx + s.first() + 1,
                     static_cast<int>(c + q + 1));
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (kl) {
    std::printf("\n");
    ppl::print_kl_summary(stdout, sc.kl, sc.kld_values, sc.p_diff_values);
  } else {
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", sc.sums.ppl(),
                sc.sums.ppl_uncertainty());
    if (sc.writer) sc.writer->close();
  }
  return total;
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  PplOptions o;
  o.engine.n_ctx = 512;  // llama-perplexity's default chunk
  CLI::App app(
      "minfer perplexity: perplexity of a text, KL divergence against a base model "
      "(llama-perplexity)",
      "minfer perplexity");
  app.set_help_flag("-h,--help", "print this help and exit");
  add_engine_options(app, o.engine);
  auto* p = app.add_option("-p,--prompt", o.prompt, "the text to score");
  auto* f = app.add_option("-f,--file", o.prompt_file, "read the text from this file");
  p->excludes(f);
  app.add_option("--chunks", o.n_chunks, "score at most N chunks of -c tokens (default: all)");
  app.add_option("--kl-divergence-base", o.kl_base,
                 "file of the base model's log-probabilities: written, or read with "
                 "--kl-divergence");
  app.add_flag("--kl-divergence", o.kl, "score against --kl-divergence-base (KL divergence)");
  if (auto status = parse_command_line(app, argc, argv)) return *status;
  if (o.kl && o.kl_base.empty())
    fail(ErrorKind::InvalidArgument, "--kl-divergence needs --kl-divergence-base FILE");
  if (!o.kl && p->count() == 0 && f->count() == 0)
    fail(ErrorKind::InvalidArgument, "give the text with -p TEXT or -f FILE");
  if (o.engine.exec != "graph")
    fail(ErrorKind::InvalidArgument, "--exec '{}': perplexity runs in graph mode only",
         o.engine.exec);
  std::string text = f->count() ? read_prompt_file(o.prompt_file) : o.prompt;
  // As llama.cpp's -f: a file's final newline is dropped.
  if (f->count() && !text.empty() && text.back() == '\n') text.pop_back();

  Shape s = make_shape(o);
  const int64_t n_ctx = s.n_ctx;
  o.engine.n_ctx = n_ctx * s.n_seq;  // the KV pool: n_seq chunks of n_ctx
  o.engine.n_seq_max = static_cast<int32_t>(s.n_seq);
  o.engine.n_batch = static_cast<int32_t>(s.n_batch);
  o.engine.prefix_cache = false;  // every chunk is new text
  LoadedEngine le = load_engine(o.engine, /*log=*/true);
  auto* seq = dynamic_cast<SeqEngine*>(le.engine.get());
  MINFER_ASSERT(seq != nullptr, "perplexity: the graph engine is a SeqEngine");
  if (seq->n_ctx_seq() < n_ctx)
    fail(ErrorKind::InvalidArgument,
         "-c {} exceeds what one sequence of this model holds ({} tokens, the training context)",
         n_ctx, seq->n_ctx_seq());

  std::optional<ppl::KlBaseReader> reader;
  const std::vector<int32_t> tokens = text_tokens(o, text, *le.tokenizer, *seq, n_ctx, reader);
  if (static_cast<int64_t>(tokens.size()) < 2 * n_ctx)
    fail(ErrorKind::InvalidArgument,
         "the text is {} tokens; perplexity with -c {} needs at least {} (2 x -c): give a longer "
         "text or a smaller -c",
         tokens.size(), n_ctx, 2 * n_ctx);
  const int64_t n_chunk_max = static_cast<int64_t>(tokens.size()) / n_ctx;
  s.n_chunk = o.n_chunks < 0 ? n_chunk_max : std::min<int64_t>(o.n_chunks, n_chunk_max);
  const bool add_bos = le.tokenizer->vocab().add_bos && le.tokenizer->bos() >= 0;

  const int threads = o.engine.n_threads > 0 ? o.engine.n_threads : default_threads();
  Scorer sc(*seq, threads, s.rows());
  sc.reader = std::move(reader);
  if (!o.kl && !o.kl_base.empty()) {
    ppl::KlBaseHeader h{static_cast<int32_t>(n_ctx), static_cast<int32_t>(seq->n_vocab()),
                        static_cast<int32_t>(s.n_chunk),
                        std::vector<int32_t>(tokens.begin(), tokens.begin() + s.n_chunk * n_ctx)};
    sc.writer.emplace(o.kl_base, h);
    fmt::print(stderr, "minfer: writing the base log-probabilities to {} ({})\n", o.kl_base,
               human_bytes(h.file_bytes()));
  }
  fmt::print(stderr, "minfer: perplexity over {} chunks, n_ctx={}, batch_size={}, n_seq={}\n",
             s.n_chunk, n_ctx, s.n_batch, s.n_seq);

  const double total = score_all(sc, s, tokens, add_bos ? le.tokenizer->bos() : -1, o.kl);
  const int64_t evaluated = s.n_chunk * n_ctx;
  fmt::print(stderr, "minfer: {} tokens evaluated in {:.2f} s ({:.1f} tokens/s, {} threads)\n",
             evaluated, total, static_cast<double>(evaluated) / total, threads);
  return 0;
}

}  // namespace minfer::app
