// Shared by `minfer run`, `minfer chat` and `minfer bench`: the engine and sampling flags,
// parsing a command line, loading a model with its tokenizer, building the chosen engine (graph
// Session or eager), prefilling a prompt in logical batches, and llama.cpp-style timing lines.
//
// Ownership: LoadedEngine owns the model, tokenizer and engine (engine destroyed first). The
// option structs are plain values; CLI11 keeps pointers into them until parsing is done, so they
// must outlive the CLI::App they were added to.
// Thread safety: none needed (one CLI command per process).
// Failure: bad flag values and unloadable files throw minfer::Error; main prints them.
// Cost: load_engine maps the file and, with fused QKV, copies the Q/K/V weights once; the rest is
// flag handling.
#pragma once

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "model/engine.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer::app {

struct EngineOptions {
  std::string model;
  int64_t n_ctx = 0;  // 0: 4096 clamped to the training context
  // Sequences (minfer serve -np). Above 1, -c is the KV pool they share (not clamped) and each
  // sequence holds at most min(-c, training context) tokens; graph mode only.
  int32_t n_seq_max = 1;
  int n_threads = 0;  // 0: number of cores
  int32_t n_batch = 2048;
  int32_t n_ubatch = 512;
  std::string exec = "graph";        // graph | eager
  std::string planner = "arena";     // arena | size-class
  std::string cache_type_k = "f16";  // --cache-type-k / -ctk: f32 | f16 (case-insensitive)
  std::string cache_type_v = "f16";  // --cache-type-v / -ctv
  bool no_fuse_qkv = false;
  bool no_fuse_ffn = false;
  bool no_fuse_gate_up = false;
  bool no_repack = false;  // --no-repack: read weights in the GGUF layout (no load-time packing)
  bool mem_report = false;
  int32_t kv_block = 16;       // --kv-block: tokens per KV cache block (graph mode)
  bool kv_overcommit = false;  // --kv-overcommit: start even when the RAM guard says no
  bool prefix_cache = true;    // graph mode: keep full KV blocks for reuse (batched-bench: off)
  // --device sim: graph mode runs the first -ngl layers on the simulated queued device
  // (backend/sim) and the rest on the CPU (SessionParams::device); none: CPU only.
  std::string device = "none";
  // llama.cpp habits. -ngl and -fa are accepted with a one-line note (without --device: CPU
  // only; attention is always the tiled online-softmax kernel); --no-mmap and --mlock change
  // how the file is held.
  int32_t n_gpu_layers = -1;  // -1: not given
  std::string flash_attn;     // empty: not given; else on | off | auto
  bool no_mmap = false;       // read the whole file into memory instead of mapping it
  bool mlock = false;         // lock the model's bytes in RAM
  // `minfer embed`, `serve --embeddings`: the Session outputs final-norm hidden states
  // (SessionParams::embeddings); graph mode only.
  bool embeddings = false;
};

// Text flags of run and chat (llama-cli's): -e processes escapes in -p / -sys / -r, -r stops
// generation at a string, --keep keeps the first N prompt tokens when the context shifts.
struct TextOptions {
  bool escape = false;
  std::vector<std::string> reverse_prompts;
  int64_t n_keep = 0;  // run: prompt tokens kept at a context shift (-1: the whole prompt)
};
void add_text_options(CLI::App& app, TextOptions& o, bool with_keep);

// -e: "\n", "\t", "\r", "\\", "\'", "\"", "\a", "\b", "\f", "\v", "\0" and "\xHH"
// become the characters they name; any other backslash stays as written (llama.cpp's rule).
std::string process_escapes(std::string_view s);

// The reverse prompt (-r) `text` ends with, or nullptr. Cost: one comparison per stop string.
const std::string* ends_with_reverse_prompt(const std::string& text, const TextOptions& o);

// Adds -m, -c, -t, -b, -ub, -ctk, -ctv, --exec, --planner, --no-fuse-qkv, --no-fuse-ffn,
// --no-repack, --mem-report, --kv-block, --kv-overcommit, -ngl, -fa, --no-mmap, --mlock.
void add_engine_options(CLI::App& app, EngineOptions& o, bool with_ctx = true);

