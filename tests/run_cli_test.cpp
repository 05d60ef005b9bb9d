// minfer-test-libs: minfer_common
// `minfer run` / `minfer bench` from the command line: stdout carries only generated text,
// stderr the load / memory / timing lines, bad flags fail with a message.
#include <gtest/gtest.h>

#include "cli_test_util.h"

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

using Result = minfer::test::CliResult;

// Runs `minfer ARGS`, capturing stdout and stderr separately.
Result run(const std::string& args) {
  return minfer::test::run_captured(std::string(MINFER_BINARY) + " " + args, "cli");
}

std::string stories() {
  const fs::path p = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  return fs::exists(p) ? p.string() : std::string();
}

TEST(RunCli, MissingPromptIsAnError) {
  Result r = run("run -m /nonexistent.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("prompt"), std::string::npos) << r.err;
}

TEST(RunCli, UnknownFlagIsAnError) {
  Result r = run("run -m x.gguf -p hi --bogus-flag");
  EXPECT_NE(r.status, 0);
  EXPECT_FALSE(r.err.empty());
}

// CLI11's own parse errors (a missing value, a value that does not convert, excluded pairs, a
// stray argument) read like every other bad flag and exit 1 (were: a bare message, "Run with
// --help for more information." and status 104-114).
TEST(RunCli, ParseErrorsNameTheCommandAndExitOne) {
  for (const char* bad : {"run -m x.gguf -p", "run -m x.gguf -p hi -n", "run -m x.gguf -p hi -c x",
                          "run -m x.gguf -p hi -f y", "run -p hi", "info a b", "plan -c"}) {
    const Result r = run(bad);
    EXPECT_EQ(r.status, 1) << bad << ": " << r.err;
    const std::string cmd = std::string("minfer ") + (bad[0] == 'r'   ? "run"
                                                      : bad[0] == 'i' ? "info"
                                                                      : "plan");
    EXPECT_NE(r.err.find(cmd + ": error: "), std::string::npos) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("(see " + cmd + " --help)"), std::string::npos) << bad << ": " << r.err;
  }
  EXPECT_EQ(run("run --help").status, 0);
}

TEST(RunCli, BadValuesAreErrors) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  for (const char* bad : {"--top-p 2", "--repeat-penalty 0", "-c -5", "-ub 0", "-n -7",
                          "--exec nope", "--temp nan"}) {
    Result r = run("run -m " + m + " -p hi " + bad);
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_FALSE(r.err.empty()) << bad;
    EXPECT_TRUE(r.out.empty()) << bad;
  }
}

TEST(RunCli, MissingFileNamesIt) {
  Result r = run("run -m /nonexistent/model.gguf -p hi");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
}

TEST(RunCli, StdoutIsOnlyGeneratedText) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("run -m " + m + " -p 'Once upon a time' -n 24 --temp 0 -t 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind(", there was a little girl named Lily.", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find("Once upon a time"), std::string::npos) << "prompt echoed";
  EXPECT_EQ(r.out.find("minfer"), std::string::npos) << "logs on stdout";
  for (const char* s : {"prompt eval time =", "eval time =", "tokens per second", "KV cache",
                        "compute buffers", "llama"})
    EXPECT_NE(r.err.find(s), std::string::npos) << s << " missing from stderr:\n" << r.err;
}

TEST(RunCli, SameSeedSameText) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result a = run("run -m " + m + " -p 'The dog' -n 30 --seed 7 -t 1");
  Result b = run("run -m " + m + " -p 'The dog' -n 30 --seed 7 -t 1");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  Result c = run("run -m " + m + " -p 'The dog' -n 30 -t 1");
  EXPECT_NE(c.err.find("seed = "), std::string::npos) << "random seed not printed";
}

