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
  GrammarFlags grammar;  // --grammar, --grammar-file, --json-schema, --json-schema-file
};

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

// Samples from `logits` (the prompt's last row), streams each token's text to stdout and
// evaluates it at `pos`, pos + 1, ... until -n tokens, an end-of-generation token (unless
// --ignore-eos), a reverse prompt (-r) or, with -n -1, a full context (with -n N the context
// shifts instead, keeping the first --keep prompt tokens). With a grammar (`filter`), only
// tokens it allows are sampled, and generation also ends when it allows none.
DecodeStats generate(Engine& eng, const tok::Tokenizer& tk, Sampler& sampler,
                     grammar::TokenFilter* filter, std::span<const float> logits,
                     std::vector<int32_t> hist, const RunOptions& o) {
  DecodeStats st;
  int64_t pos = static_cast<int64_t>(hist.size());
  const int64_t n_prompt = pos;
  // --keep: at least the first token (BOS), at most the prompt; -1: the whole prompt.
  int64_t n_keep = o.text.n_keep < 0 ? n_prompt : std::min(o.text.n_keep, n_prompt);
  n_keep = std::clamp<int64_t>(n_keep, 1, std::max<int64_t>(1, eng.n_ctx() - 4));
  std::string text;  // for the reverse prompts only
  const bool stops = !o.text.reverse_prompts.empty();
  std::vector<float> work(static_cast<size_t>(eng.n_vocab()));
  tok::StreamDecoder dec(tk);
  std::string piece;
  piece.reserve(256);  // grown once; dec.push(id, piece) then never allocates
  uint64_t allocs_warm = 0;
  const int64_t limit = o.n_predict < 0 ? std::numeric_limits<int64_t>::max() : o.n_predict;
  for (int64_t n_gen = 0; n_gen < limit;) {
    // The sampler reads the engine's logits in place. --ignore-eos masks the end-of-generation
    // tokens (as llama.cpp) so the sampler always picks a token that continues the text: in a
    // copy, because the engine's logits are read-only.
    std::span<const float> row = logits;
    if (o.ignore_eos) {
      std::copy(logits.begin(), logits.end(), work.begin());
      for (int32_t id : tk.eog_ids()) work[static_cast<size_t>(id)] = -INFINITY;
      row = work;
    }
    const int32_t next = filter ? sampler.sample(row, *filter) : sampler.sample(row);
    if (next == kNoTokenAllowed) break;  // the grammar is complete, its end tokens masked
    if (!o.ignore_eos && tk.is_eog(next)) break;
    if (filter) filter->accept(next);
    sampler.accept(next);
    ++n_gen;
    dec.push(next, piece);
    write_stdout(piece);
    if (n_gen == limit) break;
    if (stops) {
      text += piece;
      if (ends_with_reverse_prompt(text, o.text) != nullptr) break;
      if (text.size() > 4096) text.erase(0, text.size() - 1024);  // stop strings are short
    }
    if (pos >= eng.n_ctx() && o.n_predict < 0) {
      fmt::print(stderr, "\nminfer: context full ({} tokens), stopping\n", eng.n_ctx());
      break;
    }
    const auto t_eval = Clock::now();
    const uint64_t a0 = heap_allocations();
    if (pos >= eng.n_ctx()) {
      // -n asks for more than fits: drop the older half after the first n_keep tokens.
      const int64_t n_discard = (pos - n_keep) / 2;
      fmt::print(stderr,
                 "\nminfer: context full ({} tokens): shifted, kept the first {} and the last "
                 "{}, dropped {}\n",
                 eng.n_ctx(), n_keep, pos - n_keep - n_discard, n_discard);
      shift_context(eng, hist, n_keep, n_discard, o.engine.n_batch);
      pos = static_cast<int64_t>(hist.size());
      ++st.n_shifts;
    }
    logits = eng.eval_last(std::span<const int32_t>(&next, 1), pos);
    hist.push_back(next);
    if (st.evals_warm > 0) st.engine_allocs += heap_allocations() - a0;
    st.eval_ms += ms_since(t_eval);
    ++pos;
    ++st.n_eval;
    if (st.n_eval == 2) {  // warm-up: the first decode step built the decode graph
      allocs_warm = heap_allocations();
      st.evals_warm = st.n_eval;
    }
  }
  st.loop_allocs = heap_allocations() - allocs_warm;
  write_stdout(dec.flush());
  write_stdout("\n");
  return st;
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
  // -n N past the context shifts it: room for the history of up to one context.
  hist.reserve(static_cast<size_t>(eng.n_ctx()) + 1);
  const DecodeStats st =
      generate(eng, *le.tokenizer, sampler, filter.get(), logits, std::move(hist), o);

  fmt::print(stderr, "\n");
  fmt::print(stderr, "{:>16} = {:10.2f} ms\n", "load time", le.load_ms);
  print_timing(stderr, "prompt eval time", prompt_ms, n_prompt, "tokens");
  print_timing(stderr, "eval time", st.eval_ms, st.n_eval, "runs");
  print_timing(stderr, "total time", ms_since(t_start), n_prompt + st.n_eval, "tokens");
  if (o.engine.mem_report) print_mem_report(eng, st);
  return 0;
}

}  // namespace minfer::app
