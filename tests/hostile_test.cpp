// minfer-test-libs: minfer_model
// Hostile input through the `minfer` binary and the thread pool (issue #15): every case ends in
// a clean error (exit 1, a message naming the flag / file / figure) or is handled, never a crash,
// a hang or a machine-sized allocation. The GGUFs are written here with the project's writer
// (tests/tiny_model.h), so nothing binary is committed and no case needs ../shared.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/cpu/thread_pool.h"
#include "cli_test_util.h"
#include "common/error.h"
#include "gguf/gguf.h"
#include "tiny_model.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

using Result = test::CliResult;

// Runs `[PREFIX] minfer ARGS` through sh, stdout and stderr apart; `timeout 60` so that a
// regression to a hang fails the test instead of stalling the suite.
Result run(const std::string& args, const std::string& prefix = "") {
  return test::run_captured(
      prefix + "timeout 60 " + std::string(MINFER_BINARY) + " " + args + " </dev/null", "hostile");
}

class HostileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("minfer_hostile_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A tiny random-weight llama written to disk.
  std::string model(const testing::TinySpec& s = {}, const std::string& name = "tiny.gguf") {
    const std::vector<uint8_t> bytes = testing::make_tiny_model(s);
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }
  fs::path dir_;
};

// Issue #15 (8): `-p -ctk` is the prompt "-ctk", not --cache-type-k.
TEST_F(HostileCli, LlamaStyleFlagsAreRewrittenOnlyInFlagPosition) {
  const std::string m = model();
  // The prompt's token count shows which text was tokenized: "-ctk" either way.
  auto prompt_line = [](const std::string& err) {
    const size_t at = err.find("minfer: prompt ");
    return at == std::string::npos ? std::string() : err.substr(at, err.find('\n', at) - at);
  };
  for (const char* flag : {"-ctk", "-ctv", "-ub"}) {
    Result r = run("run -m " + m + " -p " + flag + " -n 2 --temp 0 -t 1");
    Result want = run("run -m " + m + " --prompt=" + flag + " -n 2 --temp 0 -t 1");
    EXPECT_EQ(r.status, 0) << r.err;
    ASSERT_EQ(want.status, 0) << want.err;
    EXPECT_FALSE(prompt_line(want.err).empty()) << want.err;
    EXPECT_EQ(prompt_line(r.err), prompt_line(want.err)) << flag;
  }
  Result r = run("run -m " + m + " -p hi -n 2 --temp 0 -t 1 -- -ctk");
  EXPECT_NE(r.status, 0) << "a positional after -- is not a flag";
  r = run("run -m " + m + " -p hi -ctk f32 -ctv f32 -ub 4 -n 2 --temp 0 -t 1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("KV cache type K f32 V f32"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("n_ubatch 4"), std::string::npos) << r.err;
}

// Issue #15 (9): numbers that were clamped or taken silently.
TEST_F(HostileCli, OutOfRangeSamplingAndLengthFlagsAreRefused) {
  const std::string m = model();
  const std::pair<const char*, const char*> cases[] = {
      {"-n 1000000000000000000000000000000", "-n 1000000000000000000000000000000"},
      {"-n -2", "-n -2 must be >= -1"},
      {"-n 12abc", "-n '12abc' is not an integer"},
      {"--top-k -5", "--top-k -5"},
      {"--temp -1", "--temp -1"},
      {"--repeat-last-n -2", "--repeat-last-n -2"},
      {"-t 100000", "-t 100000"},
  };
  for (const auto& [flags, needle] : cases) {
    Result r = run("run -m " + m + " -p hi " + flags);
    EXPECT_EQ(r.status, 1) << flags << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << flags << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << flags;
  }
  // The defined meanings run: -n -1 (until end of generation or a full context), --top-k 0
  // (off), --temp 0 (greedy), --repeat-last-n -1 (the whole context).
  Result r = run("run -m " + m + " -p hi -n -1 -c 8 --top-k 0 --temp 0 --repeat-last-n -1 -t 1");
  EXPECT_EQ(r.status, 0) << r.err;
}

// Issue #15 (6): --repeat-last-n 10^9 sized the sampler's history (4 GB); now clamped to the
// context. Run under a 1 GiB address-space limit (not under ASan, which reserves terabytes).
TEST_F(HostileCli, RepeatLastNIsClampedToTheContext) {
#if defined(MINFER_SANITIZE)
  GTEST_SKIP() << "ulimit -v and ASan do not mix";
#else
  Result r = run("run -m " + model() + " -p hi -n 4 --repeat-last-n 1000000000 -t 1",
                 "ulimit -v 1048576; ");
  EXPECT_EQ(r.status, 0) << r.err;
#endif
}

// Issue #15 (6): -f /dev/zero read forever, -f FIFO and -m FIFO blocked in open().
TEST_F(HostileCli, PromptAndModelMustBeRegularFiles) {
  const std::string m = model();
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& args :
       {"run -m " + m + " -f /dev/zero", "run -m " + m + " -f " + fifo,
        "tokenize -m " + m + " -f /dev/zero", "run -m " + fifo + " -p hi", "info " + fifo,
        std::string("run -m /dev/zero -p hi"), "run -m " + dir_.string() + " -p hi"}) {
    Result r = run(args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << args << ": " << r.err;
  }
}

// Issue #15 (6): a context the training context allows but no machine holds allocated (and
// zeroed) the whole KV cache before failing; now refused up front with the figures. Run under
// an address-space limit so that a regression fails instead of swapping.
TEST_F(HostileCli, KvCacheLargerThanTheMachineIsRefusedUpFront) {
  testing::TinySpec s;
  // The largest context_length accepted (u64: TinySpec writes u32).
  s.overrides.emplace_back("llama.context_length", gguf::Value::u64(uint64_t{1} << 32));
  const std::string m = model(s);
#if defined(MINFER_SANITIZE)
  const std::string prefix;
#else
  const std::string prefix = "ulimit -v 4194304; ";
#endif
  Result r = run("run -m " + m + " -p hi -n 1 -c 4294967296 -t 1", prefix);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("a context of 4294967296 tokens needs a KV cache of"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("of RAM"), std::string::npos) << r.err;
}

// Issue #15 (4): a thread that cannot start (RLIMIT_NPROC, memory) made the pool's constructor
// leave joinable threads behind: std::terminate (rc 134). Now a clean Error. The limit is an
// address-space cap in a child process (RLIMIT_NPROC does not bind root), so each thread stack
// mmap fails after a few threads.
TEST(HostileThreadPool, ThreadStartFailureIsACleanError) {
#if defined(MINFER_SANITIZE) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "address-space limits and sanitizers do not mix";
#else
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The current mappings plus ~64 MiB: room for a few 8 MiB thread stacks, not 256.
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    statm >> pages;
    const uint64_t now = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const rlimit lim{now + (64u << 20), now + (64u << 20)};
    ::setrlimit(RLIMIT_AS, &lim);
    int code = 3;
    try {
      cpu::ThreadPool pool(256);
      code = 2;  // every thread started: the limit did not bite
    } catch (const Error& e) {
      code = std::string(e.what()).find("cannot start thread") != std::string::npos ? 0 : 4;
    } catch (...) {
      code = 5;
    }
    ::_exit(code);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "child died by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 0);
#endif
}

// Issue #15 (1, 3): a model file with alignment 2 or a block count beyond its tensor table is
// refused by the binary with the key named.
TEST_F(HostileCli, HostileModelFilesAreRefusedByName) {
  testing::TinySpec align;
  align.overrides.emplace_back("general.alignment", gguf::Value::u32(2));
  testing::TinySpec blocks;
  blocks.overrides.emplace_back("llama.block_count", gguf::Value::u32(100000000));
  testing::TinySpec rope;
  rope.overrides.emplace_back("llama.rope.freq_base", gguf::Value::f32(INFINITY));
  const std::pair<testing::TinySpec, const char*> cases[] = {
      {align, "general.alignment"}, {blocks, "llama.block_count"}, {rope, "llama.rope.freq_base"}};
  int i = 0;
  for (const auto& [spec, needle] : cases) {
    Result r = run("run -m " + model(spec, "m" + std::to_string(i++) + ".gguf") + " -p hi -n 1");
    EXPECT_EQ(r.status, 1) << needle << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace minfer