// --grammar / --json-schema: the output is a sentence of the grammar, complete (the end token
// is allowed only then), the same for the same seed; a bad grammar is exit 1 naming the flag.
TEST(RunCli, GrammarAndJsonSchemaConstrainTheOutput) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  const Result yn = run("run -m " + m + " -p 'Once upon a time' -n 30 --temp 0 -t 1 " +
                        "--grammar 'root ::= (\"yes\" | \"no\")'");
  ASSERT_EQ(yn.status, 0) << yn.err;
  EXPECT_TRUE(yn.out == "yes\n" || yn.out == "no\n") << yn.out;
  const std::string schema =
      R"('{"type":"object","properties":{"answer":{"enum":["yes","no"]},"n":{"type":"integer"},)"
      R"("tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":2}},)"
      R"("required":["answer","n","tags"]}')";
  for (const char* sampling : {"--temp 0", "--seed 11", "--seed 12 --top-k 0 --temp 1.5"}) {
    const std::string args =
        "run -m " + m + " -p 'Once upon a time' -n 400 -t 1 " + sampling + " -j " + schema;
    const Result a = run(args);
    ASSERT_EQ(a.status, 0) << a.err;
    const auto j = nlohmann::json::parse(a.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << sampling << ": " << a.out;
    EXPECT_TRUE(j["answer"] == "yes" || j["answer"] == "no") << a.out;
    EXPECT_TRUE(j["n"].is_number_integer() && j["tags"].is_array()) << a.out;
    EXPECT_LE(j["tags"].size(), 2u) << a.out;
    EXPECT_EQ(run(args).out, a.out) << sampling;  // reproducible
  }
  // JSON mode ('{}': any value) and a file: whatever the model writes parses.
  const fs::path gf = fs::temp_directory_path() / "minfer_run_cli_grammar.gbnf";
  std::ofstream(gf) << "root ::= [0-9]{3} \"-\" [a-z]{2,3}\n# a comment\n";
  const Result f =
      run("run -m " + m + " -p 'Once' -n 20 --temp 0 -t 1 --grammar-file " + gf.string());
  fs::remove(gf);
  ASSERT_EQ(f.status, 0) << f.err;
  EXPECT_TRUE(std::regex_match(f.out, std::regex("[0-9]{3}-[a-z]{2,3}\n"))) << f.out;
  for (const char* bad : {"--grammar 'root ::= \"a'", "--grammar 'x ::= \"a\"'",
                          "-j '{\"type\":\"string\",\"pattern\":\"a\"}'", "-j '{'",
                          "--grammar 'root ::= \"a\"' -j '{}'"}) {
    const Result r = run("run -m " + m + " -p hi " + bad);
    EXPECT_EQ(r.status, 1) << bad;
    EXPECT_NE(r.err.find("minfer run: error: "), std::string::npos) << bad << ": " << r.err;
  }
  EXPECT_NE(run("run -m " + m + " -p hi --grammar 'root ::= \"a'")
                .err.find("--grammar: grammar:1:10: unterminated string literal"),
            std::string::npos);
  EXPECT_NE(run("run -m " + m + " -p hi -j '{\"type\":\"string\",\"pattern\":\"a\"}'")
                .err.find("keyword 'pattern' is not supported at #"),
            std::string::npos);
  // A schema that is not JSON says where it breaks.
  EXPECT_NE(run("run -m " + m + " -p hi -j '{\"type\": ob}'")
                .err.find("--json-schema: not valid JSON (at byte 10 of 12)"),
            std::string::npos);
}

// -s -1 is llama.cpp's "random seed" (it was "Could not convert: --seed = -1"); a seed past
// 32 bits or below -1 is an error naming the range.
TEST(RunCli, SeedMinusOneIsRandom) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  const Result r = run("run -m " + m + " -p 'The dog' -n 4 -t 1 -s -1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("seed = "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("seed = 4294967295"), std::string::npos) << "-1 resolved: " << r.err;
  const Result top = run("run -m " + m + " -p 'The dog' -n 4 -t 1 -s 4294967295");
  ASSERT_EQ(top.status, 0) << "2^32-1 is llama.cpp's -1 too: " << top.err;
  for (const char* bad : {"-s -2", "-s 4294967296", "-s x"}) {
    const Result b = run("run -m " + m + " -p hi " + bad);
    EXPECT_EQ(b.status, 1) << bad;
    EXPECT_NE(b.err.find("minfer run: error: -s"), std::string::npos) << bad << ": " << b.err;
  }
}

TEST(RunCli, PromptLongerThanContextIsAClearError) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("run -m " + m + " -p 'one two three four five six seven eight nine ten' -c 4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
}

