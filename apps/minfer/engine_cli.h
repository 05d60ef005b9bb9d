// Shared by `minfer run`, `minfer chat` and `minfer bench`: the engine and sampling flags,
// parsing a command line, loading a model with its tokenizer, building the chosen engine (graph
// Session or eager), prefilling a prompt in logical batches, and llama.cpp-style timing lines.
//
// Ownership: LoadedEngine owns the model, tokenizer and engine (engine destroyed first). The
// option structs are plain values; CLI11 keeps pointers into them until parsing is done, so they
// must outlive the CLI::App they were added to.
// Thread safety: none needed (one CLI command per process); rewrite_llama_style_flags edits argv.
// Failure: bad flag values and unloadable files throw minfer::Error; main prints them.
// Cost: load_engine maps the file and, with fused QKV, copies the Q/K/V weights once; the rest is
// flag handling.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <CLI/CLI.hpp>

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
  bool mem_report = false;
};

// CLI11 has no multi-letter single-dash options; llama.cpp spells the micro-batch "-ub" and the
// KV cache types "-ctk" / "-ctv". Rewrites argv entries "-ub", "-ctk", "-ctv" to
// "--ubatch-size", "--cache-type-k", "--cache-type-v" in place. Call before parse.
void rewrite_llama_style_flags(int argc, char** argv);

// Adds -m, -c, -t, -b, -ub, -ctk, -ctv, --exec, --planner, --no-fuse-qkv, --no-fuse-ffn,
// --mem-report.
void add_engine_options(CLI::App& app, EngineOptions& o, bool with_ctx = true);

// Adds the sampler flags of run and chat: --temp, --top-k, --top-p, --min-p, --repeat-penalty,
// --repeat-last-n, --seed (defaults: SamplerParams's, llama.cpp's).
void add_sampling_options(CLI::App& app, SamplerParams& sp);

// After parsing: validates the sampler flags (Error(InvalidArgument)) and replaces a random seed
// by a resolved one, printed to stderr, so that any run can be repeated with --seed.
void resolve_sampling_options(SamplerParams& sp);

// rewrite_llama_style_flags, then app.parse. Returns the exit status when parsing ends the
// command (--help, or a CLI11 parse error, already printed by CLI11), std::nullopt to go on.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

int default_threads();

struct LoadedEngine {
  std::unique_ptr<Model> model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;  // declared last: destroyed first (it borrows the model)
  double load_ms = 0;
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
// bytes are known only after the first eval: print_memory() prints them.
LoadedEngine load_engine(const EngineOptions& o, bool log);
void print_memory(const Engine& e, FILE* out);

// Evaluates `tokens` at positions start, start + 1, ... in logical batches of at most n_batch
// (the Engine contract: callers feed at most -b tokens per eval) and returns the logits of the
// last token, valid until the next eval. `tokens` must not be empty.
std::span<const float> prefill(Engine& e, std::span<const int32_t> tokens, int64_t start,
                               int32_t n_batch);

// llama.cpp's perf line: "<label> = X ms / N <unit> (Y ms per token, Z tokens per second)".
void print_timing(FILE* out, const char* label, double ms, int64_t n, const char* unit);

std::string human_bytes(uint64_t b);

}  // namespace minfer::app
