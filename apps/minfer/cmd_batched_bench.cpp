// minfer batched-bench: llama.cpp's llama-batched-bench on minfer's multi-sequence Session.
//
// For every (PP, TG, B) in -npp x -ntg x -npl, as llama.cpp's tool does:
//   1. the KV cache is cleared;
//   2. prompt: B sequences each prefill their own PP random tokens (-pps: only sequence 0 does,
//      the others then fork it with seq_cp, which copies nothing), fed in logical batches of at
//      most -b tokens across sequences; only each prompt's last token asks for logits. T_PP;
//   3. generation: TG steps, each one batch of B tokens (one per sequence, random ids, logits
//      for all). -tgs: sequence by sequence instead, one token per step. T_TG.
//   Like llama.cpp's tool nothing is sampled: the fed tokens are random (the content does not
//   change the work).
// Columns: N_KV = B*(PP+TG) (-pps: PP + B*TG, the prompt's blocks being shared),
//   S_PP = B*PP / T_PP (-pps: PP / T_PP), S_TG = B*TG / T_TG, T = T_PP + T_TG,
//   S = (prompt tokens + B*TG) / T.
// Warm-up (untimed, before the table): 16 tokens of sequence 0, as llama.cpp, plus one decode
// step of B tokens per -npl value so that every decode graph bucket is built before timing.
// Unlike llama.cpp, which silently skips rows that do not fit, a -c too small for some row is
// an error naming the figure needed. The prefix cache is off (nothing here reuses prompts).
// Output: llama-batched-bench's markdown table, or (-o json) one JSON object per row with the
// field names of its jsonl output.
#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"

namespace minfer::app {

namespace {

using Clock = std::chrono::steady_clock;

struct BatchedBenchOptions {
  EngineOptions engine;
  std::vector<int32_t> npp{128};
  std::vector<int32_t> ntg{128};
  std::vector<int32_t> npl{1, 2, 4, 8, 16};
  bool pp_shared = false;
  bool tg_separate = false;
  std::string format = "md";  // md | json (jsonl: the same)
};

struct Row {
  int32_t pp = 0, tg = 0, pl = 0;
  int64_t n_kv = 0;
  double t_pp = 0, t_tg = 0;  // seconds
};

// The KV cells a row needs (llama.cpp's n_ctx_req, its -kvu form for -pps).
int64_t row_n_kv(int64_t pp, int64_t tg, int64_t pl, bool shared) {
  return shared ? pp + pl * tg : pl * (pp + tg);
}

// KV blocks a row needs at most: every sequence rounds up to whole blocks; with -pps the
// prompt's full blocks are shared and its partial last block may be copied per sequence.
int64_t row_blocks(int64_t pp, int64_t tg, int64_t pl, bool shared, int64_t bs) {
  const int64_t per_seq = (pp + tg + bs - 1) / bs;
  if (!shared) return pl * per_seq;
  const int64_t full = pp / bs;
  return full + (pp % bs != 0 ? 1 : 0) + pl * (per_seq - full);
}

std::optional<int> parse_options(int argc, char** argv, BatchedBenchOptions& o) {
  CLI::App app("minfer batched-bench: many sequences decoded together (llama-batched-bench)",
               "minfer batched-bench");
  add_engine_options(app, o.engine);
  auto* npp = app.add_option("--npp", o.npp, "prompt tokens per sequence, n0,n1,... (-npp; 128)");
  auto* ntg =
      app.add_option("--ntg", o.ntg, "generated tokens per sequence, n0,n1,... (-ntg; 128)");
  auto* npl = app.add_option("--npl", o.npl, "parallel sequences, n0,n1,... (-npl; 1,2,4,8,16)");
  for (auto* opt : {npp, ntg, npl}) opt->delimiter(',')->expected(1, 1 << 20);
  app.add_flag("--pps", o.pp_shared, "one prompt shared by all sequences (-pps)");
  app.add_flag("--tgs", o.tg_separate, "generate sequence after sequence, not together (-tgs)");
  app.add_option("-o,--output,--output-format", o.format, "md or json (one object per row)")
      ->check(CLI::IsMember({"md", "json", "jsonl"}));
  if (auto status = parse_command_line(app, argc, argv)) return status;
  for (const auto* v : {&o.npp, &o.ntg, &o.npl}) {
    if (v->empty()) fail(ErrorKind::InvalidArgument, "-npp / -ntg / -npl need values");
  }
  for (int32_t x : o.npp)
    if (x <= 0) fail(ErrorKind::InvalidArgument, "-npp {} must be > 0", x);
  for (int32_t x : o.ntg)
    if (x < 0) fail(ErrorKind::InvalidArgument, "-ntg {} must be >= 0", x);
  for (int32_t x : o.npl)
    if (x <= 0) fail(ErrorKind::InvalidArgument, "-npl {} must be > 0", x);
  if (o.engine.n_ctx <= 0) o.engine.n_ctx = 4096;
  o.engine.n_seq_max = *std::max_element(o.npl.begin(), o.npl.end());
  o.engine.prefix_cache = false;
  return std::nullopt;
}

// Every row must fit the context (-c) and the KV pool's blocks; names the first that does not.
void check_capacity(const BatchedBenchOptions& o, const SeqEngine& se) {
  const int64_t bs = o.engine.kv_block;
  const int64_t cap = se.kv_capacity();
  const int64_t cap_blocks = (cap + bs - 1) / bs;
  for (int32_t pp : o.npp)
    for (int32_t tg : o.ntg)
      for (int32_t pl : o.npl) {
        const int64_t n_kv = row_n_kv(pp, tg, pl, o.pp_shared);
        const int64_t blocks = row_blocks(pp, tg, pl, o.pp_shared, bs);
        if (n_kv > cap || blocks > cap_blocks)
          fail(ErrorKind::InvalidArgument,
               "-c {} is too small: PP {} TG {} B {} needs N_KV = {} KV cells ({} blocks of {}, "
               "i.e. -c >= {})",
               cap, pp, tg, pl, n_kv, blocks, bs, std::max(n_kv, blocks * bs));
        if (pp + tg > se.n_ctx_seq())
          fail(ErrorKind::InvalidArgument,
               "PP {} + TG {} exceeds one sequence's context {} (the model's training context)", pp,
               tg, se.n_ctx_seq());
      }
}

class Bench {
 public:
  Bench(SeqEngine& se, int32_t n_batch) : se_(se), n_batch_(n_batch), rng_(1234) {}