TEST(RunCli, EagerMatchesGraphGreedy) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result g = run("run -m " + m + " -p 'Tom and Mia' -n 40 --temp 0 -t 2 --exec graph");
  Result e = run("run -m " + m + " -p 'Tom and Mia' -n 40 --temp 0 -t 2 --exec eager");
  ASSERT_EQ(g.status, 0) << g.err;
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_EQ(g.out, e.out);
}

TEST(BenchCli, JsonHasLlamaBenchFields) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("bench -m " + m + " -p 16 -n 4 -r 2 -t 1 -o json --no-roofline");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* f : {"\"test\"", "\"avg_ts\"", "\"stddev_ts\"", "\"n_prompt\"", "\"n_gen\"",
                        "\"threads\"", "\"pp16\"", "\"tg4\"", "\"samples_ts\""})
    EXPECT_NE(r.out.find(f), std::string::npos) << f << " missing:\n" << r.out;
  Result md = run("bench -m " + m + " -p 0 -n 4 -r 1 -t 1");
  ASSERT_EQ(md.status, 0) << md.err;
  EXPECT_NE(md.out.find(" tg4 |"), std::string::npos) << md.out;
  EXPECT_EQ(md.out.find("pp"), std::string::npos) << "-p 0 must skip pp:\n" << md.out;
}

// -p / -n / -d take lists as llama-bench's ("-p 8,16" was "Could not convert"): every depth runs
// every ppN then every tgN; a test past the training context names the figures.
TEST(BenchCli, ListsAsLlamaBench) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("bench -m " + m + " -p 8,16 -n 4 -d 0,32 -r 1 -t 1 -o json --no-roofline");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::vector<std::string> tests;
  for (const auto& row : j)
    tests.push_back(row["test"].get<std::string>() + "/" +
                    std::to_string(row["n_depth"].get<int64_t>()));
  EXPECT_EQ(tests, (std::vector<std::string>{"pp8/0", "pp16/0", "tg4/0", "pp8 @ d32/32",
                                             "pp16 @ d32/32", "tg4 @ d32/32"}));
  Result big = run("bench -m " + m + " -p 16 -n 4 -d 0,4000 -r 1 -t 1 --no-roofline");
  EXPECT_EQ(big.status, 1);
  EXPECT_NE(big.err.find("need 4016 tokens"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("trained with 2048"), std::string::npos) << big.err;
  Result neg = run("bench -m " + m + " -p 8,-1 -r 1 --no-roofline");
  EXPECT_EQ(neg.status, 1);
  EXPECT_NE(neg.err.find("-p -1 must be >= 0"), std::string::npos) << neg.err;
}

// The roofline columns and --profile (docs/BENCHMARKS.md): bandwidth, bytes per token and the
// roofline fraction on the tg row; the profile names the op kinds and its kinds plus the
// unattributed rest add up to the step time, the rest being small.
TEST(BenchCli, RooflineAndProfile) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  // A preemption on a shared machine can land in the unattributed rest of one run: up to three
  // runs, the first with a small rest counts (a broken attribution fails all three).
  std::string last;
  bool small_rest = false;
  for (int attempt = 0; attempt < 3 && !small_rest; ++attempt) {
    Result r = run("bench -m " + m + " -p 0 -n 64 -r 1 -t 2 --profile --bw-mib 64 -o json");
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char* f : {"\"read_bw_gbs\"",
                          "\"read_bw_median_gbs\"",
                          "\"bytes_per_token\"",
                          "\"read_bw_paired_gbs\"",
                          "\"samples_roofline_pct\"",
                          "\"roofline_pct_unpaired\"",
                          "\"load_avg_after\"",
                          "\"bytes_per_token_weights\"",
                          "\"bytes_per_token_kv\"",
                          "\"roofline_pct\"",
                          "\"profile\"",
                          "\"matmul f32\"",
                          "\"logits matmul\"",
                          "\"attention\"",
                          "\"norms\"",
                          "\"barriers / sync wait\"",
                          "\"imbalance wait (workers' last work)\"",
                          "\"sampling\"",
                          "\"elementwise\"",
                          "\"worker_join_pct\""})
      ASSERT_NE(r.out.find(f), std::string::npos) << f << " missing:\n" << r.out;
    // "step_ns": S ... each kind's "ns_per_token": X; the last kind is the unattributed rest.
    const std::regex step_re("\"step_ns\":\\s*([0-9.eE+-]+)");
    const std::regex ns_re("\"ns_per_token\":\\s*([0-9.eE+-]+)");
    std::smatch sm;
    ASSERT_TRUE(std::regex_search(r.out, sm, step_re)) << r.out;
    const double step = std::stod(sm[1]);
    std::vector<double> ns;
    for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), ns_re);
         it != std::sregex_iterator(); ++it)
      ns.push_back(std::stod((*it)[1]));
    ASSERT_GE(ns.size(), 8u);
    double sum = 0;
    for (double x : ns) sum += x;
    EXPECT_NEAR(sum, step, 1e-6 * step);
    small_rest = std::abs(ns.back()) < 0.2 * step;
    last = r.out;
  }
  EXPECT_TRUE(small_rest) << "unattributed time >= 20% of the step in 3 runs:\n" << last;
  Result md = run("bench -m " + m + " -p 0 -n 8 -r 1 -t 1 --profile --bw-mib 32");
  ASSERT_EQ(md.status, 0) << md.err;
  for (const char* f : {"roofline", "read bandwidth:", "MiB/token", "| matmul f32", "| step",
                        "tg8: roofline", "load average:", "profile pass:"})
    EXPECT_NE(md.out.find(f), std::string::npos) << f << " missing:\n" << md.out;
  Result off = run("bench -m " + m + " -p 0 -n 4 -r 1 -t 1 --no-roofline");
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_EQ(off.out.find("roofline"), std::string::npos) << off.out;
}

