#include "engine_cli.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/packed_weights.h"
#include "build_info.h"
#include "common/error.h"
#include "eager/forward.h"
#include "kv/cache.h"
#include "kv/cache_type.h"
#include "model/session.h"

namespace minfer::app {

namespace {

// llama.cpp spellings CLI11 cannot take as they are (multi-letter single-dash), and their long
// forms here.
constexpr std::pair<std::string_view, const char*> kLlamaSpellings[] = {
    {"-ub", "--ubatch-size"},    {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},
    {"-np", "--parallel"},       {"-ngl", "--n-gpu-layers"}, {"-fa", "--flash-attn"},
    {"-sys", "--system-prompt"}, {"-cnv", "--conversation"}, {"-no-cnv", "--no-conversation"},
    {"-npp", "--npp"},           {"-ntg", "--ntg"},          {"-npl", "--npl"},
    {"-pps", "--pps"},           {"-tgs", "--tgs"},          {"-md", "--model-draft"},
    {"-td", "--threads-draft"},
};

bool is_flash_attn_value(std::string_view v) {
  return v == "on" || v == "off" || v == "auto" || v == "1" || v == "0";
}

// "-5" or "-0.5": a negative number (a positional value), not an option.
bool is_number(std::string_view a) {
  if (a.size() < 2) return false;
  double v = 0;
  const auto [p, ec] = std::from_chars(a.data(), a.data() + a.size(), v);
  return ec == std::errc() && p == a.data() + a.size();
}

}  // namespace

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  static char on[] = "on";
  std::vector<char*> args{argv[0]};
  bool value_next = false;  // argv[i] is the value of the option before it
  bool positional = false;  // after "--"
  for (int i = 1; i < argc; ++i) {
    const std::string_view typed = argv[i];
    if (positional || value_next || typed == "--" || typed.size() < 2 || typed[0] != '-' ||
        is_number(typed)) {
      // `-p -ctk` means the prompt "-ctk": a value is never rewritten.
      positional = positional || (!value_next && typed == "--");
      value_next = false;
      args.push_back(argv[i]);
      continue;
    }
    if (typed == "--version") {
      print_version();
      return 0;
    }
    char* entry = argv[i];
    for (const auto& [from, to] : kLlamaSpellings)
      if (typed == from) entry = const_cast<char*>(to);  // CLI11 only reads it
    const std::string_view e = entry;
    const std::string name(e.substr(0, e.find('=')));
    const bool short_opt = name[1] != '-';
    const CLI::Option* opt =
        short_opt && name.size() != 2 ? nullptr : app.get_option_no_throw(name);
    // CLI11 would read "-ngx" as "-n gx" and then complain about -n, or "--bogus" as an extra
    // argument: an option we do not know is named as typed, and nothing else is said.
    if (opt == nullptr)
      fail(ErrorKind::InvalidArgument, "unknown option '{}' (see {} --help)", typed,
           app.get_name());
    args.push_back(entry);
    if (name == "--flash-attn" && e.find('=') == std::string_view::npos &&
        (i + 1 >= argc || !is_flash_attn_value(argv[i + 1]))) {
      args.push_back(on);  // llama.cpp's older "-fa" flag: on
      continue;
    }
    // A flag (CLI11: expected 0 values) takes none; its type size is 1 all the same, so the
    // type size cannot tell (it once swallowed the next argument: `--mlock -md F`).
    value_next = e.find('=') == std::string_view::npos && opt->get_expected_max() != 0;
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& err) {
    if (err.get_exit_code() == 0) return app.exit(err);  // --help
    // CLI11's own report was its bare message, "Run with --help", and exit codes 104-114:
    // said like every other bad flag instead, with status 1 (as llama.cpp's tools).
    fmt::print(stderr, "{}: error: {} (see {} --help)\n", app.get_name(), err.what(),
               app.get_name());
    return 1;
  }
  return std::nullopt;
}

void add_text_options(CLI::App& app, TextOptions& o, bool with_keep) {
  app.add_flag("-e,--escape", o.escape,
               "process escapes (\\n, \\t, \\\\, \\\", \\xHH, ...) in the prompt, system prompt "
               "and reverse prompts");
  app.add_option("-r,--reverse-prompt", o.reverse_prompts,
                 "stop generating when the text ends with this string (repeatable)")
      ->allow_extra_args(false);
  if (with_keep)
    app.add_option("--keep", o.n_keep,
                   "prompt tokens kept when the context shifts (default 0; -1: the whole prompt)");
}

