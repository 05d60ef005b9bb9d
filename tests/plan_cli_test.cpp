// minfer-test-libs: minfer_planner
// `minfer plan` end to end through the built binary: interval CSVs (good and malformed), the
// model mode's JSON on stories260K, and the HTML page rendered in headless Chromium.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "planner/intervals.h"
#include "planner/offset_planner.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

struct CmdResult {
  int status = -1;
  std::string out;  // stdout and stderr together
};

CmdResult run_minfer(const std::string& args) {
  CmdResult r;
  std::string cmd = std::string(MINFER_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("minfer_plan_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(PlanCli, PacksIntervalsAndWritesSolution) {
  // The chain x0..x3 of 8 bytes each: two slots, height 16 = lower bound.
  std::string in = write("chain.csv", "id,lower,upper,size\n0,0,2,8\n1,1,3,8\n2,2,4,8\n3,3,5,8\n");
  std::string out = (dir_ / "sol.csv").string();
  CmdResult r = run_minfer("plan --intervals " + in + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("height:      16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lower bound: 16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over bound:  0.00%"), std::string::npos) << r.out;
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "id,lower,upper,size,offset\n0,0,2,8,0\n1,1,3,8,8\n2,2,4,8,0\n3,3,5,8,8\n");
}

TEST_F(PlanCli, CapacityIsAQuestionOfFitting) {
  // Two pairs of 8-byte buffers, each pair live together: 16 bytes is the least (the bound).
  std::string in = write("cap.csv", "id,lower,upper,size\n0,0,2,8\n1,1,3,8\n2,2,4,8\n3,3,5,8\n");
  CmdResult fits = run_minfer("plan --intervals " + in + " --capacity 16");
  ASSERT_EQ(fits.status, 0) << fits.out;
  EXPECT_NE(fits.out.find("height:      16"), std::string::npos) << fits.out;
  // 15 bytes cannot hold two live 8-byte buffers: an error naming the file and the capacity,
  // and no solution file.
  std::string out = (dir_ / "cap_sol.csv").string();
  CmdResult no =
      run_minfer("plan --intervals " + in + " --capacity 15 --exact --time-limit 1 --out " + out);
  EXPECT_EQ(no.status, 1) << no.out;
  EXPECT_NE(no.out.find("cap.csv: no plan within --capacity 15 bytes found (best height 16"),
            std::string::npos)
      << no.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(PlanCli, BadCapacityIsRejected) {
  std::string in = write("cap2.csv", "id,lower,upper,size\n0,0,2,8\n");
  for (const char* bad : {"-5", "0", "abc"}) {
    CmdResult r = run_minfer("plan --intervals " + in + " --capacity " + bad);
    EXPECT_NE(r.status, 0) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--capacity"), std::string::npos) << bad << ": " << r.out;
  }
}

TEST_F(PlanCli, ExactModeOnABenchInstance) {
  fs::path a = fs::path(MINFER_SHARED_DIR) / "planner-bench" / "A.1048576.csv";
  if (!fs::exists(a)) GTEST_SKIP() << "no " << a << " (shared data absent)";
  std::string out = (dir_ / "a.csv").string();
  CmdResult r =
      run_minfer("plan --intervals " + a.string() + " --exact --time-limit 0.2 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("lower bound: 1048576"), std::string::npos) << r.out;
  // The written solution is a valid plan of the input.
  std::ifstream f(out);
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line, "id,lower,upper,size,offset");
  std::vector<PlanBuffer> bufs = read_intervals_csv(a.string());
  std::vector<uint64_t> offs;
  uint64_t height = 0;
  while (std::getline(f, line)) {
    uint64_t off = std::stoull(line.substr(line.rfind(',') + 1));
    offs.push_back(off);
    height = std::max(height, off + bufs[offs.size() - 1].size);
  }
  ASSERT_EQ(offs.size(), bufs.size());
  EXPECT_EQ(check_offsets(bufs, offs, height), "");
}

TEST_F(PlanCli, MalformedCsvIsRejectedWithTheLine) {
  const std::string h = "id,lower,upper,size\n";
  const std::pair<std::string, std::string> cases[] = {
      {h + "0,0,3,16\n1,0,3\n", ":3: expected 4 fields, got 3"},
      {h + "0,0,abc,16\n", ":2: field 'upper' is not an integer"},
      {h + "0,0,3,-16\n", ":2: negative size -16"},
      {h + "0,5,3,16\n", ":2: upper 3 <= lower 5"},
      {h + "4,0,3,16\n4,1,3,16\n", ":3: duplicate id 4 (first on line 2)"},
  };
  int i = 0;
  for (const auto& [text, want] : cases) {
    std::string path = write("bad" + std::to_string(i++) + ".csv", text);
    CmdResult r = run_minfer("plan --intervals " + path);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(path + want), std::string::npos) << "want '" << want << "' in: " << r.out;
  }
  CmdResult none = run_minfer("plan --intervals " + (dir_ / "missing.csv").string());
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.out.find("cannot open"), std::string::npos) << none.out;
}