// --probe-every K: one more tg pass, a probe pass after every K steps, each chunk against the
// passes either side (cpu::summarize_interleaved): json object, markdown column and line; bad
// values are named, and 0 turns the pass off.
TEST(BenchCli, ProbeEveryInterleavesProbePasses) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("bench -m " + m + " -p 0 -n 5 -r 1 -t 2 --probe-every 2 --bw-mib 16 -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json row = nlohmann::json::parse(r.out).at(0);
  ASSERT_TRUE(row.contains("roofline_interleaved")) << r.out;
  const nlohmann::json& v = row["roofline_interleaved"];
  EXPECT_EQ(v["steps_per_pass"], 2);
  EXPECT_EQ(v["pairs"], 3);  // 5 steps: 2 + 2 + 1
  ASSERT_EQ(v["samples_pct"].size(), 3u);
  EXPECT_EQ(v["samples_step_ns"].size(), 5u);
  EXPECT_EQ(v["samples_probe_gbs"].size(), 4u);  // one before each chunk, one after the last
  for (const char* f : {"pct_median", "pct_q1", "pct_q3", "probe_median_gbs", "decode_ts"})
    EXPECT_GT(v[f].get<double>(), 0.0) << f;
  EXPECT_LE(v["pct_q1"].get<double>(), v["pct_median"].get<double>());
  EXPECT_LE(v["pct_median"].get<double>(), v["pct_q3"].get<double>());
  EXPECT_GT(v["first_step_ratio"].get<double>(), 0.0);
  EXPECT_TRUE(row.contains("roofline_pct"));  // the bursts' figure stays beside it
  Result md = run("bench -m " + m + " -p 0 -n 4 -r 1 -t 1 --bw-mib 16");  // default: K = 1
  ASSERT_EQ(md.status, 0) << md.err;
  EXPECT_NE(md.out.find("| interleaved |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("tg4: interleaved roofline"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("median over 4 chunks of 1 decode step(s)"), std::string::npos) << md.out;
  Result off = run("bench -m " + m + " -p 0 -n 4 -r 1 -t 1 --bw-mib 16 --probe-every 0 -o json");
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_EQ(off.out.find("roofline_interleaved"), std::string::npos) << off.out;
  EXPECT_NE(off.out.find("roofline_pct"), std::string::npos) << off.out;
  Result neg = run("bench -m " + m + " -p 0 -n 4 --probe-every -1");
  EXPECT_EQ(neg.status, 1);
  EXPECT_NE(neg.err.find("--probe-every -1 must be in [0, 1048576]"), std::string::npos) << neg.err;
  Result word = run("bench -m " + m + " -p 0 -n 4 --probe-every x");
  EXPECT_EQ(word.status, 1);
  EXPECT_NE(word.err.find("--probe-every = x"), std::string::npos) << word.err;
  Result noprobe = run("bench -m " + m + " -p 0 -n 4 --probe-every 2 --no-roofline");
  EXPECT_EQ(noprobe.status, 1);
  EXPECT_NE(noprobe.err.find("--probe-every 2 needs the probe"), std::string::npos) << noprobe.err;
}

// --ab: one more tg pass, its steps paired A / B (cpu/step_ab.h), in json and markdown.
TEST(BenchCli, AbPassPairsTheSteps) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  Result r = run("bench -m " + m + " -p 0 -n 17 -r 1 -t 2 --ab --no-roofline -o json");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::regex pairs_re("\"pairs\":\\s*([0-9]+)");
  const std::regex ratio_re("\"ratio_median\":\\s*([0-9.eE+-]+)");
  std::smatch sm;
  ASSERT_TRUE(std::regex_search(r.out, sm, pairs_re)) << r.out;
  EXPECT_EQ(std::stoi(sm[1]), 8);  // 17 steps: the odd last one is dropped
  ASSERT_TRUE(std::regex_search(r.out, sm, ratio_re)) << r.out;
  EXPECT_GT(std::stod(sm[1]), 0.0);
  for (const char* f : {"\"ratio_q1\"", "\"ratio_q3\"", "\"a_median_ns\"", "\"b_median_ns\""})
    EXPECT_NE(r.out.find(f), std::string::npos) << f << " missing:\n" << r.out;
  Result md = run("bench -m " + m + " -p 0 -n 8 -r 1 -t 1 --ab --no-roofline");
  ASSERT_EQ(md.status, 0) << md.err;
  EXPECT_NE(md.out.find("tg8 A/B: 4 pairs of steps in ABBA order"), std::string::npos) << md.out;
}

}  // namespace