std::string process_escapes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '0':
        out += '\0';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '?':
        out += '?';
        break;
      case 'x': {
        unsigned v = 0;
        const char* b = s.data() + i + 1;
        const char* end = s.data() + std::min(s.size(), i + 3);
        const auto [p, ec] = std::from_chars(b, end, v, 16);
        if (ec == std::errc() && p == end && end - b == 2) {
          out += static_cast<char>(v);
          i += 2;
        } else {
          out += "\\x";  // not two hex digits: kept as written
        }
        break;
      }
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

const std::string* ends_with_reverse_prompt(const std::string& text, const TextOptions& o) {
  for (const std::string& r : o.reverse_prompts)
    if (!r.empty() && text.size() >= r.size() &&
        text.compare(text.size() - r.size(), r.size(), r) == 0)
      return &r;
  return nullptr;
}

void add_engine_options(CLI::App& app, EngineOptions& o, bool with_ctx) {
  app.add_option("-m,--model", o.model, "GGUF model file")->required();
  if (with_ctx)
    app.add_option(
        "-c,--ctx-size", o.n_ctx,
        "context size in tokens (default 4096, clamped to the model's training context)");
  app.add_option("-t,--threads", o.n_threads, "threads (default: number of cores)");
  app.add_option("-b,--batch-size", o.n_batch, "logical batch size (default 2048)");
  app.add_option("--ubatch-size,--ub", o.n_ubatch, "micro-batch size (default 512; also -ub)");
  app.add_option("--cache-type-k,--ctk", o.cache_type_k,
                 "KV cache type of K: f32, f16 or q8_0 (default f16, as llama.cpp; q8_0 needs "
                 "head_dim a multiple of 32; also -ctk)");
  app.add_option("--cache-type-v,--ctv", o.cache_type_v,
                 "KV cache type of V: f32, f16 or q8_0 (default f16, as llama.cpp; q8_0 needs "
                 "head_dim a multiple of 32; also -ctv)");
  app.add_option("--exec", o.exec, "execution mode: graph (planned memory) or eager")
      ->check(CLI::IsMember({"graph", "eager"}));
  app.add_option("--planner", o.planner, "graph-mode memory planner: size-class or arena")
      ->check(CLI::IsMember({"size-class", "arena"}));
  app.add_flag("--no-fuse-qkv", o.no_fuse_qkv, "disable the fused QKV projection");
  app.add_flag("--no-fuse-ffn", o.no_fuse_ffn, "disable the fused SwiGLU");
  app.add_flag("--no-fuse-gate-up", o.no_fuse_gate_up,
               "separate FFN gate and up matmuls (default: one matmul over [W_gate | W_up])");
  app.add_flag("--no-repack", o.no_repack,
               "graph mode: keep the GGUF weight layout (no load-time repack into the kernels' "
               "panels)");
  app.add_flag("--mem-report", o.mem_report, "print memory use and heap allocations at the end");
  app.add_option("--kv-block", o.kv_block, "tokens per KV cache block (default 16)");
  app.add_flag("--kv-overcommit", o.kv_overcommit,
               "start even if weights + KV at full use + compute exceed the available memory "
               "(the KV cache is committed a block at a time as tokens arrive)");
  app.add_option("--device", o.device,
                 "none | sim: with sim, graph mode runs the first -ngl layers (weights, ops, K/V) "
                 "on the simulated queued device and the rest on the CPU (same logits)")
      ->check(CLI::IsMember({"none", "sim"}));
  app.add_option("--n-gpu-layers,--ngl", o.n_gpu_layers,
                 "layers on the device with --device sim (more than the model has: the output "
                 "head too); without --device accepted for llama.cpp habits (also -ngl): every "
                 "layer runs on the CPU");
  app.add_option("--flash-attn,--fa", o.flash_attn,
                 "on|off|auto, accepted for llama.cpp habits (also -fa): attention is always "
                 "the tiled online-softmax kernel")
      ->check(CLI::IsMember({"on", "off", "auto", "1", "0"}));
  app.add_flag("--no-mmap", o.no_mmap,
               "read the whole model into memory instead of mapping the file");
  app.add_flag("--mlock", o.mlock, "lock the model's bytes in RAM (never paged out)");
}

