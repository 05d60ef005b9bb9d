// `minfer plan -m FILE` (see plan_model.h).
#include "plan_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>

#include "alloc/allocator.h"
#include "alloc/arena.h"
#include "alloc/liveness.h"
#include "backend/cpu/packed_weights.h"
#include "backend/sim/sim_backend.h"
#include "common/error.h"
#include "kv/cache.h"
#include "kv/cache_type.h"
#include "model/model.h"
#include "planner/intervals.h"
#include "sched/assign.h"

namespace minfer::app {
namespace {

// A pool without memory: counts what the size-class allocator would create. Same recycling
// rule as HostPool (exact size, most recently released first); planning never touches bytes.
class DryBackend final : public Backend {
 public:
  explicit DryBackend(BackendKind k, bool (*supports)(const Node&) = nullptr)
      : kind_(k), supports_(supports) {}
  BackendKind kind() const override { return kind_; }
  uint32_t alloc(size_t bytes) override {
    for (size_t i = free_.size(); i-- > 0;) {
      if (sizes_[free_[i]] == bytes) {
        uint32_t id = free_[i];
        free_.erase(free_.begin() + static_cast<ptrdiff_t>(i));
        return id;
      }
    }
    return alloc_fresh(bytes);
  }
  uint32_t alloc_fresh(size_t bytes) override {
    sizes_.push_back(bytes);
    total_ += bytes;
    return static_cast<uint32_t>(sizes_.size() - 1);
  }
  void release(uint32_t id) override { free_.push_back(id); }
  size_t size_of(uint32_t id) const override { return sizes_.at(id); }
  // Plans only: no memory behind the ids, like a device's (host_ptr null).
  uint8_t* kernel_ptr(uint32_t) override { return nullptr; }
  uint8_t* host_ptr(uint32_t) override { return nullptr; }
  void copy_from_host(uint32_t, uint64_t, const void*, size_t) override {
    MINFER_ASSERT(false, "DryBackend holds no bytes");
  }
  void copy_to_host(uint32_t, uint64_t, void*, size_t) override {
    MINFER_ASSERT(false, "DryBackend holds no bytes");
  }
  void copy_buffer(uint32_t, uint64_t, uint32_t, uint64_t, size_t) override {
    MINFER_ASSERT(false, "DryBackend holds no bytes");
  }
  size_t pool_bytes() const override { return total_; }
  bool supports(const Node& n) const override { return supports_ == nullptr || supports_(n); }
  void execute(const NodeArgs&) override { MINFER_ASSERT(false, "DryBackend cannot execute"); }
  void sync() override {}

