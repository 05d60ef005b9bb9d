// minfer-test-libs: minfer_common
// `minfer batched-bench` through the built binary on stories260K: the markdown table's shape
// (llama-batched-bench's columns, one row per PP x TG x B), the JSON rows' fields and their
// arithmetic (N_KV, S_PP, S_TG, T, S), -pps / -tgs, and a clear error for a -c too small.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;

using Result = minfer::test::CliResult;

Result run(const std::string& args) {
  return minfer::test::run_captured(std::string(MINFER_BINARY) + " " + args, "bbench");
}

std::string stories() {
  const fs::path p = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  return fs::exists(p) ? p.string() : std::string();
}

std::vector<std::string> lines_starting_with(const std::string& text, char c) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] == c) out.push_back(l);
  return out;
}

// The cells of a markdown row "| a | b |" -> {"a", "b"}.
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::istringstream in(row.substr(1));
  for (std::string c; std::getline(in, c, '|');) {
    const auto b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
  }
  return out;
}

std::vector<nlohmann::json> json_rows(const std::string& out) {
  std::vector<nlohmann::json> rows;
  for (const std::string& l : lines_starting_with(out, '{'))
    rows.push_back(nlohmann::json::parse(l));
  return rows;
}

TEST(BatchedBenchCli, MarkdownTableHasLlamaBatchedBenchColumns) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("batched-bench -m " + m + " -c 512 -npp 16,24 -ntg 8 -npl 1,2,4 -t 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = lines_starting_with(r.out, '|');
  ASSERT_EQ(rows.size(), 2u + 2 * 3) << r.out;  // header, separator, PP x TG x B rows
  const std::vector<std::string> head = {"PP",       "TG",     "B",        "N_KV", "T_PP s",
                                         "S_PP t/s", "T_TG s", "S_TG t/s", "T s",  "S t/s"};
  EXPECT_EQ(cells(rows[0]), head) << rows[0];
  const int pls[] = {1, 2, 4};
  for (size_t i = 2; i < rows.size(); ++i) {
    const auto c = cells(rows[i]);
    ASSERT_EQ(c.size(), 10u) << rows[i];
    const int pp = std::stoi(c[0]), tg = std::stoi(c[1]), b = std::stoi(c[2]);
    EXPECT_EQ(pp, i < 5 ? 16 : 24) << rows[i];
    EXPECT_EQ(tg, 8);
    EXPECT_EQ(b, pls[(i - 2) % 3]);
    EXPECT_EQ(std::stoi(c[3]), b * (pp + tg)) << "N_KV = B*(PP+TG): " << rows[i];
  }
}

TEST(BatchedBenchCli, JsonRowsHaveFieldsAndArithmetic) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("batched-bench -m " + m + " -c 1024 -npp 32 -ntg 8,4 -npl 1,3 -t 1 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = json_rows(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  for (const auto& j : rows) {
    for (const char* f : {"n_kv_max", "n_batch", "n_ubatch", "is_pp_shared", "n_threads", "pp",
                          "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed"})
      ASSERT_TRUE(j.contains(f)) << f << " missing: " << j.dump();
    const double pp = j["pp"], tg = j["tg"], pl = j["pl"];
    const double t_pp = j["t_pp"], t_tg = j["t_tg"];
    EXPECT_EQ(j["n_kv_max"], 1024);
    EXPECT_EQ(j["is_pp_shared"], 0);
    EXPECT_EQ(j["n_kv"], pl * (pp + tg));
    ASSERT_GT(t_pp, 0);
    ASSERT_GT(t_tg, 0);
    EXPECT_NEAR(j["speed_pp"].get<double>(), pl * pp / t_pp, 1e-6 * pl * pp / t_pp);
    EXPECT_NEAR(j["speed_tg"].get<double>(), pl * tg / t_tg, 1e-6 * pl * tg / t_tg);
    EXPECT_NEAR(j["t"].get<double>(), t_pp + t_tg, 1e-9);
    const double s = (pl * pp + pl * tg) / (t_pp + t_tg);
    EXPECT_NEAR(j["speed"].get<double>(), s, 1e-6 * s);
  }
  EXPECT_EQ(rows[1]["pl"], 3);
  EXPECT_EQ(rows[2]["tg"], 4);
}

TEST(BatchedBenchCli, SharedPromptAndSeparateGeneration) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("batched-bench -m " + m + " -c 256 -npp 40 -ntg 6 -npl 4 -t 1 -pps -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto rows = json_rows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  // The prompt is prefilled once and forked: N_KV = PP + B*TG, S_PP = PP / T_PP.
  EXPECT_EQ(rows[0]["is_pp_shared"], 1);
  EXPECT_EQ(rows[0]["n_kv"], 40 + 4 * 6);
  const double t_pp = rows[0]["t_pp"];
  EXPECT_NEAR(rows[0]["speed_pp"].get<double>(), 40 / t_pp, 1e-6 * 40 / t_pp);

  r = run("batched-bench -m " + m + " -c 256 -npp 8 -ntg 5 -npl 2 -t 1 -tgs -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  rows = json_rows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_EQ(rows[0]["is_tg_separate"], 1);
  EXPECT_EQ(rows[0]["n_kv"], 2 * (8 + 5));
}

TEST(BatchedBenchCli, ContextTooSmallNamesTheFigure) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("batched-bench -m " + m + " -c 100 -npp 32 -ntg 16 -npl 1,2,4 -t 1");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(r.out.find("| 32 |") == std::string::npos) << "no row before the error:\n" << r.out;
  EXPECT_NE(r.err.find("-c 100 is too small"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("N_KV = 192"), std::string::npos) << r.err;  // 4 * (32 + 16)
}

TEST(BatchedBenchCli, BadValuesAreErrors) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  for (const char* bad :
       {"-npl 0", "-npp -3", "-ntg -1", "--exec eager", "--kv-block 0", "-o csv", "-npl 1,x"}) {
    Result r = run("batched-bench -m " + m + " -c 256 -npp 8 -ntg 4 -t 1 " + std::string(bad));
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_FALSE(r.err.empty()) << bad;
  }
}

}  // namespace