namespace {

// The RAM guard: weights + KV at full use + compute + margin against the memory available
// (lowered here with MINFER_MEMORY_LIMIT): refused with every term named, unless
// --kv-overcommit; a fitting budget runs as usual.
TEST(RunCli, RamGuardRefusesWhatDoesNotFit) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  Result r = run("run -m " + m + " -p Hi -n 4 --temp 0 -c 2048");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = r.out;
  r = run("run -m " + m + " -p Hi -n 4 --temp 0 -c 2048");  // same again: deterministic
  EXPECT_EQ(r.out, text);
  setenv("MINFER_MEMORY_LIMIT", "30000000", 1);  // 30 MB: less than the 64 MiB margin alone
  r = run("run -m " + m + " -p Hi -n 4 --temp 0 -c 2048");
  EXPECT_NE(r.status, 0);
  for (const char* term :
       {"weights", "KV cache", "compute", "margin", "available", "--kv-overcommit", "-c"})
    EXPECT_NE(r.err.find(term), std::string::npos) << term << " not named in: " << r.err;
  EXPECT_TRUE(r.out.empty()) << "no text when refused";
  r = run("run -m " + m + " -p Hi -n 4 --temp 0 -c 2048 --kv-overcommit");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, text);
  EXPECT_NE(r.err.find("--kv-overcommit"), std::string::npos) << r.err;
  unsetenv("MINFER_MEMORY_LIMIT");
}

// --mem-report names the reserved and committed KV bytes: lazily committed, a short run holds
// a few blocks of the pool.
TEST(RunCli, MemReportShowsCommittedKv) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const Result r = run("run -m " + m + " -p Hi -n 8 --temp 0 -c 2048 --kv-block 16 --mem-report");
  ASSERT_EQ(r.status, 0) << r.err;
  // "KV cache: R B reserved, C B committed (U blocks used, ...": 10 tokens = 1 block + null.
  std::smatch mt;
  ASSERT_TRUE(std::regex_search(r.err, mt, std::regex("(\\d+) B reserved, (\\d+) B committed")))
      << r.err;
  const uint64_t reserved = std::stoull(mt[1].str()), committed = std::stoull(mt[2].str());
  EXPECT_LT(committed * 10, reserved) << r.err;
  EXPECT_NE(r.err.find("1 blocks used"), std::string::npos) << r.err;
}

}  // namespace