 private:
  BackendKind kind_;
  bool (*supports_)(const Node&);
  std::vector<size_t> sizes_;
  std::vector<uint32_t> free_;
  size_t total_ = 0;
};

struct Figures {
  int64_t n_nodes = 0, n_ctx = 0, n_tokens = 0, n_out = 0;
  GgmlType type_k = GgmlType::F16, type_v = GgmlType::F16;
  uint64_t naive = 0, size_class = 0, arena = 0, lower_bound = 0, kv = 0;
  // The paged cache: one block's bytes, the pool's address space, resident at n_tokens.
  int64_t kv_block = 0, n_seq = 1;
  uint64_t kv_block_bytes = 0, kv_reserved = 0, kv_committed = 0;
  double plan_us = 0;
  std::string method;
  uint64_t packed = 0;  // load-time packed weight copies (graph mode; originals' pages released)
};

std::string shape_text(const Node& n) {
  std::string s = "[";
  int dims = 4;
  while (dims > 1 && n.ne[static_cast<size_t>(dims - 1)] == 1) --dims;
  for (int d = 0; d < dims; ++d)
    s += (d ? ", " : "") + std::to_string(n.ne[static_cast<size_t>(d)]);
  return s + "]";
}

// One arena buffer (a liveness interval): what `-o text --buffers` and JSON's "buffers" list.
struct BufferRow {
  const Node* node = nullptr;  // the owner
  BackendKind backend = BackendKind::Cpu;
  uint64_t bytes = 0, offset = 0;
  int32_t first = 0, last = 0;
  bool pinned = false;
  std::vector<std::string> in_place;  // nodes written in place into this buffer
};

// In execution order of the owners (interval order). Cost: one pass over the nodes.
std::vector<BufferRow> buffer_rows(const Graph& g, const Liveness& lv, const ArenaPlan& ap) {
  std::vector<BufferRow> rows(lv.intervals.size());
  for (size_t i = 0; i < lv.intervals.size(); ++i) {
    const LiveInterval& iv = lv.intervals[i];
    BufferRow& r = rows[i];
    r.node = &g.node(iv.root);
    r.backend = iv.backend;
    r.bytes = iv.bytes;
    r.offset = ap.interval_offset[i];
    r.first = iv.first;
    r.last = iv.last;
    r.pinned = iv.pinned;
  }
  for (size_t n = 0; n < g.size(); ++n) {
    if (lv.kind[n] != StorageKind::InPlace || lv.root[n] == kNoNode) continue;
    const int32_t at = lv.interval_of[static_cast<size_t>(lv.root[n])];
    if (at >= 0) rows[static_cast<size_t>(at)].in_place.push_back(g.node(NodeId(n)).name);
  }
  return rows;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string mib(uint64_t b) {
  return fmt::format("{:.2f} MiB", static_cast<double>(b) / 1048576.0);
}

// Fill colour of an op: the same hue in the blocks and the legend.
unsigned op_hue(Op op) {
  return (static_cast<unsigned>(op) * 47u) % 360u;
}

// "Nice" tick spacing: 1, 2 or 5 x 10^k, about `want` ticks over [0, range].
double tick_step(double range, int want) {
  const double raw = std::max(range / want, 1e-9);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10.0 * mag;
}

// Where the KV panel goes: x from `left` to `right`, y from `base` (0 bytes) up to `top`.
struct PanelBox {
  double left, right, base, top;
};

// The persistent KV cache beside the arena: outside it, on its own MiB scale, one block per
// layer's K and V region.
std::string svg_kv_panel(const Figures& f, int64_t n_layer, const PanelBox& box) {
  const double mib_d = 1048576.0;
  const double kv_h = static_cast<double>(std::max<uint64_t>(1, f.kv));
  auto ky_of = [&](double b) { return box.base - b / kv_h * (box.base - box.top); };
  std::string svg =
      fmt::format("<g id='kv-region'><text x='{}' y='{}' font-size='12'>KV cache {}</text>\n",
                  box.left, box.top - 6, mib(f.kv));
  const int64_t n_regions = std::max<int64_t>(1, 2 * n_layer);
  const double region = kv_h / static_cast<double>(n_regions);
  for (int64_t r = 0; r < n_regions; ++r) {
    const bool is_k = r % 2 == 0;
    const double y1 = ky_of(region * static_cast<double>(r + 1)), y0 = ky_of(region * double(r));
    svg += fmt::format(
        "<rect class='kv' x='{}' y='{:.2f}' width='{}' height='{:.2f}' fill='{}' stroke='#222' "
        "stroke-width='0.3'><title>layer {} {} cache ({}, {:.0f} bytes)</title></rect>\n",
        box.left, y1, box.right - box.left, std::max(0.5, y0 - y1), is_k ? "#9ab" : "#bcd", r / 2,
        is_k ? "K" : "V", type_name(is_k ? f.type_k : f.type_v), region);
  }
  const double kys = tick_step(kv_h / mib_d, 8);
  for (double m = 0; m * mib_d <= kv_h * 1.0001; m += kys)
    svg += fmt::format("<text x='{}' y='{:.2f}' font-size='11' text-anchor='end'>{:g} MiB</text>\n",
                       box.left - 6, ky_of(m * mib_d) + 4, m);
  return svg + "</g>\n";
}

// The colour key: the ops present in the arena, then the KV regions.
std::string html_legend(const std::vector<Op>& ops) {
  std::string legend = "<div id='legend'>";
  for (Op op : ops)
    legend += fmt::format(
        "<span class='key'><span class='sw' style='background:hsl({},65%,60%)'></span>{}</span>",
        op_hue(op), op_name(op));
  return legend +
         "<span class='key'><span class='sw' style='background:#9ab'></span>KV (K)</span>"
         "<span class='key'><span class='sw' style='background:#bcd'></span>KV (V)</span></div>\n";
}

// One SVG timeline of the CPU arena (x = step, y = address, 0 at the bottom; ticks in steps and
// MiB; labels on blocks large enough to hold them), the persistent KV cache beside it (one
// block per layer's K and V, its own MiB axis: it lives outside the arena) and a colour legend
// of the ops present.
std::string render_html(const Graph& g, const Liveness& lv, const ArenaPlan& ap, const Figures& f,
                        int64_t n_layer, const std::string& title) {
  const double W = 1200, H = 640, left = 80, bottom = 40, top_pad = 20;
  const double plot_r = W - 230;  // the arena's right edge; the KV panel follows
  const double steps = std::max(1, lv.n_steps + 1);
  const auto cpu = static_cast<size_t>(BackendKind::Cpu);
  const double height = static_cast<double>(std::max<uint64_t>(1, ap.arena_bytes[cpu]));
  const double mib_d = 1048576.0;
  auto x_of = [&](double step) { return left + step / steps * (plot_r - left); };
  auto y_of = [&](double addr) { return H - bottom - addr / height * (H - bottom - top_pad); };
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' viewBox='0 0 {} {}' "
      "font-family='sans-serif'>\n<rect x='0' y='0' width='{}' height='{}' fill='#ffffff'/>\n",
      W, H, W, H, W, H);
  // Axes and ticks: steps along x, MiB along y.
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#333'/>\n", left, y_of(0),
                     plot_r, y_of(0));
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#333'/>\n", left, y_of(0), left,
                     y_of(height));
  const double xs = std::max(1.0, std::round(tick_step(steps, 10)));
  for (double st = 0; st <= steps - 1; st += xs)
    svg += fmt::format(
        "<g class='xtick'><line x1='{0:.2f}' y1='{1}' x2='{0:.2f}' y2='{2}' stroke='#333'/>"
        "<text x='{0:.2f}' y='{3}' font-size='11' text-anchor='middle'>{4}</text></g>\n",
        x_of(st), y_of(0), y_of(0) + 5, y_of(0) + 17, st);
  svg += fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>step</text>\n",
                     (left + plot_r) / 2, H - 6);
  const double ys = tick_step(height / mib_d, 8);
  for (double m = 0; m * mib_d <= height * 1.0001; m += ys)
    svg += fmt::format(
        "<g class='ytick'><line x1='{0}' y1='{1:.2f}' x2='{2}' y2='{1:.2f}' stroke='#333'/>"
        "<text x='{3}' y='{4:.2f}' font-size='11' text-anchor='end'>{5:g} MiB</text></g>\n",
        left - 5, y_of(m * mib_d), left, left - 8, y_of(m * mib_d) + 4, m);
  std::vector<Op> ops;  // for the legend, in order of appearance
  for (size_t i = 0; i < lv.intervals.size(); ++i) {
    const LiveInterval& iv = lv.intervals[i];
    if (iv.backend != BackendKind::Cpu) continue;
    const Node& n = g.node(iv.root);
    if (std::find(ops.begin(), ops.end(), n.op) == ops.end()) ops.push_back(n.op);
    const double x0 = x_of(iv.first), x1 = x_of(static_cast<double>(iv.last) + 1);
    const double y0 = y_of(static_cast<double>(ap.interval_offset[i]));
    const double y1 = y_of(static_cast<double>(ap.interval_offset[i] + iv.bytes));
    const double w = std::max(0.5, x1 - x0), h = std::max(0.5, y0 - y1);
    svg += fmt::format(
        "<rect class='buf' x='{:.2f}' y='{:.2f}' width='{:.2f}' height='{:.2f}' "
        "fill='hsl({},65%,60%)' stroke='#222' stroke-width='0.3'><title>{} ({}) {} {}: "
        "{} bytes at offset {}, steps [{}, {}]{}</title></rect>\n",
        x0, y1, w, h, op_hue(n.op), html_escape(n.name), op_name(n.op), shape_text(n),
        type_name(n.type), iv.bytes, ap.interval_offset[i], iv.first, iv.last,
        iv.pinned ? " (pinned)" : "");
    // A label only where about 6.5 px per character and a 12 px line fit.
    if (h >= 12 && w >= 6.5 * static_cast<double>(std::min<size_t>(n.name.size(), 4)))
      svg += fmt::format(
          "<text class='label' x='{:.2f}' y='{:.2f}' font-size='10' pointer-events='none'>{}"
          "</text>\n",
          x0 + 2, y1 + 11,
          html_escape(std::string_view(n.name).substr(0, static_cast<size_t>(w / 6.5))));
  }
  const double lb_y = y_of(static_cast<double>(ap.lower_bound[cpu]));
  svg += fmt::format(
      "<line id='lower-bound' x1='{}' y1='{:.2f}' x2='{}' y2='{:.2f}' stroke='#d00' "
      "stroke-width='2' stroke-dasharray='6,3'><title>lower bound {} bytes</title></line>\n",
      left, lb_y, plot_r, lb_y, ap.lower_bound[cpu]);
  svg += fmt::format("<text x='{}' y='{:.2f}' fill='#d00' font-size='12'>lower bound {}</text>\n",
                     left + 4, lb_y - 4, mib(ap.lower_bound[cpu]));
  // At the top right: the lower bound's label sits at the top left when the plan meets it.
  svg += fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='end'>arena {}</text>\n",
                     plot_r, top_pad - 6, mib(ap.arena_bytes[cpu]));
  svg += svg_kv_panel(f, n_layer, {plot_r + 90, W - 20, H - bottom, top_pad});
  svg += "</svg>\n";
  const std::string legend = html_legend(ops);
  return fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{}</title>\n"
      "<style>body{{font-family:sans-serif;margin:16px;background:#fafafa}}"
      "rect.buf:hover{{stroke:#000;stroke-width:1.5}}.key{{margin-right:14px;white-space:nowrap;"
      "font-size:13px}}.sw{{display:inline-block;width:12px;height:12px;margin-right:4px;"
      "border:1px solid #333;vertical-align:middle}}</style></head><body>\n"
      "<h1>{}</h1>\n<p>{} nodes, {} tokens, {} output rows, context {}. Arena {} ({}), lower bound "
      "{}, size classes {}, naive {}, KV {} ({}/{}, outside the arena, drawn on the right). "
      "Planned in {:.0f} us. Hover a rectangle for the node.</p>\n{}{}</body></html>\n",
      html_escape(title), html_escape(title), f.n_nodes, f.n_tokens, f.n_out, f.n_ctx, mib(f.arena),
      html_escape(f.method), mib(f.lower_bound), mib(f.size_class), mib(f.naive), mib(f.kv),
      type_name(f.type_k), type_name(f.type_v), f.plan_us, legend, svg);
}

