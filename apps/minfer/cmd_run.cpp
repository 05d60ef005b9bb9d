// minfer run: generate text from a prompt.
// stdout carries only the generated text, streamed token by token; everything else (what was
// loaded, memory, timings) goes to stderr.
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "heap_counter.h"
#include "sample/sampler.h"

namespace minfer::app {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "cannot open prompt file '{}'", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int cmd_run(int argc, char** argv) {
  CLI::App app("minfer run: generate text from a prompt", "minfer run");
  app.set_help_flag("-h,--help");
  EngineOptions eo;
  add_engine_options(app, eo);
  std::string prompt, prompt_file;
  int64_t n_predict = -1;
  SamplerParams sp;
  bool ignore_eos = false;
  auto* p_opt = app.add_option("-p,--prompt", prompt, "prompt text");
  auto* f_opt = app.add_option("-f,--file", prompt_file, "read the prompt from a file");
  p_opt->excludes(f_opt);
  app.add_option("-n,--n-predict", n_predict,
                 "tokens to generate (default -1: until end of generation or a full context)");
  app.add_option("--temp", sp.temperature, "temperature (default 0.8; <= 0: greedy)");
  app.add_option("--top-k", sp.top_k, "top-k (default 40; <= 0: off)");
  app.add_option("--top-p", sp.top_p, "top-p (default 0.95; 1: off)");
  app.add_option("--min-p", sp.min_p, "min-p (default 0.05; 0: off)");
  app.add_option("--repeat-penalty", sp.repeat_penalty, "repetition penalty (default 1.0: off)");
  app.add_option("--repeat-last-n", sp.repeat_last_n, "tokens the penalty looks back (default 64)");
  app.add_option("--seed", sp.seed, "RNG seed (default: random, printed)");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-generation tokens");
  rewrite_llama_style_flags(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (p_opt->count() == 0 && f_opt->count() == 0)
    fail(ErrorKind::InvalidArgument, "a prompt is required: -p TEXT or -f FILE");
  if (f_opt->count() > 0) prompt = read_file(prompt_file);
  if (n_predict < -1) fail(ErrorKind::InvalidArgument, "-n {} must be >= -1", n_predict);
  sp.validate();
  if (sp.seed == kRandomSeed) {
    sp.seed = resolve_seed(sp.seed);
    fmt::print(stderr, "minfer: seed = {}\n", sp.seed);
  }

  const auto t_start = Clock::now();
  LoadedEngine le = load_engine(eo, true);
  Engine& eng = *le.engine;
  const tok::Tokenizer& tk = *le.tokenizer;

  // As llama.cpp: BOS per the vocabulary, control-token text in the prompt recognised.
  const std::vector<int32_t> toks =
      tk.tokenize(prompt, {.add_special = true, .parse_special = true});
  if (toks.empty()) fail(ErrorKind::InvalidArgument, "the prompt tokenized to nothing");
  const int64_t n_ctx = eng.n_ctx();
  if (static_cast<int64_t>(toks.size()) >= n_ctx)
    fail(ErrorKind::InvalidArgument,
         "the prompt is {} tokens but the context holds {} (and one more is needed to generate); "
         "raise -c (the model was trained with {}) or shorten the prompt",
         toks.size(), n_ctx, le.model->hparams().n_ctx_train);
  fmt::print(stderr, "minfer: prompt {} tokens, generating {}\n", toks.size(),
             n_predict < 0 ? std::string("until end of generation") : std::to_string(n_predict));

  Sampler sampler(sp, static_cast<int32_t>(eng.n_vocab()));
  for (int32_t t : toks) sampler.accept(t);

  // Prefill in logical batches of -b; logits only for the prompt's last token.
  const auto t_prompt = Clock::now();
  std::span<const float> logits;
  const int64_t n_prompt = static_cast<int64_t>(toks.size());
  for (int64_t b = 0; b < n_prompt; b += eo.n_batch) {
    const int64_t e = std::min<int64_t>(n_prompt, b + eo.n_batch);
    std::span<const int32_t> chunk(toks.data() + b, static_cast<size_t>(e - b));
    if (e == n_prompt) {
      logits = eng.eval_last(chunk, b);
    } else {
      eng.eval(chunk, b, {});
    }
  }
  const double prompt_ms = ms_since(t_prompt);
  print_memory(eng, stderr);

  std::vector<float> work(static_cast<size_t>(eng.n_vocab()));
  tok::StreamDecoder dec(tk);
  std::string piece;
  piece.reserve(256);  // grown once; dec.push(id, piece) then never allocates
  int64_t pos = n_prompt, n_gen = 0, n_eval = 0;
  double eval_ms = 0;
  uint64_t allocs_warm = 0;
  uint64_t engine_allocs = 0;  // inside eval() only, after warm-up
  int64_t evals_warm = -1;
  const int64_t limit = n_predict < 0 ? std::numeric_limits<int64_t>::max() : n_predict;
  while (n_gen < limit) {
    std::copy(logits.begin(), logits.end(), work.begin());
    if (ignore_eos)
      for (int32_t id : tk.eog_ids()) work[static_cast<size_t>(id)] = -INFINITY;
    const int32_t next = sampler.sample(work);
    if (!ignore_eos && tk.is_eog(next)) break;
    sampler.accept(next);
    ++n_gen;
    dec.push(next, piece);
    if (!piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (n_gen == limit) break;
    if (pos >= n_ctx) {
      fmt::print(stderr, "\nminfer: context full ({} tokens), stopping\n", n_ctx);
      break;
    }
    const auto t_eval = Clock::now();
    const uint64_t a0 = heap_allocations();
    logits = eng.eval_last(std::span<const int32_t>(&next, 1), pos);
    if (evals_warm > 0) engine_allocs += heap_allocations() - a0;
    eval_ms += ms_since(t_eval);
    ++pos;
    ++n_eval;
    if (n_eval == 2) {  // warm-up: the first decode step built the decode graph
      allocs_warm = heap_allocations();
      evals_warm = n_eval;
    }
  }
  const uint64_t allocs_end = heap_allocations();
  const std::string tail = dec.flush();
  if (!tail.empty()) std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  fmt::print(stderr, "\n");
  fmt::print(stderr, "{:>16} = {:10.2f} ms\n", "load time", le.load_ms);
  print_timing(stderr, "prompt eval time", prompt_ms, n_prompt, "tokens");
  print_timing(stderr, "eval time", eval_ms, n_eval, "runs");
  print_timing(stderr, "total time", ms_since(t_start), n_prompt + n_eval, "tokens");
  if (eo.mem_report) {
    const MemReport r = eng.mem_report();
    print_memory(eng, stderr);
    if (r.cached_bytes || r.outstanding)
      fmt::print(stderr, "minfer: pool cached {} ({} bytes), outstanding {}\n",
                 human_bytes(r.cached_bytes), r.cached_bytes, r.outstanding);
    if (evals_warm > 0 && n_eval > evals_warm) {
      const int64_t steps = n_eval - evals_warm;
      // Engine: inside eval() only. Loop: also the sampler and the streaming text decoder.
      fmt::print(stderr,
                 "minfer: heap allocations after warm-up: engine {} in {} decode steps ({:.2f} per "
                 "step); whole loop {} ({:.2f} per step)\n",
                 engine_allocs, steps, double(engine_allocs) / double(steps),
                 allocs_end - allocs_warm, double(allocs_end - allocs_warm) / double(steps));
    } else {
      fmt::print(stderr,
                 "minfer: heap allocations after warm-up: not measured (< 3 decode steps)\n");
    }
  }
  return 0;
}

}  // namespace minfer::app