namespace {

// One line per llama.cpp flag that changes nothing here, so a habit never goes unnoticed.
void print_habit_notes(const EngineOptions& o) {
  if (o.n_gpu_layers >= 0 && o.device == "none")
    fmt::print(stderr,
               "minfer: note: -ngl {}: this build runs on the CPU; every layer runs there\n",
               o.n_gpu_layers);
  if (!o.flash_attn.empty())
    fmt::print(stderr,
               "minfer: note: -fa {}: attention always runs as minfer's tiled online-softmax CPU "
               "kernel (flash-attention style; no [tokens x context] matrix)\n",
               o.flash_attn);
}

// On a terminal: "loading 1.20/4.00 GiB" (the file read or paged in), then "repacking ..."
// (the load-time weight repack), redrawn in place as each goes.
void print_progress(const char* what, uint64_t done, uint64_t total) {
  const bool gib = total >= (1ull << 30);
  const double unit = gib ? double(1ull << 30) : double(1ull << 20);
  fmt::print(stderr, "\rminfer: {} {:.2f}/{:.2f} {}", what, done / unit, total / unit,
             gib ? "GiB" : "MiB");
  if (done == total) fmt::print(stderr, "\n");
}

void print_load_progress(uint64_t done, uint64_t total, void*) {
  print_progress("loading", done, total);
}

}  // namespace

void check_ram_guard(const Model& model, uint64_t kv_bytes, uint64_t compute_bytes,
                     uint64_t extra_weights, bool overcommit, bool log) {
  kv::RamNeed need;
  need.weights = model.weights().total_bytes() + extra_weights;
  need.kv = kv_bytes;
  need.compute = compute_bytes;
  // Head room for the tokenizer, thread stacks, the sampler and the allocator's slack.
  need.margin = 64ull << 20;
  uint64_t avail = kv::available_memory_bytes();
  // MINFER_MEMORY_LIMIT (bytes) lowers the figure: a budget for this process below what the
  // machine reports (a shared host), and how the tests exercise the guard.
  if (const char* lim = std::getenv("MINFER_MEMORY_LIMIT")) {
    const uint64_t l = std::strtoull(lim, nullptr, 10);
    if (l > 0 && (avail == 0 || l < avail)) avail = l;
  }
  const uint64_t total = need.weights + need.kv + need.compute + need.margin;
  if (overcommit && avail > 0 && total > avail && log)
    fmt::print(stderr,
               "minfer: --kv-overcommit: {} needed at full use, {} available; going ahead (KV "
               "blocks are committed as tokens arrive)\n",
               human_bytes(total), human_bytes(avail));
  kv::check_ram(need, avail, overcommit);
}

void add_sampling_options(CLI::App& app, SamplerParams& sp) {
  app.add_option("--temp", sp.temperature, "temperature (default 0.8; <= 0: greedy)");
  app.add_option("--top-k", sp.top_k, "top-k (default 40; <= 0: off)");
  app.add_option("--top-p", sp.top_p, "top-p (default 0.95; 1: off)");
  app.add_option("--min-p", sp.min_p, "min-p (default 0.05; 0: off)");
  app.add_option("--repeat-penalty", sp.repeat_penalty, "repetition penalty (default 1.0: off)");
  app.add_option("--repeat-last-n", sp.repeat_last_n, "tokens the penalty looks back (default 64)");
  add_seed_option(app, sp.seed, "RNG seed (default -1: random, printed)");
}

void add_seed_option(CLI::App& app, uint32_t& seed, const std::string& help) {
  // llama.cpp's -s -1 (LLAMA_DEFAULT_SEED) means "random"; CLI11 refused it for an unsigned
  // option ("Could not convert: --seed = -1").
  app.add_option_function<std::string>(
         "-s,--seed",
         [&seed](const std::string& text) {
           int64_t v = 0;
           const char* end = text.data() + text.size();
           const auto [ptr, ec] = std::from_chars(text.data(), end, v);
           if (ec != std::errc() || ptr != end)
             fail(ErrorKind::InvalidArgument, "-s '{}' is not an integer", text);
           if (v < -1 || v > int64_t{std::numeric_limits<uint32_t>::max()})
             fail(ErrorKind::InvalidArgument, "-s {} must be in [-1, {}] (-1: random)", v,
                  std::numeric_limits<uint32_t>::max());
           seed = v == -1 ? kRandomSeed : static_cast<uint32_t>(v);
         },
         help)
      ->type_name("INT");
}