// The forward call to plan: -c clamped to the training context, as `minfer run` does.
GraphParams graph_params(const ModelPlanOptions& o, const Model& model, GgmlType type_k,
                         GgmlType type_v) {
  GraphParams gp;
  gp.cparams.type_k = type_k;
  gp.cparams.type_v = type_v;
  gp.n_tokens = o.n_tokens;
  gp.n_outputs = o.n_out;
  gp.cparams.n_ctx = o.n_ctx;
  if (model.hparams().n_ctx_train > 0) {
    // -c 0: the training context, as `minfer run -c 0` and llama.cpp.
    gp.cparams.n_ctx =
        o.n_ctx == 0 ? model.hparams().n_ctx_train : std::min(o.n_ctx, model.hparams().n_ctx_train);
  }
  if (gp.cparams.n_ctx == 0)
    fail(ErrorKind::InvalidArgument, "-c 0: the model states no training context; give -c N");
  return gp;
}

// --dump-intervals: the CPU arena's planner instance (MiniMalloc CSV), for bench_planner.
void write_intervals_csv(const std::string& path, const Liveness& live) {
  std::vector<PlanBuffer> bufs = arena_buffers(live, BackendKind::Cpu);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorKind::Io, "cannot write '{}'", path);
  out << "id,lower,upper,size\n";
  for (const PlanBuffer& b : bufs)
    out << fmt::format("{},{},{},{}\n", b.id, b.lower, b.upper, b.size);
}

