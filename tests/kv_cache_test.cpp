// minfer-test-libs: minfer_eager minfer_model minfer_kv minfer_backend_cpu
// KV cache element types (f32 / f16 / q8_0): the type names, the CPU kernels that write and read
// f16 and Q8_0 rows (fast paths at every SIMD level against the reference twins), the
// allocator's regions, and whole models: f16 vs f32 logits on stories260K, q8_0 vs f16 logits
// on a generated head_dim-64 model, graph vs eager with f16 and q8_0, `minfer` flags.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/ref_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "common/error.h"
#include "common/fp16.h"
#include "common/quant.h"
#include "cpu_test_util.h"
#include "eager/forward.h"
#include "kv/cache_type.h"
#include "model/model.h"
#include "model/session.h"
#include "numeric_test_util.h"
#include "tiny_model.h"

namespace minfer {
namespace {

using test::max_abs_diff;

namespace fs = std::filesystem;
using cpu::AttentionArgs;
using cpu::HeadLayout;
using cpu::KvRegions;
using cpu::SimdLevel;

// ---- type names ------------------------------------------------------------------------------

TEST(KvCacheType, ParsesCaseInsensitiveAndNamesTheFlagOnError) {
  EXPECT_EQ(parse_kv_cache_type("--cache-type-k", "f16"), GgmlType::F16);
  EXPECT_EQ(parse_kv_cache_type("--cache-type-k", "F16"), GgmlType::F16);
  EXPECT_EQ(parse_kv_cache_type("--cache-type-v", "F32"), GgmlType::F32);
  EXPECT_EQ(parse_kv_cache_type("--cache-type-k", "q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(parse_kv_cache_type("--cache-type-v", "Q8_0"), GgmlType::Q8_0);
  for (const char* bad : {"q5_1", "q4_0", "bogus", "", "f64x"}) {
    try {
      parse_kv_cache_type("--cache-type-v", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--cache-type-v"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    }
  }
  // Qwen2.5-0.5B: 24 layers, 2 KV heads of 64, 4096 tokens: 96 MiB f32, 48 MiB f16.
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::F32, GgmlType::F32), 96ull << 20);
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::F16, GgmlType::F16), 48ull << 20);
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::F16, GgmlType::F32), 72ull << 20);
  // q8_0: 34 bytes per 32 values (4 blocks a row of 128): 25.5 MiB, 17/32 of f16.
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::Q8_0, GgmlType::Q8_0),
            24ull * 4096 * 2 * (4 * 34));
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::Q8_0, GgmlType::Q8_0) * 32,
            kv_cache_bytes(24, 128, 4096, GgmlType::F16, GgmlType::F16) * 17);
  EXPECT_EQ(kv_cache_bytes(24, 128, 4096, GgmlType::Q8_0, GgmlType::F16),
            24ull * 4096 * (4 * 34 + 128 * 2));
}

TEST(KvCacheType, Q8_0NeedsHeadDimAMultipleOf32) {
  EXPECT_NO_THROW(check_kv_cache_type_fits("--cache-type-k", GgmlType::Q8_0, 64, 128));
  EXPECT_NO_THROW(check_kv_cache_type_fits("--cache-type-k", GgmlType::Q8_0, 32, 32));
  for (GgmlType t : {GgmlType::F32, GgmlType::F16})
    EXPECT_NO_THROW(check_kv_cache_type_fits("--cache-type-k", t, 8, 32));
  // stories260K: head_dim 8, 4 KV heads (rows of 32 would fit, heads would not); and 48.
  for (int64_t hd : {8, 48, 0}) {
    try {
      check_kv_cache_type_fits("--cache-type-v", GgmlType::Q8_0, hd, 4 * hd);
      ADD_FAILURE() << "accepted head_dim " << hd;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      const std::string msg = e.what();
      for (const std::string& part :
           {std::string("--cache-type-v"), std::string("'q8_0'"), "head_dim " + std::to_string(hd),
            std::string("multiple of 32")})
        EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
    }
  }
}