void resolve_sampling_options(SamplerParams& sp) {
  // The CLI's meanings (llama.cpp's): --temp 0 is greedy, --top-k 0 is off, --repeat-last-n -1
  // is the whole context (clamped once the context is known, clamp_to_context). Other negative
  // values meant nothing and were taken silently; they are refused.
  if (sp.temperature < 0.0f)
    fail(ErrorKind::InvalidArgument, "--temp {} must be >= 0 (0: greedy)", sp.temperature);
  if (sp.top_k < 0) fail(ErrorKind::InvalidArgument, "--top-k {} must be >= 0 (0: off)", sp.top_k);
  if (sp.repeat_last_n < -1)
    fail(ErrorKind::InvalidArgument,
         "--repeat-last-n {} must be >= -1 (-1: the whole context, 0: off)", sp.repeat_last_n);
  if (sp.repeat_last_n == -1) sp.repeat_last_n = std::numeric_limits<int32_t>::max();
  sp.validate();
  if (sp.seed == kRandomSeed) sp.seed = resolve_seed(sp.seed);
}

void print_seed(const SamplerParams& sp) {
  fmt::print(stderr, "minfer: seed = {}\n", sp.seed);
}

void add_n_predict_option(CLI::App& app, int64_t& n_predict, const std::string& help) {
  // Parsed here rather than by CLI11, which saturates "-n 1e30" / "-n 10^30"-sized numbers to
  // INT64_MAX without a word: a number that does not fit is an error naming the value.
  app.add_option_function<std::string>(
         "-n,--n-predict",
         [&n_predict](const std::string& text) {
           int64_t v = 0;
           const char* end = text.data() + text.size();
           const auto [ptr, ec] = std::from_chars(text.data(), end, v);
           if (ec == std::errc::result_out_of_range)
             fail(ErrorKind::InvalidArgument, "-n {}: out of range (at most {}; -1: no limit)",
                  text, std::numeric_limits<int64_t>::max());
           if (ec != std::errc() || ptr != end)
             fail(ErrorKind::InvalidArgument, "-n '{}' is not an integer", text);
           if (v < -1)
             fail(ErrorKind::InvalidArgument,
                  "-n {} must be >= -1 (-1: until end of generation or a full context)", v);
           n_predict = v;
         },
         help)
      ->type_name("INT");
}

void clamp_to_context(SamplerParams& sp, int64_t n_ctx) {
  // The penalty never looks further back than the context, and the sampler sizes its history
  // ring by repeat_last_n: 10^9 would be 4 GB for nothing.
  sp.repeat_last_n = static_cast<int32_t>(std::min<int64_t>(sp.repeat_last_n, n_ctx));
}

nlohmann::ordered_json parse_template_kwargs(std::string_view text) {
  const auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    fail(ErrorKind::InvalidArgument, "--chat-template-kwargs '{}' is not valid JSON", text);
  if (!j.is_object())
    fail(ErrorKind::InvalidArgument, "--chat-template-kwargs '{}' must be a JSON object", text);
  return j;
}

std::string read_text_file(const std::string& path, std::string_view what) {
  // O_NONBLOCK: opening a FIFO without a writer would block; fstat then refuses it anyway.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, "cannot open {} '{}': {}", what, path, std::strerror(errno));
  struct stat st {};
  std::string text;
  try {
    if (fstat(fd, &st) != 0)
      fail(ErrorKind::Io, "cannot stat {} '{}': {}", what, path, std::strerror(errno));
    // /dev/zero, a FIFO or a terminal would be read forever (or block); a directory reads as
    // nothing (an empty template rendered "successfully"): only regular files.
    if (!S_ISREG(st.st_mode))
      fail(ErrorKind::InvalidArgument, "{} '{}' is not a regular file", what, path);
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size > kMaxPromptFileBytes)
      fail(ErrorKind::InvalidArgument,
           "{} '{}' is {} bytes; the limit is {} bytes (no context holds more)", what, path, size,
           kMaxPromptFileBytes);
    text.resize(size);
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(ErrorKind::Io, "cannot read {} '{}': {}", what, path, std::strerror(errno));
      if (n == 0) break;  // the file shrank meanwhile: take what is there
      got += static_cast<size_t>(n);
    }
    text.resize(got);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