Figures figures(const Graph& g, const GraphParams& gp, const AllocPlan& ap,
                const ArenaPlan& arena) {
  Figures f;
  f.n_nodes = static_cast<int64_t>(g.size());
  f.n_ctx = gp.cparams.n_ctx;
  f.n_tokens = gp.n_tokens;
  f.n_out = gp.n_outputs;
  f.type_k = gp.cparams.type_k;
  f.type_v = gp.cparams.type_v;
  // Naive: every live activation (owner, view or in-place result) its own buffer; weights,
  // dead nodes and the persistent KV regions do not count.
  for (size_t i = 0; i < g.size(); ++i) {
    StorageKind k = ap.live.kind[i];
    if (k == StorageKind::Own || k == StorageKind::InPlace || k == StorageKind::View) {
      f.naive += g.node(static_cast<NodeId>(i)).n_bytes();
    }
  }
  for (uint64_t b : ap.stats.plan_bytes) f.size_class += b;
  f.arena = arena.total_arena_bytes();
  f.lower_bound = arena.total_lower_bound();
  f.kv = ap.stats.kv_bytes;
  f.plan_us = arena.plan_us;
  f.method = arena.method[static_cast<size_t>(BackendKind::Cpu)];
  return f;
}

// The paged cache `minfer run` would create for this context: its blocks, address space and
// what one sequence of n_tokens tokens commits (its blocks plus the null block).
void kv_figures(const ModelPlanOptions& o, const HParams& hp, const GraphParams& gp, Figures& f) {
  kv::CacheParams cp;
  cp.n_layer = hp.n_layer;
  cp.n_kv_embd = hp.n_kv_embd();
  cp.type_k = gp.cparams.type_k;
  cp.type_v = gp.cparams.type_v;
  cp.n_ctx = gp.cparams.n_ctx;
  cp.block_size = o.kv_block;
  cp.n_seq_max = o.n_seq;
  f.kv_reserved = kv::cache_reserved_bytes(cp);  // validates the block size and -np
  const int64_t n_blocks = (cp.n_ctx + cp.block_size - 1) / cp.block_size + 1;
  f.kv_block = o.kv_block;
  f.n_seq = o.n_seq;
  f.kv_block_bytes = f.kv_reserved / static_cast<uint64_t>(n_blocks);
  const int64_t held = std::min(o.n_tokens, cp.n_ctx);
  f.kv_committed =
      static_cast<uint64_t>((held + cp.block_size - 1) / cp.block_size + 1) * f.kv_block_bytes;
}