// llama.cpp habits (issue 18): the flags a llama.cpp user types work or are named.
namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// -s, -ngl, -fa, --mlock, --no-mmap and -no-cnv run, with a note for what does not apply here,
// and change no text: greedy output is the same as without them.
TEST(RunCliHabits, LlamaFlagsAreAccepted) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const Result base = run("run -m " + m + " -p 'Once upon a time' -n 16 --temp 0 -t 1");
  ASSERT_EQ(base.status, 0) << base.err;
  const Result r = run("run -m " + m +
                       " -p 'Once upon a time' -n 16 --temp 0 -t 1 -s 7 -ngl 99 "
                       "-fa on --mlock --no-mmap -no-cnv");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, base.out);
  EXPECT_NE(r.err.find("-ngl 99: this build runs on the CPU"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("-fa on: attention always runs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("read into memory (--no-mmap)"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "note:"), 2) << r.err;
  // -fa with no value (older llama.cpp) is "on", not "-f a".
  const Result fa = run("run -m " + m + " -fa -p 'Once upon a time' -n 16 --temp 0 -t 1");
  ASSERT_EQ(fa.status, 0) << fa.err;
  EXPECT_EQ(fa.out, base.out);
  // -s is --seed.
  const Result s1 = run("run -m " + m + " -p 'The dog' -n 20 -s 11 -t 1");
  const Result s2 = run("run -m " + m + " -p 'The dog' -n 20 --seed 11 -t 1");
  ASSERT_EQ(s1.status, 0) << s1.err;
  EXPECT_EQ(s1.out, s2.out);
}

// A flag takes no value: the llama.cpp spelling right after one is still rewritten and an
// unknown option after one is still named (`--mlock -md F` once read `-md` as `-m d`).
TEST(RunCliHabits, SpellingAfterAFlagIsStillRewritten) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const Result base = run("run -m " + m + " -p 'Once upon a time' -n 8 --temp 0 -t 1");
  ASSERT_EQ(base.status, 0) << base.err;
  for (const char* flags : {"--mlock -ctk f16", "--no-repack -md ", "--no-mmap -ub 64"}) {
    std::string f = flags;
    if (f.back() == ' ') f += m;  // -md takes the draft file
    const Result r = run("run -m " + m + " -p 'Once upon a time' -n 8 --temp 0 -t 1 " + f);
    ASSERT_EQ(r.status, 0) << f << ": " << r.err;
    EXPECT_EQ(r.out, base.out) << f;
  }
  const Result bad = run("run -m " + m + " -p hi --mlock -zz");
  EXPECT_NE(bad.err.find("unknown option '-zz'"), std::string::npos) << bad.err;
}

// Any option we do not know is named as typed; never a message about another flag.
TEST(RunCliHabits, UnknownOptionIsNamed) {
  const std::string m = stories().empty() ? std::string("x.gguf") : stories();
  for (const char* bad : {"-ngx 5", "--bogus-flag", "-zz", "--color", "-fax"}) {
    const Result r = run("run -m " + m + " -p hi " + bad);
    EXPECT_NE(r.status, 0) << bad;
    const std::string name = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(r.err.find("unknown option '" + name + "'"), std::string::npos) << bad << r.err;
    EXPECT_EQ(r.err.find("--n-predict"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("excludes"), std::string::npos) << r.err;
  }
  // A value is not an option: -p '-ngx' is the prompt "-ngx".
  if (stories().empty()) return;
  const Result v = run("run -m " + m + " -n 2 -p -ngx");
  EXPECT_EQ(v.status, 0) << v.err;
  // Every command says the same.
  const Result i = run("info " + m + " --bogus");
  EXPECT_NE(i.err.find("unknown option '--bogus'"), std::string::npos) << i.err;
}

TEST(RunCliHabits, VersionNamesCommitAndSimd) {
  const std::regex line(
      "minfer \\d+\\.\\d+\\.\\d+ \\(commit [0-9a-z-]+\\), SIMD (scalar|avx2|avx512-vnni) in use");
  for (const char* args : {"--version", "run --version", "chat -m x.gguf --version"}) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 0) << args << r.err;
    EXPECT_TRUE(std::regex_search(r.out, line)) << args << ": " << r.out;
  }
}