std::string read_prompt_file(const std::string& path) {
  return read_text_file(path, "prompt file");
}

void print_version() {
  fmt::print("minfer {} (commit {}), SIMD {} in use, CPU backend\n", kVersion, kCommit,
             cpu::simd_level_name());
}

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int max_threads() {
  return kMaxThreadsPerCore * default_threads();
}

void check_threads(int n_threads) {
  if (n_threads < 0) fail(ErrorKind::InvalidArgument, "-t {} must be >= 0", n_threads);
  if (n_threads > max_threads())
    fail(ErrorKind::InvalidArgument,
         "-t {} is more than {}x the {} hardware threads of this machine (at most {}); more "
         "threads than cores only slow the kernels down",
         n_threads, kMaxThreadsPerCore, default_threads(), max_threads());
}

void check_kv_fits_ram(uint64_t kv_bytes, int64_t n_ctx) {
  // Checked before the model's tensors are touched: a KV cache larger than the whole machine
  // cannot be meant (the RAM guard, check_ram_guard, then weighs everything against what is
  // available now). Skipped with --kv-overcommit, whose point is a pool larger than what a run
  // will commit.
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;  // unknown: nothing to compare with
  const uint64_t ram = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  if (kv_bytes > ram)
    fail(ErrorKind::OutOfMemory,
         "a context of {} tokens needs a KV cache of {} ({} bytes) but this machine has {} of "
         "RAM; lower -c (or use -ctk/-ctv q8_0)",
         n_ctx, human_bytes(kv_bytes), kv_bytes, human_bytes(ram));
}

std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB", b / double(1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.2f} KiB", b / double(1ull << 10));
  return fmt::format("{} B", b);
}

KvTypes kv_types(const EngineOptions& o) {
  return {parse_kv_cache_type("--cache-type-k", o.cache_type_k),
          parse_kv_cache_type("--cache-type-v", o.cache_type_v)};
}