// The figure `compute_bytes` reports: the planner `minfer run --planner` would use.
uint64_t compute_bytes(const ModelPlanOptions& o, const Figures& f) {
  return o.planner == "arena" ? f.arena : f.size_class;
}

std::string render_json(const ModelPlanOptions& o, const Figures& f,
                        const std::vector<BufferRow>& rows) {
  nlohmann::ordered_json j;
  j["model"] = o.model;
  j["n_nodes"] = f.n_nodes;
  j["n_ctx"] = f.n_ctx;
  j["n_tokens"] = f.n_tokens;
  j["n_out"] = f.n_out;
  j["naive_bytes"] = f.naive;
  j["size_class_bytes"] = f.size_class;
  j["arena_bytes"] = f.arena;
  j["lower_bound_bytes"] = f.lower_bound;
  j["kv_bytes"] = f.kv;
  j["kv_block_size"] = f.kv_block;
  j["n_seq"] = f.n_seq;
  j["kv_block_bytes"] = f.kv_block_bytes;
  j["kv_reserved_bytes"] = f.kv_reserved;
  j["kv_committed_bytes"] = f.kv_committed;
  j["packed_weights_bytes"] = f.packed;
  j["type_k"] = std::string(type_name(f.type_k));
  j["type_v"] = std::string(type_name(f.type_v));
  j["plan_us"] = f.plan_us;
  j["planner"] = o.planner;
  j["compute_bytes"] = compute_bytes(o, f);
  j["arena_method"] = f.method;
  nlohmann::ordered_json bufs = nlohmann::ordered_json::array();
  for (const BufferRow& r : rows) {
    nlohmann::ordered_json b;
    b["name"] = r.node->name;
    b["op"] = std::string(op_name(r.node->op));
    int dims = 4;
    while (dims > 1 && r.node->ne[static_cast<size_t>(dims - 1)] == 1) --dims;
    b["shape"] = std::vector<int64_t>(r.node->ne.begin(), r.node->ne.begin() + dims);
    b["type"] = std::string(type_name(r.node->type));
    b["bytes"] = r.bytes;
    b["offset"] = r.offset;
    b["first_step"] = r.first;
    b["last_step"] = r.last;
    b["backend"] = r.backend == BackendKind::Cpu ? "cpu" : "sim";
    b["pinned"] = r.pinned;
    b["in_place"] = r.in_place;
    bufs.push_back(std::move(b));
  }
  j["buffers"] = std::move(bufs);
  return j.dump(2) + "\n";
}