// ---- allocator regions -----------------------------------------------------------------------

std::vector<uint8_t> tiny_bytes() {
  testing::TinySpec spec;
  spec.n_ff = 64;
  return testing::make_tiny_model(spec);
}

// A generated model q8_0 can serve: head_dim 64 (4 heads, 2 KV heads: GQA), Qwen2 (QKV biases,
// so the fused epilogue adds them before quantizing).
std::vector<uint8_t> tiny_hd64_bytes(const std::string& arch = "qwen2") {
  testing::TinySpec spec;
  spec.arch = arch;
  spec.n_embd = 256;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 128;
  spec.n_vocab = 64;
  spec.weight_std = 0.0625f;  // 1/sqrt(n_embd): attention scores of a few units
  return testing::make_tiny_model(spec);
}

TEST(KvRegions, SizedByTypeAndFixedForTheAllocatorsLife) {
  const auto bytes = tiny_bytes();
  auto model = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
  const HParams& hp = model->hparams();
  GraphParams gp;
  gp.n_tokens = 3;
  gp.n_outputs = 1;
  gp.cparams.n_ctx = 32;
  gp.cparams.type_k = GgmlType::F16;
  gp.cparams.type_v = GgmlType::F32;
  const Graph g = model->build_graph(gp);
  for (const Node& n : g.nodes()) {
    if (n.op == Op::KvStore) {
      EXPECT_EQ(n.type, GgmlType::F16);
      EXPECT_EQ(n.n_bytes(), static_cast<size_t>(hp.n_kv_embd() * 32 * 2));
    }
  }
  SessionParams sp;
  sp.n_ctx = 32;
  sp.type_k = GgmlType::F16;
  sp.type_v = GgmlType::F32;
  Session s(*model, sp);
  const int32_t toks[3] = {1, 2, 3};
  s.eval_last(toks, 0);
  EXPECT_EQ(s.kv_bytes(),
            kv_cache_bytes(hp.n_layer, hp.n_kv_embd(), 32, GgmlType::F16, GgmlType::F32));
  EXPECT_EQ(s.mem_report().kv_type_k, GgmlType::F16);
  EXPECT_EQ(s.mem_report().kv_type_v, GgmlType::F32);

  // The same allocator asked for other KV types: an error, not a silent reinterpretation.
  GraphCache<GraphParams> gc;
  cpu::CpuBackendOptions bo;
  cpu::CpuBackend be(bo);
  gc.allocator().set_backend(be);
  gc.replace_graph(model->build_graph(gp), gp);
  GraphParams other = gp;
  other.cparams.type_v = GgmlType::F16;
  EXPECT_THROW(gc.replace_graph(model->build_graph(other), other), Error);
  gc.allocator().reset();

  SessionParams bad = sp;
  bad.type_k = GgmlType::Q4_0;
  EXPECT_THROW(Session(*model, bad), Error);
  // The tiny model's head_dim is 8: q8_0 is refused with InvalidArgument by the session, the
  // eager session and the graph builder alike (never an abort in the allocator or a kernel).
  ASSERT_EQ(hp.head_dim, 8);
  bad.type_k = GgmlType::F16;
  bad.type_v = GgmlType::Q8_0;
  try {
    Session sq(*model, bad);
    ADD_FAILURE() << "q8_0 accepted with head_dim 8";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("head_dim 8"), std::string::npos) << e.what();
  }
  eager::EagerParams ep;
  ep.n_ctx = 32;
  ep.kv_type = GgmlType::Q8_0;
  EXPECT_THROW(eager::EagerSession(*model, ep), Error);
  GraphParams gq = gp;
  gq.cparams.type_k = GgmlType::Q8_0;
  EXPECT_THROW(model->build_graph(gq), Error);
}