fs::path stories() {
  return fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
}

// Issue #15: 16 rows of 2^60 bytes wrapped the height past 2^64 and printed "(optimal)" with
// exit 0; now the line where the sum passes the limit is named, and nothing is planned.
TEST_F(PlanCli, SizesWhoseSumWrapsAreRejectedWithTheLine) {
  std::string text = "id,lower,upper,size\n";
  for (int i = 0; i < 16; ++i) text += std::to_string(i) + ",0,1,1152921504606846976\n";
  for (const char* mode : {"", " --exact"}) {
    CmdResult r = run_minfer("plan --intervals " + write("wrap16.csv", text) + mode);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("wrap16.csv:3:"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("optimal"), std::string::npos) << r.out;
  }
}

// Issue #15, "a staggered input exits with 'planner produced an invalid plan'": the same wrap
// in another shape. 40 rows of 2^60 bytes with staggered lifetimes [i, i + 17) keep 17 of them
// live at once; before the sum limit (8dfafce) the 17th offset wrapped to 0 and the checker
// refused the plan in both modes ("buffers 16 [0, 2^60) ... and 0 [0, 2^60) overlap",
// reproduced on 8dfafce^'s planner). Now the line where the sum passes 2^60 is named.
TEST_F(PlanCli, StaggeredSizesThatWouldWrapAreRejectedNotPlannedInvalid) {
  std::string text = "id,lower,upper,size,alignment\n";
  for (int i = 0; i < 40; ++i)
    text += std::to_string(i) + "," + std::to_string(i) + "," + std::to_string(i + 17) +
            ",1152921504606846976," + (i % 2 ? "1048576" : "1") + "\n";
  for (const char* mode : {"", " --exact"}) {
    CmdResult r = run_minfer("plan --intervals " + write("stagger40.csv", text) + mode);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("stagger40.csv:3:"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("invalid plan"), std::string::npos) << r.out;
  }
}

TEST_F(PlanCli, BadTimeLimitIsRejected) {
  std::string in = write("c.csv", "id,lower,upper,size\n0,0,2,8\n");
  for (const char* v : {"-1", "nan", "inf"}) {
    CmdResult r = run_minfer("plan --intervals " + in + " --time-limit " + v);
    EXPECT_EQ(r.status, 1) << v << ": " << r.out;
    EXPECT_NE(r.out.find("--time-limit"), std::string::npos) << r.out;
  }
  // A huge budget means "no limit", not an overflowing deadline (UBSan: float-cast-overflow).
  for (const char* mode : {"", " --exact"}) {
    CmdResult r = run_minfer("plan --intervals " + in + " --time-limit 1e300" + mode);
    EXPECT_EQ(r.status, 0) << r.out;
  }
}

TEST_F(PlanCli, ModelJsonHasTheFigures) {
  if (!fs::exists(stories())) GTEST_SKIP() << "no " << stories() << " (shared data absent)";
  for (const char* shape : {"--n-tokens 512 --n-out 1", "--n-tokens 1 --n-out 1"}) {
    CmdResult r = run_minfer("plan -m " + stories().string() + " -c 2048 " + shape + " -o json");
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out);
    for (const char* k : {"n_nodes", "naive_bytes", "size_class_bytes", "arena_bytes",
                          "lower_bound_bytes", "kv_bytes", "plan_us"}) {
      EXPECT_TRUE(j.contains(k)) << k;
    }
    const auto arena = j["arena_bytes"].get<uint64_t>();
    const auto lb = j["lower_bound_bytes"].get<uint64_t>();
    EXPECT_GE(arena, lb);
    // Target: within 0.5% of the lower bound on LLM graphs (alignment padding included).
    EXPECT_LE(static_cast<double>(arena), static_cast<double>(lb) * 1.005) << shape;
    EXPECT_LE(arena, j["size_class_bytes"].get<uint64_t>());
    EXPECT_LE(arena, j["naive_bytes"].get<uint64_t>());
    EXPECT_GT(j["kv_bytes"].get<uint64_t>(), 0u);
    // The paged cache: the pool (2048 tokens = 128 blocks of 16, plus the null block) is
    // reserved; one sequence of n-tokens commits its own blocks and the null block only.
    const auto block = j["kv_block_bytes"].get<uint64_t>();
    EXPECT_EQ(j["kv_reserved_bytes"].get<uint64_t>(), 129 * block);
    const uint64_t n_tok = j["n_tokens"].get<uint64_t>();
    EXPECT_EQ(j["kv_committed_bytes"].get<uint64_t>(), ((n_tok + 15) / 16 + 1) * block) << shape;
    EXPECT_GE(block * 128, j["kv_bytes"].get<uint64_t>());
  }
}