namespace {

void log_loaded(const LoadedEngine& le, const EngineOptions& o, int64_t n_ctx, int threads,
                FusionToggles fusion, KvTypes kv, uint64_t kv_bytes) {
  const ModelWeights& w = le.model->weights();
  const HParams& hp = le.model->hparams();
  // A logical batch never holds more than the context (llama.cpp clamps n_batch the same way).
  const int32_t n_batch = static_cast<int32_t>(std::min<int64_t>(o.n_batch, n_ctx));
  // general.name first: a random-weight model (minfer gen) says so there.
  const std::string name = le.model->file().get_string_or("general.name", "");
  fmt::print(stderr, "minfer: model {}{}\n", o.model,
             name.empty() ? std::string() : fmt::format(" ({})", name));
  fmt::print(stderr, "minfer: weights {}{}\n",
             o.no_mmap ? "read into memory (--no-mmap)" : "mapped from the file",
             o.mlock && le.model->file().lock_error().empty() ? ", locked in RAM (--mlock)" : "");
  fmt::print(stderr, "minfer: {} | {} params | {} weights | vocab {}{}\n",
             le.model->type_description(), w.n_params(), human_bytes(w.total_bytes()), hp.n_vocab,
             w.tied_output ? " | tied embeddings" : "");
  fmt::print(stderr, "minfer: {}\n", hp.describe());
  fmt::print(stderr,
             "minfer: exec {} | n_ctx {} | n_batch {} | n_ubatch {} | threads {} | fuse qkv {} "
             "ffn {} gate-up {}\n",
             le.engine->name(), n_ctx, n_batch, std::min(o.n_ubatch, n_batch), threads,
             fusion.qkv ? "on" : "off", fusion.ffn ? "on" : "off", fusion.gate_up ? "on" : "off");
  fmt::print(stderr, "minfer: KV cache type K {} V {} | {} ({} bytes) for {} tokens\n",
             type_name(kv.k), type_name(kv.v), human_bytes(kv_bytes), kv_bytes, n_ctx);
  if (o.device != "none")
    fmt::print(stderr, "minfer: device {} | -ngl {} of {} layers{}\n", o.device,
               std::max(o.n_gpu_layers, 0), hp.n_layer,
               o.n_gpu_layers > hp.n_layer ? " and the output head" : "");
}

using EngineMaker = std::function<std::unique_ptr<Engine>(Model&)>;

// What open_engine decided from the flags and the file, for the engine makers below.
struct EnginePlan {
  int64_t n_ctx = 0;      // tokens the KV cache holds in all
  int64_t n_ctx_seq = 0;  // tokens one sequence may hold
  int threads = 1;
  FusionToggles fusion;
  KvTypes kv;
  uint64_t kv_bytes = 0;
  bool repack = false;        // load-time weight panels
  bool tty_progress = false;  // draw the repack's progress on stderr
};

// The engine a plan describes: its RAM guard runs now (before any port opens), the returned
// maker later, in build_engine. Eager: one sequence over its own contiguous KV cache.
EngineMaker eager_maker(const EngineOptions& o, const Model& model, const EnginePlan& e, bool log) {
  // Eager mode allocates its whole contiguous KV cache up front: no overcommit possible.
  check_ram_guard(model, e.kv_bytes, 0, 0, o.kv_overcommit, log);
  if (o.planner != "size-class" && o.planner != "arena")
    fail(ErrorKind::InvalidArgument, "--planner '{}' unknown", o.planner);
  eager::EagerParams ep;
  ep.n_ctx = e.n_ctx;
  ep.n_threads = e.threads;
  ep.n_ubatch = std::min(o.n_ubatch, o.n_batch);
  ep.fusion = e.fusion;
  ep.kv_type = e.kv.k;
  return [ep](Model& m) -> std::unique_ptr<Engine> {
    if (ep.fusion.qkv) m.prepare_fused_qkv();
    if (ep.fusion.gate_up) m.prepare_fused_ffn();
    // Eager packs nothing: the fused weights are copied raw (replacing the parts).
    m.make_fused_readable(nullptr, cpu::SimdLevel::kBest);
    return std::make_unique<eager::EagerSession>(m, ep);
  };
}

// Graph mode: a Session over the paged KV cache (and, with --device sim, a simulated device).
EngineMaker graph_maker(const EngineOptions& o, const Model& model, const EnginePlan& e, bool log) {
  SessionParams sp;
  sp.n_ctx = e.n_ctx;
  sp.n_seq_max = o.n_seq_max;
  sp.n_ctx_seq = e.n_ctx_seq;
  sp.n_batch = o.n_batch;
  sp.n_ubatch = o.n_ubatch;
  sp.n_threads = e.threads;
  sp.fusion = e.fusion;
  sp.repack_weights = e.repack;
  if (e.tty_progress)
    sp.repack_progress = [](uint64_t done, uint64_t total) {
      print_progress("repacking", done, total);
    };
  sp.type_k = e.kv.k;
  sp.type_v = e.kv.v;
  sp.planner = o.planner == "arena" ? PlannerKind::Arena : PlannerKind::SizeClass;
  sp.kv_block_size = o.kv_block;
  sp.prefix_cache = o.prefix_cache;
  sp.embeddings = o.embeddings;
  if (o.device == "sim") {
    sp.device = BackendKind::Sim;
    sp.n_gpu_layers = std::max(o.n_gpu_layers, 0);
  } else if (o.device != "none") {
    fail(ErrorKind::InvalidArgument, "--device '{}' unknown (none or sim)", o.device);
  }
  const SessionFootprint f = session_footprint(model, sp);
  check_ram_guard(model, f.kv, f.compute, f.fused_weights, o.kv_overcommit, log);
  return [sp](Model& m) -> std::unique_ptr<Engine> { return std::make_unique<Session>(m, sp); };
}

}  // namespace