// Adds the sampler flags of run and chat: --temp, --top-k, --top-p, --min-p, --repeat-penalty,
// --repeat-last-n, -s/--seed (defaults: SamplerParams's, llama.cpp's).
void add_sampling_options(CLI::App& app, SamplerParams& sp);

// After parsing: validates the sampler flags (Error(InvalidArgument)) and replaces a random seed
// by a resolved one, so that any run can be repeated with --seed. The seed is printed to stderr
// by print_seed, once the model has loaded (a missing file says so first).
void resolve_sampling_options(SamplerParams& sp);
void print_seed(const SamplerParams& sp);

// -s/--seed into seed: 0..2^32-1, or -1 for a random seed (kRandomSeed, as llama.cpp); anything
// else throws Error(InvalidArgument) during parsing.
void add_seed_option(CLI::App& app, uint32_t& seed, const std::string& help);

// -n/--n-predict into n_predict: an integer >= -1 (-1: no limit); anything else (other
// negatives, non-numbers, numbers past int64) throws Error(InvalidArgument) during parsing.
void add_n_predict_option(CLI::App& app, int64_t& n_predict, const std::string& help);

// After the engine is built: --repeat-last-n never looks past the context (the sampler sizes its
// history by it; -1, "the whole context", arrives here as INT32_MAX).
void clamp_to_context(SamplerParams& sp, int64_t n_ctx);

// A text file a flag names (-f, --chat-template-file, --context, --api-key-file, ...): the
// whole file. Only regular files up to kMaxPromptFileBytes (a directory, a FIFO, a device such
// as /dev/zero or a larger file throw Error(InvalidArgument) naming `what` and the path; the
// open never blocks). Cost: one read of the file.
constexpr uint64_t kMaxPromptFileBytes = uint64_t{1} << 30;  // 1 GiB: far beyond any context
std::string read_text_file(const std::string& path, std::string_view what);
std::string read_prompt_file(const std::string& path);  // read_text_file(path, "prompt file")

// --chat-template-kwargs JSON: extra chat template variables, a JSON object (e.g.
// '{"enable_thinking": false}'). Text that is not JSON, or JSON that is not an object, throws
// Error(InvalidArgument) naming the flag and the value.
nlohmann::ordered_json parse_template_kwargs(std::string_view text);

// Parses argv with `app` after normalizing llama.cpp's spellings, only in flag position (an
// entry that is the value of the option before it, e.g. `-p -ctk`, and anything after "--"
// stay as they are): "-ub", "-ctk", "-ctv", "-np", "-ngl", "-fa", "-sys", "-cnv", "-no-cnv",
// "-npp", "-ntg", "-npl", "-pps", "-tgs", "-md", "-td" become their long forms (CLI11 has no
// multi-letter single-dash options: it would read "-ngl" as "-n gl"); "-fa" without on|off|auto
// means "on".
// "--version" anywhere in flag position prints the version line and ends the command (0).
// An option `app` does not know throws Error(InvalidArgument) "unknown option 'X'" naming it as
// typed. Returns the exit status when parsing ends the command (--help, --version: 0; a CLI11
// parse error such as a missing value or "Could not convert": 1, printed as
// "minfer CMD: error: ... (see minfer CMD --help)"), std::nullopt to go on.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

int default_threads();
// -t above kMaxThreadsPerCore x the hardware threads is refused (Error(InvalidArgument) with
// the figures): each thread is an OS thread with its own stack, and oversubscription only slows
// the kernels.
constexpr int kMaxThreadsPerCore = 4;
int max_threads();
void check_threads(int n_threads);  // throws unless 0 <= n_threads <= max_threads()

// Throws Error(OutOfMemory) naming the context, the KV bytes and the RAM when the KV cache
// alone exceeds the machine's physical memory (a stand-in for the general RAM guard).
void check_kv_fits_ram(uint64_t kv_bytes, int64_t n_ctx);