// -c 0 is the training context (as `minfer run -c 0`); a negative -c names the flag. Both were
// "build_graph: bad params n_tokens 512 n_outputs 1 n_ctx 0".
TEST_F(PlanCli, ContextZeroIsTheTrainingContext) {
  if (!fs::exists(stories())) GTEST_SKIP() << "no " << stories() << " (shared data absent)";
  const CmdResult zero = run_minfer("plan -m " + stories().string() + " -c 0 -o json");
  ASSERT_EQ(zero.status, 0) << zero.out;
  EXPECT_EQ(nlohmann::json::parse(zero.out)["n_ctx"], 2048);
  const CmdResult neg = run_minfer("plan -m " + stories().string() + " -c -5");
  EXPECT_EQ(neg.status, 1) << neg.out;
  EXPECT_NE(neg.out.find("-c -5 must be >= 0"), std::string::npos) << neg.out;
}

// --device sim -ngl N: the assignment's splits and staging copies, one arena per backend.
// stories260K (5 layers) with the sim's default table (no RmsNorm on the device): per offloaded
// layer the two norms fall back to the cpu, four cuts; -ngl 0 is one cpu split.
TEST_F(PlanCli, DeviceSimShowsSplitsStagingAndPerBackendArenas) {
  if (!fs::exists(stories())) GTEST_SKIP() << "no " << stories() << " (shared data absent)";
  for (int ngl : {0, 2, 5, 6}) {
    CmdResult r =
        run_minfer("plan -m " + stories().string() + " -c 256 --n-tokens 4 --device sim -ngl " +
                   std::to_string(ngl) + " -o json");
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json& a = j["assignment"];
    const size_t n_splits = a["splits"].size();
    EXPECT_EQ(a["n_cuts"].get<size_t>() + 1, n_splits);
    // Offloaded layer: cpu norm | sim attention .. residual | cpu norm | sim ffn .. residual.
    // -ngl 6 > n_layer: the head too; its norm falls back, the output matmul is one more split.
    const size_t want = 1 + 4 * static_cast<size_t>(std::min(ngl, 5)) + (ngl > 5 ? 1 : 0);
    EXPECT_EQ(n_splits, want) << "-ngl " << ngl << "\n" << r.out;
    uint64_t staged = 0;
    for (const auto& s : a["staging"]) staged += s["bytes"].get<uint64_t>();
    EXPECT_EQ(staged, a["staging_bytes"].get<uint64_t>());
    EXPECT_EQ(ngl == 0, staged == 0);
    uint64_t arenas = 0;
    for (const auto& b : j["backends"]) {
      EXPECT_GE(b["arena_bytes"].get<uint64_t>(), b["lower_bound_bytes"].get<uint64_t>());
      arenas += b["arena_bytes"].get<uint64_t>();
    }
    // The graph's own intervals (arena_bytes) plus the staging windows.
    EXPECT_GE(arenas, j["arena_bytes"].get<uint64_t>());
    EXPECT_EQ(arenas == j["arena_bytes"].get<uint64_t>(), ngl == 0);
    EXPECT_EQ(j["backends"][1]["nodes"].get<uint64_t>() > 0, ngl > 0);
  }
  CmdResult text = run_minfer("plan -m " + stories().string() +
                              " -c 256 --n-tokens 4 --device "
                              "sim -ngl 1");
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find("split 1 on sim"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("stage 'positions' cpu -> sim: 16 B"), std::string::npos) << text.out;
  EXPECT_NE(run_minfer("plan -m " + stories().string() + " --device sim -ngl -1").status, 0);
}