// q8_0 regions: 34 bytes per 32 values, in the graph node, the allocator and the report.
TEST(KvRegions, Q8_0RegionsAreBlockRows) {
  testing::TinySpec spec;
  spec.n_embd = 128;
  spec.n_head = 2;  // head_dim 64
  spec.n_head_kv = 1;
  spec.n_ff = 64;
  const auto bytes = testing::make_tiny_model(spec);
  auto model = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
  const HParams& hp = model->hparams();
  ASSERT_EQ(hp.head_dim, 64);
  GraphParams gp;
  gp.n_tokens = 3;
  gp.n_outputs = 1;
  gp.cparams.n_ctx = 32;
  gp.cparams.type_k = gp.cparams.type_v = GgmlType::Q8_0;
  const Graph g = model->build_graph(gp);  // a named graph: nodes() borrows from it
  for (const Node& n : g.nodes()) {
    if (n.op == Op::KvStore) {
      EXPECT_EQ(n.n_bytes(), static_cast<size_t>(64 / 32 * 34 * 32));
    }
  }
  SessionParams sp;
  sp.n_ctx = 32;
  sp.type_k = sp.type_v = GgmlType::Q8_0;
  Session s(*model, sp);
  const int32_t toks[3] = {1, 2, 3};
  s.eval_last(toks, 0);
  EXPECT_EQ(s.kv_bytes(), kv_cache_bytes(hp.n_layer, 64, 32, GgmlType::Q8_0, GgmlType::Q8_0));
  EXPECT_EQ(s.kv_bytes(), static_cast<uint64_t>(hp.n_layer) * 2 * 32 * 68);
  EXPECT_EQ(s.mem_report().kv_type_k, GgmlType::Q8_0);
}

// ---- whole models ----------------------------------------------------------------------------

const fs::path kShared = MINFER_SHARED_DIR;
const fs::path kStories = kShared / "models" / "stories260K.gguf";

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy prefill + decode with f16 and f32 caches side by side: the logits stay close (f16
// rounds each cached element by <= 2^-11 relative) and the greedy tokens are the same.
TEST(KvModel, Stories260KF16LogitsCloseToF32) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "../shared absent: " << kStories;
  auto model = Model::load(kStories.string());
  for (bool fused : {true, false}) {
    if (fused) model->prepare_fused_qkv();
    SessionParams p32, p16;
    p32.n_ctx = p16.n_ctx = 512;
    p32.n_threads = p16.n_threads = 2;
    p32.fusion = p16.fusion = FusionToggles{fused, fused, fused};
    p32.type_k = p32.type_v = GgmlType::F32;
    p16.type_k = p16.type_v = GgmlType::F16;
    Session s32(*model, p32), s16(*model, p16);
    std::vector<int32_t> in = {1, 403, 407, 261, 378, 312, 1161 % 512, 288};
    int64_t pos = 0;
    double worst = 0;
    int32_t tok = 0;
    for (int step = 0; step < 200; ++step) {
      std::vector<float> a;
      {
        const std::span<const float> l = s32.eval_last(in, pos);
        a.assign(l.begin(), l.end());
      }
      const std::span<const float> b = s16.eval_last(in, pos);
      worst = std::max(worst, max_abs_diff(a, b));
      ASSERT_EQ(argmax(a), argmax(b)) << "step " << step;
      pos += static_cast<int64_t>(in.size());
      tok = argmax(a);
      in.assign(1, tok);
    }
    EXPECT_EQ(s16.kv_bytes() * 2, s32.kv_bytes());
    EXPECT_LT(worst, 0.06) << (fused ? "fused" : "unfused");
    std::printf(
        "[ report ] stories260K %s, 208 positions: max |logit f16 KV - logit f32 KV| = %.3g\n",
        fused ? "fused" : "unfused", worst);
  }
}