LoadedEngine open_engine(const EngineOptions& o, bool log) {
  if (o.n_ctx < 0) fail(ErrorKind::InvalidArgument, "-c {} must be >= 0", o.n_ctx);
  check_threads(o.n_threads);
  if (o.n_batch <= 0) fail(ErrorKind::InvalidArgument, "-b {} must be > 0", o.n_batch);
  if (o.n_ubatch <= 0) fail(ErrorKind::InvalidArgument, "-ub {} must be > 0", o.n_ubatch);
  const KvTypes kv = kv_types(o);
  if (o.exec == "eager" && kv.k != kv.v) {
    fail(ErrorKind::InvalidArgument,
         "--exec eager keeps K and V in one type: --cache-type-k {} and --cache-type-v {} must "
         "match",
         o.cache_type_k, o.cache_type_v);
  }
  const auto t0 = std::chrono::steady_clock::now();
  LoadedEngine le;
  const bool tty_progress = log && isatty(STDERR_FILENO);
  // One layout for every graph-mode engine: the load-time packed panels serve prefill, batched
  // decode (each weight byte read once per step for all sequences) and, through their own
  // prefetching decode kernel, one-column decode at least as fast as the GEMV on the GGUF layout
  // (docs/BENCHMARKS.md, "Decode over the packed panels"); the originals' pages are released.
  // A one-sequence engine repacks only where every layout has that decode kernel (the AVX-512
  // VNNI and AVX2 tables do; NEON has no load-time layouts).
  const bool repack =
      o.exec != "eager" && !o.no_repack &&
      (o.n_seq_max > 1 || cpu::PackedWeights::decodes_packed(cpu::SimdLevel::kBest));
  gguf::OpenParams open;
  open.mmap = !o.no_mmap;
  open.mlock = o.mlock;
  // Page the file in now, in order, unless the repack pass is about to read it and release
  // each matrix's pages as it goes (prefetching would hold the whole file at the peak).
  open.prefetch = !repack;
  if (tty_progress) open.progress = print_load_progress;
  le.model = Model::load(o.model, open);
  if (log) print_habit_notes(o);
  if (!le.model->file().lock_error().empty())
    fmt::print(stderr, "minfer: warning: --mlock: {}; going on unlocked\n",
               le.model->file().lock_error());
  le.tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_gguf(le.model->file()));
  const HParams& hp = le.model->hparams();
  // Before any region is sized: q8_0 needs whole 32-value blocks per head.
  check_kv_cache_type_fits("--cache-type-k", kv.k, hp.head_dim, hp.n_kv_embd());
  check_kv_cache_type_fits("--cache-type-v", kv.v, hp.head_dim, hp.n_kv_embd());
  const int64_t want = o.n_ctx > 0 ? o.n_ctx : 4096;
  const int64_t n_ctx_seq = std::min<int64_t>(want, hp.n_ctx_train);
  const int64_t n_ctx = o.n_seq_max > 1 ? want : n_ctx_seq;  // the KV pool
  if (o.n_ctx > hp.n_ctx_train && log)
    fmt::print(stderr, "minfer: -c {} exceeds the training context; {} {}\n", o.n_ctx,
               o.n_seq_max > 1 ? "one sequence holds at most" : "using", n_ctx_seq);
  if (o.n_seq_max < 1) fail(ErrorKind::InvalidArgument, "-np {} must be >= 1", o.n_seq_max);
  if (o.device != "none" && o.exec == "eager")
    fail(ErrorKind::InvalidArgument, "--device {} needs --exec graph", o.device);
  if (o.embeddings && o.exec == "eager")
    fail(ErrorKind::InvalidArgument, "embeddings need --exec graph (the eager engine returns "
         "logits only)");
  if (o.n_seq_max > 1 && o.exec == "eager")
    fail(ErrorKind::InvalidArgument, "--exec eager runs one sequence: -np {} needs --exec graph",
         o.n_seq_max);
  const int threads = o.n_threads > 0 ? o.n_threads : default_threads();
  const uint64_t kv_bytes = kv_cache_bytes(hp.n_layer, hp.n_kv_embd(), n_ctx, kv.k, kv.v);
  if (!o.kv_overcommit) check_kv_fits_ram(kv_bytes, n_ctx);
  FusionToggles fusion{!o.no_fuse_qkv, !o.no_fuse_ffn, !o.no_fuse_gate_up};

  const EnginePlan plan{n_ctx, n_ctx_seq, threads, fusion, kv, kv_bytes, repack, tty_progress};
  const EngineMaker make = o.exec == "eager" ? eager_maker(o, *le.model, plan, log)
                                             : graph_maker(o, *le.model, plan, log);
  // What build_engine does next: the engine, then (with log) what was loaded.
  le.finish = [make, log, o, n_ctx, threads, fusion, kv, kv_bytes, t0](LoadedEngine& l) {
    l.engine = make(*l.model);
    l.load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (log) log_loaded(l, o, n_ctx, threads, fusion, kv, kv_bytes);
  };
  return le;
}