  int32_t random_token() {
    return std::uniform_int_distribution<int32_t>(0, int32_t(se_.n_vocab() - 1))(rng_);
  }

  // llama.cpp's warm-up (16 tokens of sequence 0) plus one decode step per B.
  void warm_up(const std::vector<int32_t>& npl) {
    se_.clear();
    Batch b;
    for (int32_t i = 0; i < 16; ++i) b.add(random_token(), i, 0, i == 15);
    se_.decode(b);
    for (int32_t pl : npl) {
      se_.clear();
      b.clear();
      for (int32_t j = 0; j < pl; ++j) b.add(random_token(), 0, j, true);
      se_.decode(b);
    }
    se_.clear();
  }

  Row run(int32_t pp, int32_t tg, int32_t pl, bool shared, bool separate) {
    Row r{.pp = pp, .tg = tg, .pl = pl, .n_kv = row_n_kv(pp, tg, pl, shared)};
    // The prompt batches are built before the clock starts, as llama.cpp's.
    std::vector<Batch> chunks(1);
    for (int32_t j = 0; j < (shared ? 1 : pl); ++j) {
      for (int32_t i = 0; i < pp; ++i) {
        if (chunks.back().size() == static_cast<size_t>(n_batch_)) chunks.emplace_back();
        chunks.back().add(random_token(), i, j, i == pp - 1);
      }
    }
    se_.clear();
    const auto t0 = Clock::now();
    for (const Batch& c : chunks) se_.decode(c);
    const auto t1 = Clock::now();
    if (shared)
      for (int32_t j = 1; j < pl; ++j) se_.seq_cp(0, j);
    const auto t2 = Clock::now();
    Batch b;
    if (separate) {
      for (int32_t j = 0; j < pl; ++j)
        for (int32_t i = 0; i < tg; ++i) {
          b.clear();
          b.add(random_token(), pp + i, j, true);
          se_.decode(b);
        }
    } else {
      for (int32_t i = 0; i < tg; ++i) {
        b.clear();
        for (int32_t j = 0; j < pl; ++j) b.add(random_token(), pp + i, j, true);
        se_.decode(b);
      }
    }
    const auto t3 = Clock::now();
    r.t_pp = std::chrono::duration<double>(t1 - t0).count();
    r.t_tg = std::chrono::duration<double>(t3 - t2).count();
    return r;
  }