// -r stops at a reverse prompt (the text ends with it); -e processes escapes in -p.
TEST(RunCliHabits, ReversePromptAndEscapes) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const Result base = run("run -m " + m + " -p 'Once upon a time' -n 40 --temp 0 -t 1");
  ASSERT_EQ(base.status, 0) << base.err;
  ASSERT_NE(base.out.find("Lily"), std::string::npos) << base.out;
  const Result r = run("run -m " + m + " -p 'Once upon a time' -n 40 --temp 0 -t 1 -r Lily");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, base.out.substr(0, base.out.find("Lily") + 4) + "\n");
  const Result nl = run("run -m " + m + " -p \"$(printf 'Tom\\nsaw')\" -n 12 --temp 0 -t 1");
  const Result esc = run("run -m " + m + " -p 'Tom\\nsaw' -e -n 12 --temp 0 -t 1");
  const Result raw = run("run -m " + m + " -p 'Tom\\nsaw' -n 12 --temp 0 -t 1");
  ASSERT_EQ(esc.status, 0) << esc.err;
  EXPECT_EQ(esc.out, nl.out);
  EXPECT_NE(raw.out, nl.out) << "without -e the backslash stays";
}

// -n past the context shifts it (keeping --keep prompt tokens) instead of stopping; -n -1
// still stops at a full context.
TEST(RunCliHabits, ContextShiftWithKeep) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const Result r =
      run("run -m " + m + " -p 'Once upon a time' -c 32 -n 80 --temp 0 -t 1 --keep 4 --ignore-eos");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("shifted, kept the first 4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/    79 runs"), std::string::npos) << "80 tokens generated:\n" << r.err;
  const Result full =
      run("run -m " + m + " -p 'Once upon a time' -c 32 --temp 0 -t 1 --ignore-eos");
  ASSERT_EQ(full.status, 0) << full.err;
  EXPECT_NE(full.err.find("context full (32 tokens), stopping"), std::string::npos) << full.err;
  const Result bad = run("run -m " + m + " -p hi --keep -2");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("--keep -2"), std::string::npos) << bad.err;
}

// -sys belongs to a conversation: run says where to go; -cnv turns run into chat.
TEST(RunCliHabits, SystemPromptAndConversationMode) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const Result sys = run("run -m " + m + " -p hi -sys 'be brief'");
  EXPECT_NE(sys.status, 0);
  EXPECT_NE(sys.err.find("minfer chat"), std::string::npos) << sys.err;
  const Result cnv = run("run -m " + m + " -cnv --chat-template chatml -n 4 --temp 0 </dev/null");
  EXPECT_EQ(cnv.status, 0) << cnv.err;
  EXPECT_NE(cnv.err.find("chat template chatml"), std::string::npos) << cnv.err;
}