void build_engine(LoadedEngine& le) {
  MINFER_ASSERT(le.model && le.finish && !le.engine, "build_engine needs open_engine's result");
  auto finish = std::move(le.finish);
  le.finish = nullptr;
  finish(le);
}

LoadedEngine load_engine(const EngineOptions& o, bool log) {
  LoadedEngine le = open_engine(o, log);
  build_engine(le);
  return le;
}

void print_memory(const Engine& e, FILE* out, bool with_kv) {
  const MemReport r = e.mem_report();
  if (with_kv)
    fmt::print(out, "minfer: KV cache {} ({} bytes; K {}, V {}), compute buffers {} ({} bytes)\n",
               human_bytes(r.kv_bytes), r.kv_bytes, type_name(r.kv_type_k), type_name(r.kv_type_v),
               human_bytes(r.compute_bytes), r.compute_bytes);
  else
    fmt::print(out, "minfer: compute buffers {} ({} bytes)\n", human_bytes(r.compute_bytes),
               r.compute_bytes);
  if (!with_kv) return;  // the detail repeats the KV cache (--mem-report prints it at the end)
  if (!r.detail.empty()) fmt::print(out, "minfer: {}\n", r.detail);
}

std::span<const float> prefill(Engine& e, std::span<const int32_t> tokens, int64_t start,
                               int32_t n_batch, const volatile std::sig_atomic_t* stop) {
  MINFER_ASSERT(!tokens.empty() && n_batch > 0, "prefill needs tokens and n_batch > 0");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const bool progress = n > n_batch && isatty(STDERR_FILENO);
  std::span<const float> logits;
  for (int64_t b = 0; b < n; b += n_batch) {
    if (stop != nullptr && *stop) return {};
    if (progress) fmt::print(stderr, "\rminfer: prompt {}/{} tokens", b, n);
    const int64_t end = std::min<int64_t>(n, b + n_batch);
    const std::span<const int32_t> chunk =
        tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(end - b));
    // Only the last batch asks for logits: the earlier ones just fill the KV cache.
    if (end == n) {
      logits = e.eval_last(chunk, start + b);
    } else {
      e.eval(chunk, start + b, {});
    }
  }
  if (progress) fmt::print(stderr, "\rminfer: prompt {}/{} tokens\n", n, n);
  return logits;
}

void shift_context(Engine& e, std::vector<int32_t>& hist, int64_t n_keep, int64_t n_discard,
                   int32_t n_batch) {
  const auto n = static_cast<int64_t>(hist.size());
  MINFER_ASSERT(n_keep >= 0 && n_discard > 0 && n_keep + n_discard <= n,
                "context shift out of range");
  hist.erase(hist.begin() + n_keep, hist.begin() + n_keep + n_discard);
  if (auto* seq = dynamic_cast<SeqEngine*>(&e)) {
    seq->seq_shift(0, n_keep, n_discard);
    return;
  }
  // A contiguous cache (eager): overwrite from n_keep on with the tokens that stay.
  if (n_keep < static_cast<int64_t>(hist.size()))
    prefill(e, std::span<const int32_t>(hist).subspan(static_cast<size_t>(n_keep)), n_keep,
            n_batch);
}

void print_timing(FILE* out, const char* label, double ms, int64_t n, const char* unit) {
  const double per = n > 0 ? ms / double(n) : 0.0;
  const double tps = ms > 0 ? 1e3 * double(n) / ms : 0.0;
  fmt::print(
      out, "{:>16} = {:10.2f} ms / {:5} {:<6} ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
      label, ms, n, unit, per, tps);
}

}  // namespace minfer::app