std::string render_text(const ModelPlanOptions& o, const Model& model, const Figures& f) {
  const double over =
      f.lower_bound ? 100.0 * (double(f.arena) - double(f.lower_bound)) / double(f.lower_bound)
                    : 0.0;
  std::string t;
  t += fmt::format("model:        {} ({})\n", o.model, model.type_description());
  t += fmt::format("graph:        {} nodes, {} tokens, {} output rows, context {}\n", f.n_nodes,
                   f.n_tokens, f.n_out, f.n_ctx);
  t += fmt::format("naive:        {:>12} B  {}  (every node its own buffer)\n", f.naive,
                   mib(f.naive));
  t += fmt::format("size-class:   {:>12} B  {}\n", f.size_class, mib(f.size_class));
  t += fmt::format("arena:        {:>12} B  {}  ({}, +{:.3f}% over the bound)\n", f.arena,
                   mib(f.arena), f.method, over);
  t += fmt::format("lower bound:  {:>12} B  {}\n", f.lower_bound, mib(f.lower_bound));
  t += fmt::format("kv (outside): {:>12} B  {}  (K {}, V {})\n", f.kv, mib(f.kv),
                   type_name(f.type_k), type_name(f.type_v));
  t += fmt::format("kv reserved:  {:>12} B  {}  ({} sequence(s), blocks of {} tokens, {} B each)\n",
                   f.kv_reserved, mib(f.kv_reserved), f.n_seq, f.kv_block, f.kv_block_bytes);
  t += fmt::format(
      "kv committed: {:>12} B  {}  (one sequence of {} tokens: committed a block at "
      "a time)\n",
      f.kv_committed, mib(f.kv_committed), f.n_tokens);
  t += fmt::format("compute:      {:>12} B  ({} planner)\n", compute_bytes(o, f), o.planner);
  t += fmt::format(
      "packed:       {:>12} B  {}  (weights repacked at load for this CPU; their "
      "GGUF pages released)\n",
      f.packed, mib(f.packed));
  t += fmt::format("plan time:    {:.1f} us\n", f.plan_us);
  return t;
}

// --buffers: one line per arena buffer, by offset within each backend.
std::string render_buffer_table(std::vector<BufferRow> rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const BufferRow& a, const BufferRow& b) {
    return a.backend != b.backend ? a.backend < b.backend : a.offset < b.offset;
  });
  std::string t = fmt::format(
      "\nbuffers ({}): offset and bytes in the arena, steps [first, last]\n", rows.size());
  t += fmt::format("{:>12} {:>12} {:>13}  {:<12} {:<5} {:<18} {}\n", "offset", "bytes", "steps",
                   "op", "type", "shape", "name  [in place]");
  for (const BufferRow& r : rows) {
    std::string name = r.node->name;
    if (r.pinned) name += " (pinned)";
    if (r.backend != BackendKind::Cpu) name += " (sim)";
    if (!r.in_place.empty()) name += fmt::format("  [{}]", fmt::join(r.in_place, ", "));
    t += fmt::format("{:>12} {:>12} {:>13}  {:<12} {:<5} {:<18} {}\n", r.offset, r.bytes,
                     fmt::format("[{}, {}]", r.first, r.last), op_name(r.node->op),
                     type_name(r.node->type), shape_text(*r.node), name);
  }
  return t;
}

// --device sim: per backend its nodes and its own arena, then the splits and staging copies.
// `arena`: the Arena-mode allocator's stats (the staging windows planned inside the arenas, as
// the Session runs it); `ap`: the size-class plan (fresh staging buffers).
std::string render_assignment_text(const Graph& g, const Assignment& a, const AllocStats& arena,
                                   const AllocPlan& ap) {
  std::string t = "\nbackends (each its own arena, staging windows inside):\n";
  for (size_t b = 0; b < kNumBackends; ++b) {
    t += fmt::format("  {:<4} {:>6} nodes  arena {:>12} B  lower bound {:>12} B\n",
                     backend_name(static_cast<BackendKind>(b)), a.n_nodes[b], arena.plan_bytes[b],
                     arena.lower_bound_bytes[b]);
  }
  t += fmt::format("staging: {} copies, {} B a step (size-class planner: fresh buffers of {} B)\n",
                   ap.staging.size(), arena.staging_bytes, ap.stats.staging_bytes);
  return t + a.to_string(g);
}

