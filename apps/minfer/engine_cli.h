// Shared by `minfer run`, `minfer chat` and `minfer bench`: the engine flags, loading a model
// with its tokenizer, building the chosen engine (graph Session or eager), and llama.cpp-style
// timing lines.
//
// Ownership: LoadedEngine owns the model, tokenizer and engine (engine destroyed first).
// Failure: bad flag values and unloadable files throw minfer::Error; main prints them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "model/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace minfer::app {

struct EngineOptions {
  std::string model;
  int64_t n_ctx = 0;  // 0: 4096 clamped to the training context
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

int default_threads();

struct LoadedEngine {
  std::unique_ptr<Model> model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;  // declared last: destroyed first (it borrows the model)
  double load_ms = 0;
};

// Loads the model and tokenizer and builds the engine; with `log` prints what was loaded
// (model, arch, type, sizes, context, threads, KV cache types and bytes) to stderr. Compute
// bytes are known only after the first eval: print_memory() prints them. A bad
// --cache-type-k/-v value throws Error(InvalidArgument) naming the flag and the value.
//
// The KV types of the options, parsed (both checked even when one is unused).
struct KvTypes {
  GgmlType k = GgmlType::F16;
  GgmlType v = GgmlType::F16;
};
KvTypes kv_types(const EngineOptions& o);
LoadedEngine load_engine(const EngineOptions& o, bool log);
void print_memory(const Engine& e, FILE* out);

// llama.cpp's perf line: "<label> = X ms / N <unit> (Y ms per token, Z tokens per second)".
void print_timing(FILE* out, const char* label, double ms, int64_t n, const char* unit);

std::string human_bytes(uint64_t b);

}  // namespace minfer::app
