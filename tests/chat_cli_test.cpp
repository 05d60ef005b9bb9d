// minfer-test-libs: minfer_common
// `minfer chat` driven through piped stdin (as a user would type): one message per line, the
// /exit /clear /help commands, '\' continuation lines, a chat that outlives its context (turns
// dropped, replies shifted), a message too long for the context (refused, the history kept),
// and Ctrl-C (stop the reply, then exit) on a child process whose stdin stays open.
#include <gtest/gtest.h>

#include "cli_test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;
using minfer::test::CliResult;

std::string stories() {
  const fs::path p = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  return fs::exists(p) ? p.string() : std::string();
}

// `printf INPUT | minfer chat -m stories --chat-template chatml ARGS`.
CliResult chat(const std::string& input, const std::string& args) {
  return minfer::test::run_captured("printf '" + input + "' | " + std::string(MINFER_BINARY) +
                                        " chat -m " + stories() +
                                        " --chat-template chatml -t 1 --temp 0 " + args,
                                    "chat");
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(ChatCli, PipedLinesAreTurns) {
  if (stories().empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const CliResult one = chat("Hello\\n", "-n 8");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_FALSE(one.out.empty());
  const CliResult two = chat("Hello\\nTell me more\\n", "-n 8");
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_EQ(two.out.rfind(one.out, 0), 0u) << "same first reply:\n" << one.out << two.out;
  EXPECT_GT(two.out.size(), one.out.size());
  EXPECT_EQ(count(two.err, "seed = "), 1) << two.err;
}

// --grammar constrains every reply, each one from the grammar's start.
TEST(ChatCli, GrammarConstrainsEveryReply) {
  if (stories().empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const CliResult r =
      chat("Hello\\nAgain\\n", "-n 40 --grammar 'root ::= (\"yes\" | \"no\") \".\"'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "yes.\n") + count(r.out, "no.\n"), 2) << r.out;
  EXPECT_EQ(r.out.size(), r.out.find_last_of('\n') + 1) << r.out;
}

// /help prints the commands on stderr, /clear starts over (the same first reply again), /exit
// ends the chat: what follows it is never sent.
TEST(ChatCli, SlashCommands) {
  if (stories().empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const CliResult one = chat("Hello\\n", "-n 8");
  ASSERT_EQ(one.status, 0) << one.err;
  const CliResult r = chat("/help\\nHello\\n/clear\\nHello\\n/exit\\nnever sent\\n", "-n 8");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("/clear"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("new conversation"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, one.out + one.out) << "after /clear the first reply repeats";
}

// A trailing backslash continues the message: two lines, one turn.
TEST(ChatCli, BackslashContinuesTheMessage) {
  if (stories().empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const CliResult joined = chat("first line\\\\\\nsecond line\\n", "-n 8");
  const CliResult two = chat("first line\\nsecond line\\n", "-n 8");
  ASSERT_EQ(joined.status, 0) << joined.err;
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_LT(joined.out.size(), two.out.size()) << "one reply, not two:\n" << joined.out;
}

// The chat never dies of a full context: older turns are dropped (the system prompt kept), a
// reply that fills the context shifts it, and a message too long for the context is refused
// without ending the chat.
TEST(ChatCli, OutlivesItsContext) {
  if (stories().empty()) GTEST_SKIP() << "needs stories260K.gguf";
  std::string input;
  for (int i = 0; i < 8; ++i) input += "Tell me about the dog number " + std::to_string(i) + "\\n";
  const CliResult r = chat(input, "-c 160 -n 48 -sys 'You tell stories.'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("dropped the"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kept the system prompt"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("no longer fits"), std::string::npos) << r.err;
  // One reply longer than the context: shifted mid-reply, and it goes on.
  const CliResult s = chat("Once upon a time\\nAnd then\\n", "-c 96 -n 200 --ignore-eos");
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_NE(s.err.find("shifted, kept the first"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("the reply goes on"), std::string::npos) << s.err;
  std::string long_msg(400, 'a');
  const CliResult t = chat(long_msg + "\\nHello\\n", "-c 64 -n 8");
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.err.find("not sent"), std::string::npos) << t.err;
  EXPECT_FALSE(t.out.empty()) << "the next message is answered";
}

// A message too long for the context is refused without costing the conversation its older
// turns: the turn after it is answered as if the refused message had never been typed.
TEST(ChatCli, RefusedMessageKeepsTheHistory) {
  if (stories().empty()) GTEST_SKIP() << "needs stories260K.gguf";
  const CliResult plain = chat("Hello\\nHello\\n", "-c 128 -n 8");
  ASSERT_EQ(plain.status, 0) << plain.err;
  const CliResult r = chat("Hello\\n" + std::string(400, 'a') + "\\nHello\\n", "-c 128 -n 8");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("not sent"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("dropped the"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, plain.out) << "the first turn is still there for the second Hello";
}

// A child `minfer chat` with stdin and stdout pipes (stderr to a file).
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1;
  fs::path err;
};

Child spawn_chat(const std::string& args) {
  Child c;
  c.err = fs::temp_directory_path() / ("minfer_chat_sigint_" + std::to_string(getpid()));
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) return c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    const int e = open(c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(e, 2);
    close(in[1]);
    close(out[0]);
    const std::string cmd = "exec " + std::string(MINFER_BINARY) + " chat " + args;
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  c.in = in[1];
  c.out = out[0];
  return c;
}

// Reads the child's stdout until `bytes` more arrived or `limit` passed.
size_t read_some(int fd, size_t bytes, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  size_t got = 0;
  char buf[4096];
  while (got < bytes && std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Waits up to `limit` for the child; its exit status, or -1 if it is still running (killed).
int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int st = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

// Ctrl-C during a reply stops the reply, not the program; a second Ctrl-C (at the prompt)
// exits with 130. The reply is endless: -n -1 and --ignore-eos with a small context that
// shifts again and again.
TEST(ChatCli, CtrlCStopsTheReplyThenExits) {
  const fs::path tiny =
      fs::temp_directory_path() / ("minfer_chat_tiny_" + std::to_string(getpid()) + ".gguf");
  const CliResult g = minfer::test::run_captured(
      std::string(MINFER_BINARY) + " gen --preset tiny-llama --type f32 -o " + tiny.string(),
      "chatgen");
  ASSERT_EQ(g.status, 0) << g.err;
  Child c = spawn_chat("-m " + tiny.string() +
                       " --chat-template chatml -t 1 -c 64 -n -1 -s 1 --ignore-eos");
  ASSERT_GT(c.pid, 0);
  const std::string msg = "go\n";
  ASSERT_EQ(write(c.in, msg.data(), msg.size()), static_cast<ssize_t>(msg.size()));
  EXPECT_GE(read_some(c.out, 400, std::chrono::seconds(60)), 400u) << slurp(c.err);
  kill(c.pid, SIGINT);
  // The program lives on: the reply ends and the note comes.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (slurp(c.err).find("reply stopped") == std::string::npos &&
         std::chrono::steady_clock::now() < end) {
    read_some(c.out, 1 << 20, std::chrono::seconds(0));  // drain
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string err = slurp(c.err);
  EXPECT_NE(err.find("reply stopped"), std::string::npos) << err;
  int st = 0;
  EXPECT_EQ(waitpid(c.pid, &st, WNOHANG), 0) << "exited on the first Ctrl-C";
  kill(c.pid, SIGINT);
  EXPECT_EQ(wait_exit(c.pid, std::chrono::seconds(10)), 130);
  close(c.in);
  close(c.out);
  fs::remove(c.err);
  fs::remove(tiny);
}

}  // namespace