nlohmann::ordered_json assignment_json(const Graph& g, const Assignment& a,
                                       const AllocStats& arena) {
  nlohmann::ordered_json j;
  nlohmann::ordered_json be = nlohmann::ordered_json::array();
  for (size_t b = 0; b < kNumBackends; ++b) {
    be.push_back({{"backend", std::string(backend_name(static_cast<BackendKind>(b)))},
                  {"nodes", a.n_nodes[b]},
                  {"arena_bytes", arena.plan_bytes[b]},
                  {"lower_bound_bytes", arena.lower_bound_bytes[b]}});
  }
  j["backends"] = std::move(be);
  nlohmann::ordered_json as;
  as["n_gpu_layers"] = a.params.n_gpu_layers;
  as["n_cuts"] = a.n_cuts();
  as["n_fallback"] = a.n_fallback;
  as["staging_bytes"] = a.staging_bytes();
  nlohmann::ordered_json sp = nlohmann::ordered_json::array();
  for (const AssignSplit& s : a.splits)
    sp.push_back({{"backend", std::string(backend_name(s.backend))},
                  {"first", g.node(s.first).name},
                  {"last", g.node(s.last).name},
                  {"nodes", s.n_nodes}});
  as["splits"] = std::move(sp);
  nlohmann::ordered_json st = nlohmann::ordered_json::array();
  for (const StagingEdge& e : a.staging)
    st.push_back({{"source", g.node(e.src).name},
                  {"from", std::string(backend_name(e.from))},
                  {"to", std::string(backend_name(e.to))},
                  {"bytes", e.bytes}});
  as["staging"] = std::move(st);
  j["assignment"] = std::move(as);
  return j;
}

void emit(const ModelPlanOptions& o, const std::string& text) {
  if (o.out_file.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  std::ofstream out(o.out_file, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorKind::Io, "cannot write '{}'", o.out_file);
  out << text;
}

}  // namespace

void add_model_plan_options(CLI::App& app, ModelPlanOptions& o) {
  app.add_option("-m,--model", o.model, "GGUF model whose forward graph to plan");
  app.add_option("-c,--ctx-size", o.n_ctx, "context size (KV regions; 0: the training context)")
      ->capture_default_str();
  app.add_option("--n-tokens", o.n_tokens, "tokens in the forward call")->capture_default_str();
  app.add_option("--n-out", o.n_out, "logit rows")->capture_default_str();
  app.add_option("--kv-block", o.kv_block, "tokens per KV cache block")->capture_default_str();
  app.add_option("--parallel,--np", o.n_seq, "sequences sharing the KV pool (also -np)")
      ->capture_default_str();
  app.add_option("--cache-type-k,--ctk", o.cache_type_k,
                 "KV cache type of K: f32 | f16 | q8_0 (-ctk)")
      ->capture_default_str();
  app.add_option("--cache-type-v,--ctv", o.cache_type_v,
                 "KV cache type of V: f32 | f16 | q8_0 (-ctv)")
      ->capture_default_str();
  app.add_option("--planner", o.planner, "arena | size-class (the figure compute_bytes reports)")
      ->check(CLI::IsMember({"arena", "size-class"}))
      ->capture_default_str();
  app.add_option("-o,--output", o.format, "text | json | html")
      ->check(CLI::IsMember({"text", "json", "html"}))
      ->capture_default_str();
  app.add_option("--output-file", o.out_file, "write there instead of stdout");
  app.add_flag("--buffers", o.buffers,
               "-o text: add the per-buffer table (name, op, shape, type, bytes, offset, steps, "
               "in-place aliases); -o json always has it as \"buffers\"");
  app.add_option("--device", o.device,
                 "none | sim: plan the split across the CPU and the simulated device, as `minfer "
                 "run --device sim -ngl N` runs it")
      ->check(CLI::IsMember({"none", "sim"}))
      ->capture_default_str();
  app.add_option("--n-gpu-layers,--ngl", o.n_gpu_layers,
                 "with --device sim: the first N layers on the device (N > n_layer: the output "
                 "head too; also -ngl)")
      ->capture_default_str();
  app.add_option("--dump-intervals", o.dump_intervals,
                 "write the CPU arena's planner instance as id,lower,upper,size CSV");
}

