// `minfer plan`: the offset planner from the command line.
//
//   minfer plan --intervals FILE.csv [--out SOLUTION.csv] [--exact] [--time-limit S]
//               [--capacity BYTES]
//       Packs a MiniMalloc-style interval CSV (id,lower,upper,size); prints the height, the
//       lower bound and how far above it the plan is; optionally writes id,lower,upper,size,offset.
//       The plan is checked by the invariant checker before anything is printed. With
//       --capacity the question is whether it fits in that many bytes (MiniMalloc's
//       --capacity): the exact search stops at the first plan that does, and a plan that does
//       not is an error (exit 1, no solution file written).
//   minfer plan -m FILE [-c CTX] [--n-tokens N] [--n-out K] [-ctk T] [-ctv T] [--planner P]
//               [-o text|json|html]
//       The memory plan of a model's forward graph (see plan_model.cpp).
// Bad input (malformed CSV, unreadable file) throws minfer::Error; main() prints it, exit 1.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "plan_model.h"
#include "planner/intervals.h"
#include "planner/offset_planner.h"

namespace minfer::app {
namespace {

int plan_intervals(const std::string& path, const std::string& out, const PlanParams& params) {
  std::vector<PlanBuffer> bufs = read_intervals_csv(path);
  OffsetPlan plan = plan_offsets(bufs, params);
  std::string err = check_offsets(bufs, plan.offsets, plan.height);
  if (!err.empty()) fail(ErrorKind::Internal, "planner produced an invalid plan: {}", err);
  std::printf("buffers:     %zu\n", bufs.size());
  std::printf("height:      %llu\n", static_cast<unsigned long long>(plan.height));
  std::printf("lower bound: %llu\n", static_cast<unsigned long long>(plan.lower_bound));
  std::printf("over bound:  %.2f%%%s\n", plan.over_lower_bound_pct(),
              plan.proven_optimal ? " (optimal)" : "");
  std::printf("method:      %s%s\n", plan.method.c_str(),
              params.mode == PlanMode::Exact
                  ? fmt::format(" ({} search nodes)", plan.search_nodes).c_str()
                  : "");
  std::printf("plan time:   %.3f ms\n", plan.plan_us / 1000.0);
  if (params.capacity > 0 && plan.height > params.capacity) {
    fail(ErrorKind::OutOfMemory,
         "{}: no plan within --capacity {} bytes found (best height {}, lower bound {}{})", path,
         params.capacity, plan.height, plan.lower_bound,
         plan.lower_bound > params.capacity ? std::string(": more bytes are live at once")
         : params.mode == PlanMode::Exact   ? fmt::format(", {} s searched", params.time_limit_s)
                                            : std::string(", fast mode only: try --exact"));
  }
  if (!out.empty()) {
    write_solution_csv(out, bufs, plan.offsets);
    std::printf("solution:    %s\n", out.c_str());
  }
  return 0;
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  CLI::App app{"Memory plan: offsets of every buffer in one arena", "minfer plan"};
  std::string intervals, out;
  bool exact = false;
  double limit = 10.0;
  int restarts = PlanParams{}.restarts;
  int64_t capacity = 0;  // signed: CLI11 would wrap "-5" into a huge unsigned value
  ModelPlanOptions mo;
  app.add_option("--intervals", intervals, "MiniMalloc CSV (id,lower,upper,size) to pack");
  app.add_option("--out", out, "write the solution CSV (id,lower,upper,size,offset)");
  app.add_flag("--exact", exact, "branch and bound after the fast planner");
  app.add_option("--time-limit", limit,
                 "budget, seconds: of the exact search, and of the greedy portfolio in either "
                 "mode")
      ->capture_default_str();
  app.add_option("--restarts", restarts, "fast mode randomized restarts")->capture_default_str();
  app.add_option("--capacity", capacity,
                 "with --intervals: stop at the first plan of at most this many bytes; "
                 "error when none is found")
      ->check(CLI::PositiveNumber);
  add_model_plan_options(app, mo);
  if (auto status = parse_command_line(app, argc, argv)) return *status;  // -ctk, -ctv too
  if (!(limit >= 0.0) || !std::isfinite(limit))
    fail(ErrorKind::InvalidArgument, "--time-limit {} must be a finite number >= 0", limit);
  if (restarts < 0) fail(ErrorKind::InvalidArgument, "--restarts {} must be >= 0", restarts);
  if (!intervals.empty() && !mo.model.empty()) {
    fail(ErrorKind::InvalidArgument, "give either --intervals or -m, not both");
  }
  if (capacity > 0 && intervals.empty()) {
    fail(ErrorKind::InvalidArgument, "--capacity {} applies to --intervals only", capacity);
  }
  if (!intervals.empty()) {
    PlanParams params;
    params.mode = exact ? PlanMode::Exact : PlanMode::Fast;
    params.time_limit_s = limit;
    params.fast_time_limit_s = limit;
    params.restarts = restarts;
    params.capacity = static_cast<uint64_t>(capacity);
    return plan_intervals(intervals, out, params);
  }
  if (!mo.model.empty()) {
    mo.exact = exact;
    mo.time_limit_s = limit;
    return plan_model(mo);
  }
  fail(ErrorKind::InvalidArgument, "nothing to plan: give --intervals FILE.csv or -m MODEL.gguf");
}

}  // namespace minfer::app