// Eager and graph call the same kernels in the same order: bit-identical logits.
void eager_and_graph_bit_identical(const std::vector<uint8_t>& bytes, GgmlType type) {
  for (bool fused : {true, false}) {
    auto model = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
    if (fused) model->prepare_fused_qkv();
    SessionParams gp;
    gp.n_ctx = 64;
    gp.n_ubatch = 4;
    gp.fusion = FusionToggles{fused, fused, fused};
    gp.type_k = gp.type_v = type;
    eager::EagerParams ep;
    ep.n_ctx = 64;
    ep.n_ubatch = 4;
    ep.fusion = gp.fusion;
    ep.kv_type = type;
    Session graph(*model, gp);
    eager::EagerSession eager(*model, ep);
    const std::vector<int32_t> prompt = {1, 5, 9, 33, 2, 60, 17};
    std::vector<float> g;
    {
      const std::span<const float> s = graph.eval_last(prompt, 0);
      g.assign(s.begin(), s.end());
    }
    EXPECT_EQ(max_abs_diff(g, eager.eval_last(prompt, 0)), 0.0);
    int32_t tok = 7;
    for (int64_t pos = 7; pos < 20; ++pos) {
      const int32_t one[1] = {tok};
      {
        const std::span<const float> s = graph.eval_last(one, pos);
        g.assign(s.begin(), s.end());
      }
      const std::span<const float> e = eager.eval_last(one, pos);
      EXPECT_EQ(max_abs_diff(g, e), 0.0) << "pos " << pos;
      tok = argmax(e);
    }
    EXPECT_EQ(eager.eager_mem_report().heap_allocations_after_warmup, 0);
    EXPECT_EQ(eager.mem_report().kv_bytes, graph.kv_bytes());
  }
}

// Eager and graph call the same kernels in the same order, with f16 and q8_0 caches too.
TEST(KvModel, EagerAndGraphBitIdenticalWithF16AndQ8_0) {
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
    SCOPED_TRACE(std::string(type_name(type)));
    eager_and_graph_bit_identical(type == GgmlType::Q8_0 ? tiny_hd64_bytes() : tiny_bytes(), type);
  }
}

// Greedy prefill + decode on the head_dim-64 model with f16 and q8_0 caches side by side.
// Tolerance: a q8_0 value is off by up to amax / 254 of its 32-value block, an RMS error of
// ~0.5% of a Gaussian block's spread, against ~0.02% for f16's 11-bit mantissa: about 25x. On
// this model f16 moves the logits (range ~+-2.5) by <= 0.0015 from f32, and q8_0 by <= 0.035
// (measured: 87 positions, fused and unfused alike), so the bound is 0.06; a misplaced block or
// scale moves them by whole units. The greedy tokens agree at every step (their gaps are wider).
TEST(KvModel, Q8_0LogitsCloseToF16OnAHeadDim64Model) {
  const auto bytes = tiny_hd64_bytes();
  for (bool fused : {true, false}) {
    auto model = Model::from_file(gguf::File::from_memory(bytes.data(), bytes.size(), "tiny.gguf"));
    ASSERT_EQ(model->hparams().head_dim, 64);
    if (fused) model->prepare_fused_qkv();
    SessionParams p16, p8;
    p16.n_ctx = p8.n_ctx = 128;
    p16.n_threads = p8.n_threads = 2;
    p16.n_ubatch = p8.n_ubatch = 16;  // the 40-token prompt runs as 3 micro-batches
    p16.fusion = p8.fusion = FusionToggles{fused, fused, fused};
    p16.type_k = p16.type_v = GgmlType::F16;
    p8.type_k = p8.type_v = GgmlType::Q8_0;
    Session s16(*model, p16), s8(*model, p8);
    std::vector<int32_t> in(40);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>((i * 37 + 5) % 64);
    int64_t pos = 0;
    double worst = 0;
    int same = 0, steps = 48;
    for (int step = 0; step < steps; ++step) {
      std::vector<float> a;
      {
        const std::span<const float> l = s16.eval_last(in, pos);
        a.assign(l.begin(), l.end());
      }
      const std::span<const float> b = s8.eval_last(in, pos);
      worst = std::max(worst, max_abs_diff(a, b));
      same += argmax(a) == argmax(b);
      pos += static_cast<int64_t>(in.size());
      in.assign(1, argmax(a));  // both follow the f16 tokens: positions and inputs stay equal
    }
    EXPECT_LT(worst, 0.05) << (fused ? "fused" : "unfused");
    EXPECT_EQ(same, steps) << "greedy tokens differ";
    EXPECT_EQ(s8.kv_bytes() * 32, s16.kv_bytes() * 17);
    std::printf(
        "[ report ] head_dim-64 qwen2 %s, %lld positions: max |logit q8_0 KV - logit f16 "
        "KV| = %.3g, greedy tokens equal %d/%d\n",
        fused ? "fused" : "unfused", static_cast<long long>(pos), worst, same, steps);
  }
}
// ---- the CLI ---------------------------------------------------------------------------------