 private:
  SeqEngine& se_;
  int32_t n_batch_;
  std::mt19937 rng_;
};

struct Speeds {
  double pp, tg, t, all;
};

Speeds speeds(const Row& r, bool shared) {
  const double prompt = shared ? double(r.pp) : double(r.pl) * r.pp;
  const double gen = double(r.pl) * r.tg;
  const double t = r.t_pp + r.t_tg;
  return {r.t_pp > 0 ? prompt / r.t_pp : 0, r.t_tg > 0 ? gen / r.t_tg : 0, t,
          t > 0 ? (prompt + gen) / t : 0};
}

struct Setup {
  const BatchedBenchOptions& o;
  int64_t n_kv_max;
  int threads;
};

void print_md_header(const Setup& s) {
  fmt::print(
      "\nminfer batched-bench: n_kv_max = {}, n_batch = {}, n_ubatch = {}, is_pp_shared = {}, "
      "is_tg_separate = {}, n_threads = {}, kv_block = {}\n\n",
      s.n_kv_max, s.o.engine.n_batch, std::min(s.o.engine.n_ubatch, s.o.engine.n_batch),
      int(s.o.pp_shared), int(s.o.tg_separate), s.threads, s.o.engine.kv_block);
  fmt::print("|{:>6} | {:>6} | {:>4} | {:>6} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} |\n",
             "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
  fmt::print(
      "|{0:->6}-|-{0:->6}-|-{0:->4}-|-{0:->6}-|-{0:->8}-|-{0:->8}-|-{0:->8}-|-{0:->8}-|-{0:->8}-|"
      "-{0:->8}-|\n",
      "");
}

void print_row(const Setup& s, const Row& r, const KvTypes& kv) {
  const Speeds sp = speeds(r, s.o.pp_shared);
  if (s.o.format == "md") {
    fmt::print(
        "|{:>6} | {:>6} | {:>4} | {:>6} | {:>8.3f} | {:>8.2f} | {:>8.3f} | {:>8.2f} | "
        "{:>8.3f} | {:>8.2f} |\n",
        r.pp, r.tg, r.pl, r.n_kv, r.t_pp, sp.pp, r.t_tg, sp.tg, sp.t, sp.all);
  } else {
    const nlohmann::ordered_json j = {
        {"n_kv_max", s.n_kv_max},
        {"n_batch", s.o.engine.n_batch},
        {"n_ubatch", std::min(s.o.engine.n_ubatch, s.o.engine.n_batch)},
        {"is_pp_shared", int(s.o.pp_shared)},
        {"is_tg_separate", int(s.o.tg_separate)},
        {"n_threads", s.threads},
        {"n_threads_batch", s.threads},
        {"kv_block", s.o.engine.kv_block},
        {"type_k", type_name(kv.k)},
        {"type_v", type_name(kv.v)},
        {"pp", r.pp},
        {"tg", r.tg},
        {"pl", r.pl},
        {"n_kv", r.n_kv},
        {"t_pp", r.t_pp},
        {"speed_pp", sp.pp},
        {"t_tg", r.t_tg},
        {"speed_tg", sp.tg},
        {"t", sp.t},
        {"speed", sp.all}};
    fmt::print("{}\n", j.dump());
  }
  std::fflush(stdout);
}

}  // namespace

int cmd_batched_bench(int argc, char** argv) {
  BatchedBenchOptions o;
  if (auto status = parse_options(argc, argv, o)) return *status;
  if (o.engine.exec != "graph")
    fail(ErrorKind::InvalidArgument, "batched-bench needs --exec graph (many sequences)");
  const KvTypes kv = kv_types(o.engine);
  LoadedEngine le = load_engine(o.engine, false);
  auto* se = dynamic_cast<SeqEngine*>(le.engine.get());
  MINFER_ASSERT(se != nullptr, "the graph engine decodes many sequences");
  check_capacity(o, *se);

  Bench bench(*se, o.engine.n_batch);
  bench.warm_up(o.npl);
  const Setup setup{o, se->kv_capacity(),
                    o.engine.n_threads > 0 ? o.engine.n_threads : default_threads()};
  if (o.format == "md") print_md_header(setup);
  for (int32_t pp : o.npp)
    for (int32_t tg : o.ntg)
      for (int32_t pl : o.npl)
        print_row(setup, bench.run(pp, tg, pl, o.pp_shared, o.tg_separate), kv);
  if (o.format == "md") fmt::print("\n");
  return 0;
}

}  // namespace minfer::app
