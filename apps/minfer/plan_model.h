// `minfer plan -m FILE`: the memory plan of a model's forward graph, as text, JSON or a
// self-contained HTML page (an SVG timeline: x = execution step, y = arena address, one
// rectangle per buffer with its node name, op and shape on hover, the lower bound as a line).
//
// Figures (JSON keys): n_nodes, naive_bytes (every non-weight node its own buffer), size_class_
// bytes (the size-class pool plan), arena_bytes (offset-planned arena), lower_bound_bytes (most
// bytes live at once), kv_bytes (persistent K/V regions, outside the arena, sized by type_k /
// type_v: f16 by default, as `minfer run`), plan_us (arena planning time); the paged KV cache's
// kv_block_size, kv_block_bytes (one block: B rows of K and V of every layer, page-rounded),
// kv_reserved_bytes (the pool's address space, null block included: the KV at full use) and
// kv_committed_bytes (what is resident once one sequence holds --n-tokens tokens), and `buffers`:
// one object per arena buffer (name, op, shape, type, bytes, offset, first_step, last_step,
// backend, pinned, in_place: the nodes written in place into it); `-o text --buffers` prints the
// same as a table. With --device sim -ngl N also "backends" (per backend: executing nodes,
// arena_bytes and lower_bound_bytes of its own arena, the staging windows planned inside it as
// the Session's arena planner does) and "assignment" (n_gpu_layers, splits
// with backend, first/last node and node count, staging copies with source, from, to and
// bytes, staging_bytes, n_cuts, n_fallback); the text output prints the same. Thread safety: none
// needed (CLI). Failure: Error from the model loader or the graph builder (bad file, inconsistent
// sizes), printed by main(). Ownership: the options are plain values; plan_model owns the model
// and plans it loads for the call. Cost: loading and one graph build plus both planners (the
// exact planner up to --time-limit seconds).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace minfer::app {

struct ModelPlanOptions {
  std::string model;
  int64_t n_ctx = 4096;    // clamped to the model's training context, as `minfer run` does
  int64_t n_tokens = 512;  // tokens in the forward call (512 = a prefill micro-batch)
  int64_t n_out = 1;       // logit rows
  std::string cache_type_k = "f16";  // KV cache types (-ctk / -ctv): size kv_bytes
  std::string cache_type_v = "f16";
  int32_t kv_block = 16;          // --kv-block: tokens per KV cache block
  int32_t n_seq = 1;              // -np: sequences sharing the KV pool
  std::string planner = "arena";  // arena | size-class: the one `compute_bytes` reports
  std::string format = "text";    // text | json | html
  std::string out_file;           // empty = stdout
  std::string dump_intervals;     // write the CPU arena's interval CSV (MiniMalloc format)
  bool buffers = false;           // -o text: the per-buffer table too (JSON always has it)
  bool exact = false;
  double time_limit_s = 10.0;
  // --device sim with -ngl N: plan the graph as `minfer run --device sim -ngl N` runs it — the
  // backend assignment (sched/assign.h), its splits and staging copies, one arena per backend.
  std::string device = "none";  // none | sim
  int32_t n_gpu_layers = 0;
};

void add_model_plan_options(CLI::App& app, ModelPlanOptions& o);
int plan_model(const ModelPlanOptions& o);

}  // namespace minfer::app