// Where every byte lives: JSON always lists the buffers, text with --buffers; each buffer has
// its name, op, shape, type, bytes, offset and steps, the offsets fit in the arena, and no two
// buffers live at the same time share bytes.
TEST_F(PlanCli, BuffersTableInJsonAndText) {
  if (!fs::exists(stories())) GTEST_SKIP() << "no " << stories() << " (shared data absent)";
  const std::string m = stories().string();
  CmdResult r = run_minfer("plan -m " + m + " -c 256 --n-tokens 32 -o json");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("buffers"));
  const auto& bufs = j["buffers"];
  ASSERT_GT(bufs.size(), 10u);
  const auto arena = j["arena_bytes"].get<uint64_t>();
  size_t in_place = 0;
  for (const auto& b : bufs) {
    for (const char* k :
         {"name", "op", "shape", "type", "bytes", "offset", "first_step", "last_step", "in_place"})
      ASSERT_TRUE(b.contains(k)) << k << " missing in " << b.dump();
    EXPECT_LE(b["offset"].get<uint64_t>() + b["bytes"].get<uint64_t>(), arena) << b.dump();
    EXPECT_LE(b["first_step"].get<int>(), b["last_step"].get<int>()) << b.dump();
    in_place += b["in_place"].size();
  }
  EXPECT_GT(in_place, 0u) << "the residual adds write in place";
  for (size_t a = 0; a < bufs.size(); ++a)
    for (size_t b = a + 1; b < bufs.size(); ++b) {
      const auto &x = bufs[a], &y = bufs[b];
      const bool time = x["first_step"] <= y["last_step"] && y["first_step"] <= x["last_step"];
      const uint64_t xo = x["offset"], yo = y["offset"], xb = x["bytes"], yb = y["bytes"];
      const bool space = xo < yo + yb && yo < xo + xb;
      EXPECT_FALSE(time && space) << x.dump() << " overlaps " << y.dump();
    }
  CmdResult plain = run_minfer("plan -m " + m + " -c 256 --n-tokens 32");
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_EQ(plain.out.find("buffers ("), std::string::npos) << "table only with --buffers";
  CmdResult t = run_minfer("plan -m " + m + " -c 256 --n-tokens 32 --buffers");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("buffers (" + std::to_string(bufs.size()) + ")"), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find(bufs[0]["name"].get<std::string>()), std::string::npos);
  EXPECT_NE(t.out.find("[in place]"), std::string::npos);
}

// Renders the HTML page in headless Chromium and checks the screenshot. What this checks,
// honestly: the page loads and paints, and the PNG is not one flat colour — the IDAT stream of
// an all-white 1200x700 page compresses to a few hundred bytes, while a page with hundreds of
// coloured rectangles does not, so a minimum compressed size is a cheap non-blank test without
// a PNG decoder. It does not check where the rectangles are.
TEST_F(PlanCli, HtmlRendersInHeadlessChromium) {
  if (!fs::exists(stories())) GTEST_SKIP() << "no " << stories() << " (shared data absent)";
  std::string page = (dir_ / "plan.html").string();
  CmdResult r = run_minfer("plan -m " + stories().string() +
                           " -c 256 --n-tokens 64 -o html --output-file " + page);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(page);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string html = ss.str();
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("id='lower-bound'"), std::string::npos);
  EXPECT_NE(html.find("<title>"), std::string::npos);               // hover text per rectangle
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org"));  // self-contained
  // A colour legend, axis ticks in MiB and steps, labels on large blocks, the KV cache beside.
  for (const char* part : {"id='legend'", "class='ytick'", " MiB</text>", "class='xtick'",
                           "class='label'", "id='kv-region'", "class='kv'", "layer 0 K cache"})
    EXPECT_NE(html.find(part), std::string::npos) << part;

  if (!fs::exists("/usr/bin/chromium")) GTEST_SKIP() << "no /usr/bin/chromium (apt chromium)";
  fs::path png = dir_ / "shot.png";
  fs::path profile = dir_ / "profile";
  std::string cmd =
      "/usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--user-data-dir=" +
      profile.string() + " --window-size=1280,800 --screenshot=" + png.string() + " file://" +
      page + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_TRUE(fs::exists(png));
  std::ifstream pf(png, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
  EXPECT_GT(bytes.size(), 8000u) << "screenshot looks blank (" << bytes.size() << " bytes)";
}

}  // namespace
}  // namespace minfer