// The RAM guard: before a KV cache or compute buffer exists, weigh the model's weights, the KV
// cache at full use, the compute arena and a margin against the memory this process may use
// (kv::available_memory_bytes). Throws Error(OutOfMemory) naming every term in MiB, unless
// `overcommit` (then says on stderr that it goes ahead: lazily committed KV is safe until the
// blocks are really used, and running out of blocks is a per-sequence error). `kv_bytes` and
// `compute_bytes` are the engine's own figures (session_footprint for graph mode).
void check_ram_guard(const Model& model, uint64_t kv_bytes, uint64_t compute_bytes,
                     uint64_t extra_weights, bool overcommit, bool log);

struct LoadedEngine {
  std::unique_ptr<Model> model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  double load_ms = 0;
  // Set by open_engine, consumed by build_engine: builds the engine open_engine sized and
  // guarded, then (with log) prints what was loaded.
  std::function<void(LoadedEngine&)> finish;
  std::unique_ptr<Engine> engine;  // declared last: destroyed first (it borrows the model)
};

// The KV types of the options, parsed (both checked even when one is unused). A bad
// --cache-type-k/-v value throws Error(InvalidArgument) naming the flag and the value.
struct KvTypes {
  GgmlType k = GgmlType::F16;
  GgmlType v = GgmlType::F16;
};
KvTypes kv_types(const EngineOptions& o);

// Loads the model and tokenizer and builds the engine; with `log` prints what was loaded
// (model, arch, type, sizes, context, threads, KV cache types and bytes) to stderr. Compute
// bytes are known only after the first eval: print_memory() prints them. On a terminal, a
// --no-mmap read shows its progress.
// = open_engine, then build_engine.
LoadedEngine load_engine(const EngineOptions& o, bool log);

// The two halves of load_engine. open_engine does everything that can refuse the options: flag
// values, mapping and checking the file, the tokenizer, the KV type checks and the RAM guard
// (check_ram_guard); it returns the model and tokenizer with no engine yet. Cost: mapping the
// file and sizing the graph (milliseconds). build_engine then builds the engine (the fused
// weight copies, the KV region, the graphs: the slow part) and may still throw (e.g. mmap
// failure). `minfer serve` runs open_engine before it binds its port, so a model that cannot
// fit never opens one, and build_engine while /health answers 503.
LoadedEngine open_engine(const EngineOptions& o, bool log);
void build_engine(LoadedEngine& le);  // once, on open_engine's result
// The KV cache and compute buffer line and the engine's detail line (with_kv false: the compute
// buffers only, for after the prefill, when load_engine already printed the KV line).
void print_memory(const Engine& e, FILE* out, bool with_kv = true);

// Evaluates `tokens` at positions start, start + 1, ... in logical batches of at most n_batch
// (the Engine contract: callers feed at most -b tokens per eval) and returns the logits of the
// last token, valid until the next eval. `tokens` must not be empty. With more than one batch
// and stderr a terminal, a progress line ("prompt 2048/8192 tokens") is redrawn per batch.
// `stop` (may be null) is read between batches: when set, the prefill ends early and returns an
// empty span (chat's Ctrl-C).
std::span<const float> prefill(Engine& e, std::span<const int32_t> tokens, int64_t start,
                               int32_t n_batch, const volatile std::sig_atomic_t* stop = nullptr);

// The context shift of run and chat (llama.cpp's): drops tokens [n_keep, n_keep + n_discard)
// of the cached sequence and moves the rest down; `hist` (the cached tokens) is updated to
// match. The graph Session shifts its paged cache in place (SeqEngine::seq_shift: K re-rotated,
// nothing re-evaluated); another engine re-evaluates the kept tail. Needs 0 <= n_keep and
// n_discard > 0 within hist.
void shift_context(Engine& e, std::vector<int32_t>& hist, int64_t n_keep, int64_t n_discard,
                   int32_t n_batch);

// llama.cpp's perf line: "<label> = X ms / N <unit> (Y ms per token, Z tokens per second)".
void print_timing(FILE* out, const char* label, double ms, int64_t n, const char* unit);

std::string human_bytes(uint64_t b);

}  // namespace minfer::app