struct Result {
  int status = -1;
  std::string out, err;
};

Result run(const std::string& args) {
  const fs::path dir = fs::temp_directory_path();
  const std::string tag = std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                          std::to_string(reinterpret_cast<uintptr_t>(&args));
  const fs::path out = dir / ("kv_cli_out_" + tag), err = dir / ("kv_cli_err_" + tag);
  const std::string cmd = std::string(MINFER_BINARY) + " " + args + " >" + out.string() + " 2>" +
                          err.string() + " </dev/null";
  Result r;
  const int st = std::system(cmd.c_str());
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  auto slurp = [](const fs::path& p) {
    std::FILE* f = std::fopen(p.string().c_str(), "rb");
    std::string s;
    if (!f) return s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

TEST(KvCli, RunReportsTypesAndRejectsBadValues) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "../shared absent: " << kStories;
  const std::string m = kStories.string();
  const Result d = run("run -m " + m + " -p 'Once upon a time' -n 8 --temp 0 -t 1");
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_NE(d.err.find("KV cache type K f16 V f16"), std::string::npos) << d.err;
  const Result f = run("run -m " + m +
                       " -p 'Once upon a time' -n 8 --temp 0 -t 1 -ctk F32 "
                       "--cache-type-v f32");
  ASSERT_EQ(f.status, 0) << f.err;
  EXPECT_NE(f.err.find("KV cache type K f32 V f32"), std::string::npos) << f.err;
  EXPECT_EQ(f.out, d.out);  // same greedy text on this prompt
  const Result e = run("run -m " + m + " -p hi -n 2 --exec eager -ctk f32 -ctv f32");
  EXPECT_EQ(e.status, 0) << e.err;
  for (const char* args : {"-ctk q4_0", "-ctv nonsense", "--cache-type-k f8"}) {
    const Result b = run("run -m " + m + " -p hi -n 2 " + args);
    EXPECT_NE(b.status, 0) << args;
    const std::string flag =
        std::string(args).find("ctv") != std::string::npos ? "--cache-type-v" : "--cache-type-k";
    EXPECT_NE(b.err.find(flag), std::string::npos) << b.err;
    EXPECT_NE(b.err.find("use f32, f16 or q8_0"), std::string::npos) << b.err;
  }
  const Result mixed = run("run -m " + m + " -p hi -n 2 --exec eager -ctk f32");
  EXPECT_NE(mixed.status, 0);
  // q8_0 is a known type, but stories260K's heads of 8 cannot hold 32-value blocks: a clean
  // error naming the flag, the value and the head_dim, in graph and eager mode, run and plan.
  for (const std::string& cmd : {"run -m " + m + " -p hi -n 2 -ctk q8_0",
                                 "run -m " + m +
                                     " -p hi -n 2 --exec eager -ctk "
                                     "q8_0 -ctv q8_0",
                                 "plan -m " + m + " -c 64 --n-tokens 4 -ctv Q8_0"}) {
    const Result q = run(cmd);
    EXPECT_EQ(q.status, 1) << cmd << ": " << q.err;
    const std::string flag =
        cmd.find("-ctv Q8_0") != std::string::npos ? "--cache-type-v" : "--cache-type-k";
    for (const std::string& part :
         {flag + " 'q8_0'", std::string("head_dim 8"), std::string("multiple of 32")})
      EXPECT_NE(q.err.find(part), std::string::npos) << cmd << ": " << part << " in " << q.err;
  }
}

TEST(KvCli, PlanKvBytesFollowTheTypeAndBenchShowsIt) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "../shared absent: " << kStories;
  const std::string m = kStories.string();
  uint64_t kv[2] = {0, 0};
  int i = 0;
  for (const char* t : {"f32", "f16"}) {
    const Result r = run("plan -m " + m + " -c 256 --n-tokens 8 -o json -ctk " + t + " -ctv " + t);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    kv[i++] = j["kv_bytes"].get<uint64_t>();
    EXPECT_EQ(j["type_k"].get<std::string>(), t);
    EXPECT_EQ(j["type_v"].get<std::string>(), t);
  }
  EXPECT_EQ(kv[0], 2 * kv[1]);
  // stories260K: 5 layers, 4 KV heads of 8, 256 tokens, f16.
  EXPECT_EQ(kv[1], kv_cache_bytes(5, 32, 256, GgmlType::F16, GgmlType::F16));
  const Result b = run("bench -m " + m + " -p 8 -n 2 -r 1 -t 1 -ctk f32 -ctv f32");
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_NE(b.out.find("type_k"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("f32"), std::string::npos) << b.out;
  const Result bj = run("bench -m " + m + " -p 0 -n 2 -r 1 -t 1 -o json");
  ASSERT_EQ(bj.status, 0) << bj.err;
  EXPECT_EQ(nlohmann::json::parse(bj.out)[0]["type_k"].get<std::string>(), "f16");
  // At a depth (llama-bench -d): decode reads the prefilled positions.
  const Result bd = run("bench -m " + m + " -p 4 -n 2 -d 40 -r 1 -t 1 -o json");
  ASSERT_EQ(bd.status, 0) << bd.err;
  const auto jd = nlohmann::json::parse(bd.out);
  EXPECT_EQ(jd[1]["test"].get<std::string>(), "tg2 @ d40");
  EXPECT_EQ(jd[1]["n_depth"].get<int64_t>(), 40);
}

// plan's kv_bytes for q8_0 on a model whose heads hold whole blocks (the generated
// head_dim-64 model written to a temporary file): 34 bytes per 32 values.
TEST(KvCli, PlanKvBytesForQ8_0) {
  const auto bytes = tiny_hd64_bytes("llama");
  const fs::path file =
      fs::temp_directory_path() /
      ("kv_q8_plan_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".gguf");
  {
    std::FILE* f = std::fopen(file.string().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  uint64_t kv[2] = {0, 0};
  int i = 0;
  for (const char* t : {"f16", "q8_0"}) {
    const Result r =
        run("plan -m " + file.string() + " -c 256 --n-tokens 8 -o json -ctk " + t + " -ctv " + t);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    kv[i++] = j["kv_bytes"].get<uint64_t>();
    EXPECT_EQ(j["type_k"].get<std::string>(), t);
  }
  fs::remove(file);
  // 2 layers, 2 KV heads of 64, 256 tokens.
  EXPECT_EQ(kv[1], kv_cache_bytes(2, 128, 256, GgmlType::Q8_0, GgmlType::Q8_0));
  EXPECT_EQ(kv[1], 2ull * 256 * 2 * (4 * 34));
  EXPECT_EQ(kv[1] * 32, kv[0] * 17);
}

}  // namespace
}  // namespace minfer