int plan_model(const ModelPlanOptions& o) {
  if (o.n_ctx < 0)
    fail(ErrorKind::InvalidArgument, "-c {} must be >= 0 (0: the model's training context)",
         o.n_ctx);
  if (o.n_tokens <= 0 || o.n_out <= 0 || o.n_out > o.n_tokens) {
    fail(ErrorKind::InvalidArgument, "need 0 < --n-out ({}) <= --n-tokens ({})", o.n_out,
         o.n_tokens);
  }
  const GgmlType type_k = parse_kv_cache_type("--cache-type-k", o.cache_type_k);
  const GgmlType type_v = parse_kv_cache_type("--cache-type-v", o.cache_type_v);
  std::unique_ptr<Model> model = Model::load(o.model);
  const HParams& hp = model->hparams();
  check_kv_cache_type_fits("--cache-type-k", type_k, hp.head_dim, hp.n_kv_embd());
  check_kv_cache_type_fits("--cache-type-v", type_v, hp.head_dim, hp.n_kv_embd());
  const GraphParams gp = graph_params(o, *model, type_k, type_v);
  if (gp.cparams.fusion.qkv) model->prepare_fused_qkv();      // the graph `minfer run` executes
  if (gp.cparams.fusion.gate_up) model->prepare_fused_ffn();  // described only: nothing copied
  Graph g = model->build_graph(gp);

  // Size classes: the allocator's own walk over a pool that only counts bytes.
  GraphAllocator sc;
  auto cpu = std::make_unique<DryBackend>(BackendKind::Cpu);
  auto sim =
      std::make_unique<DryBackend>(BackendKind::Sim, [](const Node& n) { return sim_supports(n); });
  std::optional<Assignment> assigned;
  if (o.device == "sim") {
    if (o.n_gpu_layers < 0)
      fail(ErrorKind::InvalidArgument, "-ngl {} must be >= 0", o.n_gpu_layers);
    const AssignParams p{BackendKind::Sim, o.n_gpu_layers, static_cast<int32_t>(hp.n_layer)};
    assigned = assign_backends(g, p, support_table(g, {cpu.get(), sim.get()}));
    apply_assignment(g, *assigned);
  }
  sc.own_backend(std::move(cpu));
  sc.own_backend(std::move(sim));
  const AllocPlan& ap = sc.alloc_graph(g);
  PlanParams pp;
  pp.mode = o.exact ? PlanMode::Exact : PlanMode::Fast;
  pp.time_limit_s = o.time_limit_s;
  const ArenaPlan arena = plan_arena(ap.live, pp);
  if (!o.dump_intervals.empty()) write_intervals_csv(o.dump_intervals, ap.live);

  Figures f = figures(g, gp, ap, arena);
  kv_figures(o, hp, gp, f);
  // As engine_cli: engines of several sequences repack, one sequence where every layout has a
  // decode kernel.
  f.packed = o.n_seq > 1 || cpu::PackedWeights::decodes_packed(cpu::SimdLevel::kBest)
                 ? model->packed_bytes(cpu::SimdLevel::kBest)
                 : 0;
  // With a device: the Arena-mode allocator too, whose arenas hold the staging windows.
  AllocStats arena_stats;
  if (assigned) {
    GraphAllocator ar;
    ar.own_backend(std::make_unique<DryBackend>(BackendKind::Cpu));
    ar.own_backend(std::make_unique<DryBackend>(BackendKind::Sim));
    ar.set_planner(PlannerKind::Arena);
    arena_stats = ar.alloc_graph(g).stats;
  }
  if (o.format == "json") {
    std::string text = render_json(o, f, buffer_rows(g, ap.live, arena));
    if (assigned) {
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
      j.update(assignment_json(g, *assigned, arena_stats));
      text = j.dump(2) + "\n";
    }
    emit(o, text);
  } else if (o.format == "html") {
    emit(o, render_html(g, ap.live, arena, f, hp.n_layer,
                        fmt::format("minfer plan: {} ({} tokens)", model->path(), o.n_tokens)));
  } else {
    std::string text = render_text(o, *model, f);
    if (assigned) text += render_assignment_text(g, *assigned, arena_stats, ap);
    if (o.buffers) text += render_buffer_table(buffer_rows(g, ap.live, arena));
    emit(o, text);
  }
  return 0;
}

}  // namespace minfer::app