// The small items: help text, required markers, message order, clamped n_batch, no "-1 after
// warm-up", one KV line, general.name in the header.
TEST(RunCliHabits, SmallItems) {
  const Result help = run("run --help");
  EXPECT_TRUE(std::regex_search(help.out, std::regex("-h,--help +\\S"))) << help.out;
  const Result ih = run("info --help");
  EXPECT_EQ(ih.out.find("REQUIRED"), std::string::npos) << ih.out;
  const Result missing = run("run -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(missing.err.find("seed ="), std::string::npos) << missing.err;
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const Result info = run("info " + m + " --no-tensors");
  EXPECT_EQ(info.status, 0) << info.err;
  const Result r = run("run -m " + m + " -p hi -n 4 -c 128 -t 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("n_batch 128 "), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "KV cache"), 1) << r.err;
  EXPECT_NE(r.err.find("compute buffers"), std::string::npos) << r.err;
  const Result e = run("run -m " + m + " -p hi -n 8 -c 128 -t 1 --exec eager --mem-report");
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_EQ(e.err.find("-1 after warm-up"), std::string::npos) << e.err;
  // A random-weight model says so in the header (its general.name).
  const fs::path tiny =
      fs::temp_directory_path() / ("minfer_cli_tiny_" + std::to_string(getpid()) + ".gguf");
  const Result g = run("gen --preset tiny-llama --type f32 -o " + tiny.string());
  ASSERT_EQ(g.status, 0) << g.err;
  const Result t = run("run -m " + tiny.string() + " -p hi -n 2 -t 1");
  fs::remove(tiny);
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.err.find("(tiny-llama (random weights))"), std::string::npos) << t.err;
}

// gen's numeric flags are refused as the other commands' are: a minfer error naming the flag
// and the value, exit 1, and no file written.
TEST(RunCliHabits, GenRefusesOutOfRangeNumbers) {
  const fs::path out =
      fs::temp_directory_path() / ("minfer_cli_gen_bad_" + std::to_string(getpid()) + ".gguf");
  struct Case {
    const char* flags;
    const char* names;
  };
  for (const Case& c : {Case{"-t -5", "-t -5"}, Case{"-t 100000", "-t 100000"},
                        Case{"--layers -1", "--layers -1"}, Case{"--layers 99", "--layers 99"},
                        Case{"--std -1", "--std -1"}, Case{"--seed -3", "--seed"}}) {
    const Result r =
        run(std::string("gen --preset tiny-llama --type f32 -o ") + out.string() + " " + c.flags);
    EXPECT_EQ(r.status, 1) << c.flags << ": " << r.err;
    EXPECT_NE(r.err.find("minfer gen: error:"), std::string::npos) << c.flags << ": " << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << c.flags << ": " << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.flags;
    fs::remove(out);
  }
}

// On a terminal the load shows its progress ("loading", the file paged in; an engine that
// repacks its weights at load, one sequence included where the CPU has the packed decode
// kernels, shows "repacking" instead, ModelPacked tests its figures); not when piped.
// `script` (util-linux, always on Debian) gives the command a pseudo-terminal.
TEST(RunCliHabits, LoadProgressOnATerminal) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs script(1)";
  auto on_tty = [](const std::string& args) {
    return minfer::test::run_captured(
        "script -qec '" + std::string(MINFER_BINARY) + " " + args + "' /dev/null", "cli_tty");
  };
  const std::regex loading("minfer: loading [0-9.]+/[0-9.]+ MiB");
  const Result tty = on_tty("run -m " + m + " -p hi -n 2 -t 1 --no-repack");
  ASSERT_EQ(tty.status, 0) << tty.out;
  EXPECT_TRUE(std::regex_search(tty.out, loading)) << tty.out;
  const Result piped = run("run -m " + m + " -p hi -n 2 -t 1");
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_FALSE(std::regex_search(piped.err, loading)) << piped.err;
}

// scripts/deps.sh: the demo's list builds the binary only; --test adds what the tests need.
TEST(RunCliHabits, DemoInstallsOnlyBuildPackages) {
  const std::string deps = std::string(MINFER_SOURCE_DIR) + "/scripts/deps.sh";
  const Result base = minfer::test::run_captured(deps + " --list", "deps");
  const Result test = minfer::test::run_captured(deps + " --test --list", "deps");
  ASSERT_EQ(base.status, 0) << base.err;
  ASSERT_EQ(test.status, 0) << test.err;
  for (const char* p : {"g++", "cmake", "ninja-build", "libcli11-dev"}) {
    EXPECT_NE(base.out.find(p), std::string::npos) << p;
    EXPECT_NE(test.out.find(p), std::string::npos) << p;
  }
  for (const char* p :
       {"chromium", "libgtest-dev", "python3-jinja2", "clang", "libbenchmark-dev"}) {
    EXPECT_EQ(base.out.find(p), std::string::npos) << p << " is test-only";
    EXPECT_NE(test.out.find(p), std::string::npos) << p;
  }
  std::ifstream demo(std::string(MINFER_SOURCE_DIR) + "/scripts/demo.sh");
  const std::string text((std::istreambuf_iterator<char>(demo)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("MINFER_TARGETS=minfer"), std::string::npos) << "the demo builds minfer only";
}

}  // namespace

// A MINFER_SIMD typo is named on stderr and ignored, so a run meant to measure another ISA
// cannot silently measure the native one; the output is the same as without it.
TEST(RunCli, UnknownSimdCapIsNamedAndIgnored) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const Result plain = run("run -m " + m + " -p Hi -n 4 --temp 0");
  ASSERT_EQ(plain.status, 0) << plain.err;
  setenv("MINFER_SIMD", "avx3", 1);
  const Result r = run("run -m " + m + " -p Hi -n 4 --temp 0");
  unsetenv("MINFER_SIMD");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("MINFER_SIMD='avx3'"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, plain.out);
}
