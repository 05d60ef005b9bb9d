// minfer run: generate text from a prompt.
// stdout carries only the generated text, streamed token by token; everything else (what was
// loaded, memory, timings) goes to stderr.
//
// Steps: parse the flags into RunOptions, load the engine, tokenize and prefill the prompt,
// decode token by token (generate), report timings and, with --mem-report, memory and heap
// allocations per decode step.
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "grammar_cli.h"
#include "heap_counter/heap_counter.h"
#include "sample/sampler.h"
#include "spec/speculator.h"

namespace minfer::app {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct RunOptions {
  EngineOptions engine;
  SamplerParams sampling;
  TextOptions text;        // -e, -r, --keep
  std::string prompt;      // -p TEXT, or the contents of -f FILE
  int64_t n_predict = -1;  // -1: until end of generation or a full context
  bool ignore_eos = false;
  GrammarFlags grammar;     // --grammar, --grammar-file, --json-schema, --json-schema-file
  std::string model_draft;  // -md: speculative decoding with this draft model
  spec::SpecParams draft;   // --draft-max, --draft-min, --draft-p-min
  int threads_draft = 0;    // -td: the draft engine's threads (0: as -t)
};

// -md and its flags (llama.cpp's names; its newer --spec-draft-* spellings too).
void add_draft_options(CLI::App& app, RunOptions& o) {
  app.add_option("--model-draft,--spec-draft-model", o.model_draft,
                 "(-md) draft model for speculative decoding (same vocabulary as -m)");
  app.add_option("--draft-max,--draft,--draft-n,--spec-draft-n-max", o.draft.n_max,
                 "most tokens the draft proposes per step (default 16)");
  app.add_option("--draft-min,--draft-n-min,--spec-draft-n-min", o.draft.n_min,
                 "fewer proposals than this: a plain one-token step (default 0)");
  app.add_option("--draft-p-min,--spec-draft-p-min", o.draft.p_min,
                 "stop proposing when the draft's top probability is below this (default 0.75)");
  app.add_option("--threads-draft,--spec-draft-threads", o.threads_draft,
                 "(-td) threads of the draft engine (default: as -t)");
}

// What the decode loop measured, for the report.
struct DecodeStats {
  int64_t n_eval = 0;  // decode-step evals (the first sampled token comes from the prefill)
  double eval_ms = 0;
  // Heap allocations after warm-up (the first decode step builds the decode graph), counted from
  // the second eval on: inside eval() only, and over the whole loop (sampler, text decoder too).
  int64_t evals_warm = -1;  // eval count at the warm-up mark; -1: never reached
  uint64_t engine_allocs = 0;
  uint64_t loop_allocs = 0;
  int64_t n_shifts = 0;  // context shifts (-n beyond the context)
};

// Parses argv into `o`; returns the exit status when the command line ends the command (--help,
// a parse error). Bad values throw Error(InvalidArgument).
std::optional<int> parse_run_options(int argc, char** argv, RunOptions& o) {
  CLI::App app("minfer run: generate text from a prompt", "minfer run");
  app.set_help_flag("-h,--help", "print this help and exit");
  add_engine_options(app, o.engine);
  add_text_options(app, o.text, /*with_keep=*/true);
  bool no_cnv = false;
  std::string system;
  app.add_flag("--no-conversation", no_cnv,
               "plain completion (what run always does; also -no-cnv). -cnv: minfer chat");
  app.add_option("--system-prompt", system, "(-sys) for conversations: see minfer chat");
  std::string prompt_file;
  auto* p_opt = app.add_option("-p,--prompt", o.prompt, "prompt text");
  auto* f_opt = app.add_option("-f,--file", prompt_file, "read the prompt from a file");
  p_opt->excludes(f_opt);
  add_n_predict_option(app, o.n_predict,
                       "tokens to generate (default -1: until end of generation or a full "
                       "context)");
  add_sampling_options(app, o.sampling);
  app.add_flag("--ignore-eos", o.ignore_eos, "keep generating past end-of-generation tokens");
  add_grammar_options(app, o.grammar);
  add_draft_options(app, o);
  if (auto status = parse_command_line(app, argc, argv)) return status;
  if (!system.empty())
    fail(ErrorKind::InvalidArgument,
         "-sys sets a conversation's system prompt: use minfer chat -sys TEXT (or run -cnv)");
  if (p_opt->count() == 0 && f_opt->count() == 0)
    fail(ErrorKind::InvalidArgument, "a prompt is required: -p TEXT or -f FILE");
  if (f_opt->count() > 0) o.prompt = read_prompt_file(prompt_file);
  if (o.text.escape) {
    if (p_opt->count() > 0) o.prompt = process_escapes(o.prompt);
    for (std::string& r : o.text.reverse_prompts) r = process_escapes(r);
  }
  // One sequence that never rewinds to a shared prefix: nothing could hit the prefix cache, and
  // its keys would only make a context shift copy blocks it could rewrite in place.
  o.engine.prefix_cache = false;
  if (o.text.n_keep < -1)
    fail(ErrorKind::InvalidArgument, "--keep {} must be >= -1 (-1: the whole prompt)",
         o.text.n_keep);
  resolve_sampling_options(o.sampling);
  resolve_grammar_options(o.grammar);
  o.draft.n_batch = o.engine.n_batch;
  o.draft.validate();
  if (o.threads_draft < 0)
    fail(ErrorKind::InvalidArgument, "-td {} must be >= 0 (0: as -t)", o.threads_draft);
  check_threads(o.threads_draft);
  return std::nullopt;
}

// The prompt's tokens; throws when they leave no room in the context to generate.
std::vector<int32_t> tokenize_prompt(const LoadedEngine& le, const std::string& prompt) {
  // As llama.cpp: BOS per the vocabulary, control-token text in the prompt recognised.
  std::vector<int32_t> toks =
      le.tokenizer->tokenize(prompt, {.add_special = true, .parse_special = true});
  if (toks.empty()) fail(ErrorKind::InvalidArgument, "the prompt tokenized to nothing");
  const int64_t n_ctx = le.engine->n_ctx();
  if (static_cast<int64_t>(toks.size()) >= n_ctx)
    fail(ErrorKind::InvalidArgument,
         "the prompt is {} tokens but the context holds {} (and one more is needed to generate); "
         "raise -c (the model was trained with {}) or shorten the prompt",
         toks.size(), n_ctx, le.model->hparams().n_ctx_train);
  return toks;
}

void write_stdout(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// Every sampled token goes through the same rules, with or without a draft model: --ignore-eos
// masks the end-of-generation tokens (as llama.cpp) so the sampler always picks a token that
// continues the text (in a copy: the engine's logits are read-only); with a grammar (`filter`)
// only tokens it allows are sampled and generation ends when it allows none; an
// end-of-generation token ends it unprinted; each emitted token is streamed to stdout; -n and a
// reverse prompt (-r) end it after the token.
class TokenLoop final : public spec::TokenSink {
 public:
  TokenLoop(const tok::Tokenizer& tk, Sampler& sampler, grammar::TokenFilter* filter,
            const RunOptions& o, int64_t n_vocab)
      : tk_(tk),
        sampler_(sampler),
        filter_(filter),
        o_(o),
        work_(static_cast<size_t>(n_vocab)),
        dec_(tk),
        limit_(o.n_predict < 0 ? std::numeric_limits<int64_t>::max() : o.n_predict) {
    piece_.reserve(256);  // grown once; dec_.push(id, piece_) then never allocates
  }

  int32_t sample(std::span<const float> logits) override {
    std::span<const float> row = logits;
    if (o_.ignore_eos) {
      std::copy(logits.begin(), logits.end(), work_.begin());
      for (int32_t id : tk_.eog_ids()) work_[static_cast<size_t>(id)] = -INFINITY;
      row = work_;
    }
    return filter_ ? sampler_.sample(row, *filter_) : sampler_.sample(row);
  }

  bool emit(int32_t next) override {
    if (next == kNoTokenAllowed) return false;  // the grammar is complete, its end tokens masked
    if (!o_.ignore_eos && tk_.is_eog(next)) return false;
    if (filter_) filter_->accept(next);
    sampler_.accept(next);
    ++n_gen_;
    dec_.push(next, piece_);
    write_stdout(piece_);
    if (n_gen_ == limit_) return false;
    if (!o_.text.reverse_prompts.empty()) {
      text_ += piece_;
      if (ends_with_reverse_prompt(text_, o_.text) != nullptr) return false;
      if (text_.size() > 4096) text_.erase(0, text_.size() - 1024);  // stop strings are short
    }
    return true;
  }

  int64_t n_gen() const { return n_gen_; }
  int64_t remaining() const { return limit_ - n_gen_; }
  void finish() {
    write_stdout(dec_.flush());
    write_stdout("\n");
  }

 private:
  const tok::Tokenizer& tk_;
  Sampler& sampler_;
  grammar::TokenFilter* filter_;
  const RunOptions& o_;
  std::vector<float> work_;
  tok::StreamDecoder dec_;
  std::string piece_;
  std::string text_;  // for the reverse prompts only
  int64_t limit_;
  int64_t n_gen_ = 0;
};

// --keep: at least the first token (BOS), at most the prompt; -1: the whole prompt.
int64_t tokens_to_keep(const Engine& eng, int64_t n_prompt, const RunOptions& o) {
  const int64_t n_keep = o.text.n_keep < 0 ? n_prompt : std::min(o.text.n_keep, n_prompt);
  return std::clamp<int64_t>(n_keep, 1, std::max<int64_t>(1, eng.n_ctx() - 4));
}

// Before evaluating the token at position hist.size(): with -n -1 a full context ends the
// generation (true); with -n N it shifts (drops the older half after the first n_keep tokens).
bool context_full(Engine& eng, std::vector<int32_t>& hist, int64_t n_keep, const RunOptions& o,
                  DecodeStats& st) {
  const auto pos = static_cast<int64_t>(hist.size());
  if (pos < eng.n_ctx()) return false;
  if (o.n_predict < 0) {
    fmt::print(stderr, "\nminfer: context full ({} tokens), stopping\n", eng.n_ctx());
    return true;
  }
  const int64_t n_discard = (pos - n_keep) / 2;
  fmt::print(stderr,
             "\nminfer: context full ({} tokens): shifted, kept the first {} and the last {}, "
             "dropped {}\n",
             eng.n_ctx(), n_keep, pos - n_keep - n_discard, n_discard);
  shift_context(eng, hist, n_keep, n_discard, o.engine.n_batch);
  ++st.n_shifts;
  return false;
}

// Samples from `logits` (the prompt's last row) and evaluates each emitted token at `pos`,
// pos + 1, ... until the TokenLoop ends the generation or, with -n -1, the context is full.
DecodeStats generate(Engine& eng, TokenLoop& loop, std::span<const float> logits,
                     std::vector<int32_t> hist, const RunOptions& o) {
  DecodeStats st;
  const int64_t n_keep = tokens_to_keep(eng, static_cast<int64_t>(hist.size()), o);
  uint64_t allocs_warm = 0;
  while (loop.remaining() > 0) {
    const int32_t next = loop.sample(logits);
    if (!loop.emit(next)) break;
    if (static_cast<int64_t>(hist.size()) >= eng.n_ctx() && o.n_predict < 0) {
      context_full(eng, hist, n_keep, o, st);
      break;
    }
    const auto t_eval = Clock::now();
    const uint64_t a0 = heap_allocations();
    context_full(eng, hist, n_keep, o, st);
    logits = eng.eval_last(std::span<const int32_t>(&next, 1), static_cast<int64_t>(hist.size()));
    hist.push_back(next);
    if (st.evals_warm > 0) st.engine_allocs += heap_allocations() - a0;
    st.eval_ms += ms_since(t_eval);
    ++st.n_eval;
    if (st.n_eval == 2) {  // warm-up: the first decode step built the decode graph
      allocs_warm = heap_allocations();
      st.evals_warm = st.n_eval;
    }
  }
  st.loop_allocs = heap_allocations() - allocs_warm;
  loop.finish();
  return st;
}

// With a draft model (-md): the first token comes from the prompt's logits as in generate();
// then each Speculator step evaluates the pending token and the draft's proposals in one target
// pass and emits one or more tokens through the same TokenLoop. Context limits as generate():
// the step never evaluates past the context, and a full one stops or shifts before the step
// (the draft catches up from the first token the shift changed).
DecodeStats generate_speculative(Engine& eng, spec::Speculator& sp, TokenLoop& loop,
                                 std::span<const float> logits, std::vector<int32_t> hist,
                                 const RunOptions& o) {
  DecodeStats st;
  const int64_t n_keep = tokens_to_keep(eng, static_cast<int64_t>(hist.size()), o);
  if (loop.remaining() > 0) {
    int32_t last = loop.sample(logits);
    bool go = loop.emit(last);
    while (go && !context_full(eng, hist, n_keep, o, st)) {
      const auto t_eval = Clock::now();
      const spec::Speculator::Step s = sp.step(hist, last, loop.remaining(), loop);
      st.eval_ms += ms_since(t_eval);
      ++st.n_eval;
      go = !s.ended;
      last = s.last;
    }
  }
  loop.finish();
  return st;
}

// llama-speculative-simple's summary, to stderr.
void print_spec_stats(const spec::Speculator& sp, int64_t n_gen, double gen_ms) {
  const spec::SpecStats& s = sp.stats();
  fmt::print(stderr, "\n");
  fmt::print(stderr,
             "minfer: speculative decoding: decoded {} tokens in {:.3f} s, speed: {:.2f} t/s\n",
             n_gen, gen_ms / 1000.0, gen_ms > 0 ? double(n_gen) * 1000.0 / gen_ms : 0.0);
  fmt::print(stderr, "n_draft   = {}\n", sp.params().n_max);
  fmt::print(stderr, "n_predict = {}\n", n_gen);
  fmt::print(stderr, "n_drafted = {}\n", s.n_drafted);
  fmt::print(stderr, "n_accept  = {}\n", s.n_accepted);
  fmt::print(stderr, "accept    = {:.3f}%\n",
             s.n_drafted > 0 ? 100.0 * double(s.n_accepted) / double(s.n_drafted) : 0.0);
  fmt::print(stderr, "n_steps   = {} (target passes), draft {:.2f} ms, target {:.2f} ms\n",
             s.n_steps, s.draft_ms, s.target_ms);
}

// --mem-report: memory figures and heap allocations per decode step after warm-up.
void print_mem_report(const Engine& eng, const DecodeStats& st) {
  const MemReport r = eng.mem_report();
  print_memory(eng, stderr);
  if (r.cached_bytes || r.outstanding)
    fmt::print(stderr, "minfer: pool cached {} ({} bytes), outstanding {}\n",
               human_bytes(r.cached_bytes), r.cached_bytes, r.outstanding);
  if (!kHeapCounting) {
    fmt::print(
        stderr,
        "minfer: heap allocations after warm-up: not counted (sanitizer build: the sanitizer "
        "owns operator new)\n");
  } else if (st.evals_warm > 0 && st.n_eval > st.evals_warm) {
    const int64_t steps = st.n_eval - st.evals_warm;
    // Engine: inside eval() only. Loop: also the sampler and the streaming text decoder.
    fmt::print(stderr,
               "minfer: heap allocations after warm-up: engine {} in {} decode steps ({:.2f} per "
               "step); whole loop {} ({:.2f} per step)\n",
               st.engine_allocs, steps, double(st.engine_allocs) / double(steps), st.loop_allocs,
               double(st.loop_allocs) / double(steps));
  } else {
    fmt::print(stderr, "minfer: heap allocations after warm-up: not measured (< 3 decode steps)\n");
  }
}

// -md: the draft engine, as the target's options with the draft's file, threads and the target's
// context. The vocabulary check runs before the engine is built.
LoadedEngine load_draft(const RunOptions& o, const LoadedEngine& target) {
  EngineOptions de = o.engine;
  de.model = o.model_draft;
  de.n_ctx = target.engine->n_ctx();
  if (o.threads_draft > 0) de.n_threads = o.threads_draft;
  de.mem_report = false;
  fmt::print(stderr, "minfer: draft model (speculative decoding)\n");
  LoadedEngine d = open_engine(de, true);
  spec::check_vocab_compatible(target.tokenizer->vocab(), d.tokenizer->vocab(), o.engine.model,
                               o.model_draft);
  build_engine(d);
  return d;
}

// llama-cli's -cnv (and -i) turn a run into a conversation: minfer chat, with the same flags.
bool wants_conversation(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") return false;
    const std::string_view prev = argv[i - 1];
    if (prev == "-p" || prev == "--prompt" || prev == "-r" || prev == "--reverse-prompt") continue;
    if (a == "-cnv" || a == "--conversation" || a == "-i" || a == "--interactive") return true;
  }
  return false;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  if (wants_conversation(argc, argv)) return cmd_chat(argc, argv);
  RunOptions o;
  if (auto status = parse_run_options(argc, argv, o)) return *status;

  const auto t_start = Clock::now();
  LoadedEngine le = load_engine(o.engine, true);
  Engine& eng = *le.engine;
  std::optional<LoadedEngine> draft;
  std::optional<spec::Speculator> speculator;
  if (!o.model_draft.empty()) {
    draft = load_draft(o, le);
    speculator.emplace(eng, *draft->engine, o.draft);
  }
  const std::vector<int32_t> toks = tokenize_prompt(le, o.prompt);
  const int64_t n_prompt = static_cast<int64_t>(toks.size());
  fmt::print(
      stderr, "minfer: prompt {} tokens, generating {}\n", n_prompt,
      o.n_predict < 0 ? std::string("until end of generation") : std::to_string(o.n_predict));

  print_seed(o.sampling);
  clamp_to_context(o.sampling, eng.n_ctx());
  Sampler sampler(o.sampling, static_cast<int32_t>(eng.n_vocab()));
  for (int32_t t : toks) sampler.accept(t);
  const auto filter = make_grammar_filter(o.grammar, *le.tokenizer, eng.n_vocab());

  const auto t_prompt = Clock::now();
  const std::span<const float> logits = prefill(eng, toks, 0, o.engine.n_batch);
  const double prompt_ms = ms_since(t_prompt);
  print_memory(eng, stderr, /*with_kv=*/false);  // load_engine printed the KV line

  std::vector<int32_t> hist = toks;
  // -n N past the context shifts it: room for the history of up to one context (a speculative
  // step appends up to --draft-max + 1 at once).
  hist.reserve(static_cast<size_t>(eng.n_ctx() + o.draft.n_max) + 1);
  TokenLoop loop(*le.tokenizer, sampler, filter.get(), o, eng.n_vocab());
  const auto t_gen = Clock::now();
  const DecodeStats st =
      draft ? generate_speculative(eng, *speculator, loop, logits, std::move(hist), o)
            : generate(eng, loop, logits, std::move(hist), o);
  const double gen_ms = ms_since(t_gen);

  fmt::print(stderr, "\n");
  fmt::print(stderr, "{:>16} = {:10.2f} ms\n", "load time", le.load_ms);
  print_timing(stderr, "prompt eval time", prompt_ms, n_prompt, "tokens");
  print_timing(stderr, "eval time", st.eval_ms, st.n_eval, "runs");
  // Speculative: tokens decoded, not target passes (several tokens per pass).
  const int64_t n_decoded = speculator ? loop.n_gen() : st.n_eval;
  print_timing(stderr, "total time", ms_since(t_start), n_prompt + n_decoded, "tokens");
  if (speculator) print_spec_stats(*speculator, loop.n_gen(), gen_ms);
  if (o.engine.mem_report) print_mem_report(eng, st);
  return 0;
}

}  // namespace minfer::app
