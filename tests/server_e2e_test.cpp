// minfer-test-libs: minfer_server
// `minfer serve` as a process on the real stories260K model: started by the test on a free
// loopback port (--port 0, the port read from its stdout), stopped by the test by PID with
// SIGTERM (exit status 0 expected). The official `openai` npm client drives it through
// tests/server/openai_e2e.cjs (installed into $HOME/.cache/minfer-npm, outside the repo; the
// test skips only where npm is absent). Every wait is bounded.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>

#include "server_test_util.h"

namespace minfer::testing {
namespace {

namespace fs = std::filesystem;

std::string stories() {
  const fs::path p = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  return fs::exists(p) ? p.string() : std::string();
}

// A `minfer serve` child process.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& args) {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    // One file per child (pid and a counter: a test may start several), removed by the
    // destructor.
    static int serial = 0;
    err_path_ = fs::temp_directory_path() /
                ("minfer_serve_err_" + std::to_string(::getpid()) + "_" + std::to_string(serial++));
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      const int e = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(e, 2);
      ::close(out[0]);
      std::vector<char*> argv{const_cast<char*>(MINFER_BINARY), const_cast<char*>("serve")};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(MINFER_BINARY, argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    // The first stdout line: "minfer serve: listening on http://127.0.0.1:PORT" (bounded by
    // the child: it prints it before loading, or exits).
    std::string line;
    char c;
    while (line.size() < 256 && ::read(out[0], &c, 1) == 1 && c != '\n') line += c;
    ::close(out[0]);
    const size_t colon = line.rfind(':');
    if (colon != std::string::npos) port_ = std::atoi(line.c_str() + colon + 1);
  }
  ~ServeProcess() {
    stop();
    std::error_code ec;
    fs::remove(err_path_, ec);
  }

  int port() const { return port_; }
  // Waits (bounded) for /health 200.
  bool wait_ready(int max_ms = 20000) const {
    httplib::Client c("127.0.0.1", port_);
    for (int i = 0; i < max_ms / 20; ++i) {
      if (auto r = c.Get("/health"); r && r->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // SIGTERM, then the exit status (SIGKILL after 15 s: -1).
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    int st = 0;
    for (int i = 0; i < 1500; ++i) {
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        pid_ = -1;
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return status_ = -1;
  }
  std::string stderr_text() const {
    std::ifstream in(err_path_);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  int status_ = -1;
  fs::path err_path_;
};

TEST(ServerE2e, FlagsUnknownIsAnErrorInapplicableIsNoted) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  const std::string cmd =
      std::string(MINFER_BINARY) + " serve -m " + m + " --port 0 --bogus-flag 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  std::string out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_NE(WEXITSTATUS(::pclose(p)), 0);
  EXPECT_NE(out.find("--bogus-flag"), std::string::npos) << out;

  ServeProcess s({"-m", m, "--port", "0", "-t", "1", "-ngl", "99", "-fa", "on", "--jinja",
                  "--cont-batching", "--no-webui", "-np", "1", "-c", "256", "-a", "tiny"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  ASSERT_TRUE(s.wait_ready()) << s.stderr_text();
  httplib::Client c("127.0.0.1", s.port());
  auto r = c.Get("/v1/models");
  ASSERT_TRUE(r && r->status == 200);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "tiny");
  EXPECT_EQ(s.stop(), 0);
  const std::string err = s.stderr_text();
  for (const char* f : {"-ngl ignored", "-fa ignored", "--jinja ignored", "--no-webui ignored"})
    EXPECT_NE(err.find(f), std::string::npos) << f << "\n" << err;
}

// Issue #13: the RAM guard runs before the port opens. A model that cannot fit (here: a
// MINFER_MEMORY_LIMIT of 32 MiB, below the guard's own 64 MiB margin) exits 1 with the
// guard's message and never prints the listening line; with --kv-overcommit it goes ahead.
TEST(ServerE2e, RamGuardRefusesBeforeThePortOpens) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  // timeout: a regression that binds and serves must fail the test, not hang it.
  const std::string cmd = "MINFER_MEMORY_LIMIT=33554432 timeout 60 " + std::string(MINFER_BINARY) +
                          " serve -m " + m + " --port 0 -t 1 -c 256 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  std::string out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st << "\n" << out;
  EXPECT_NE(out.find("not enough memory"), std::string::npos) << out;
  EXPECT_EQ(out.find("listening"), std::string::npos) << out;

  setenv("MINFER_MEMORY_LIMIT", "33554432", 1);  // the child inherits it
  ServeProcess s({"-m", m, "--port", "0", "-t", "1", "-c", "256", "--kv-overcommit"});
  unsetenv("MINFER_MEMORY_LIMIT");
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  ASSERT_TRUE(s.wait_ready()) << s.stderr_text();
  EXPECT_EQ(s.stop(), 0);
  EXPECT_NE(s.stderr_text().find("--kv-overcommit"), std::string::npos) << s.stderr_text();
}

TEST(ServerE2e, GreedyMatchesGoldenAndSigtermEndsAStreamCleanly) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  ServeProcess s({"-m", m, "--port", "0", "-t", "1", "-c", "2048"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  ASSERT_TRUE(s.wait_ready()) << s.stderr_text();
  const fs::path g = fs::path(MINFER_SHARED_DIR) / "golden" / "stories260K";
  for (int k = 1; k <= 3; ++k) {
    std::ifstream pf(g / ("case" + std::to_string(k) + ".prompt")),
        ef(g / ("case" + std::to_string(k) + ".expected"));
    const std::string prompt((std::istreambuf_iterator<char>(pf)), {});
    const std::string expected((std::istreambuf_iterator<char>(ef)), {});
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(60, 0);
    auto r = c.Post("/completion",
                    json{{"prompt", prompt}, {"n_predict", 96}, {"temperature", 0}}.dump(),
                    "application/json");
    ASSERT_TRUE(r && r->status == 200);
    const std::string got = json::parse(r->body)["content"];
    // As golden_test: llama.cpp's trailing newlines are not model output when generation
    // stopped right there.
    std::string text = expected;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    const std::string& want = got.size() > text.size() ? expected : text;
    EXPECT_EQ(got.substr(0, want.size()), want) << "case " << k;
  }
  // A long stream in flight when SIGTERM arrives ends with a final chunk and [DONE].
  std::string body;
  std::thread t([&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(60, 0);
    auto r = c.Post(
        "/v1/completions",
        json{{"prompt", "Once"}, {"max_tokens", 1900}, {"stream", true}, {"temperature", 0}}.dump(),
        "application/json");
    if (r) body = r->body;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(s.stop(), 0) << s.stderr_text();
  t.join();
  bool done = false;
  const auto p = sse_payloads(body, &done);
  EXPECT_TRUE(done) << body.size();
  ASSERT_FALSE(p.empty());
  EXPECT_FALSE(p.back()["choices"][0]["finish_reason"].is_null());
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

json post(int port, const std::string& path, const json& body, int* status) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  *status = r ? r->status : -1;
  return r ? json::parse(r->body, nullptr, false) : json();
}

// Constrained output on the real model: a GBNF grammar's answer is exactly one of its
// sentences, and JSON mode with a bounded schema gives a complete object that parses (greedy
// and seeded, each the same twice). stories260K writes stories inside unbounded JSON strings,
// so an unbounded json_object would run to max_tokens: the schema bounds its strings.
TEST(ServerE2e, GrammarAndJsonSchemaOnTheRealModel) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  ServeProcess s({"-m", m, "--port", "0", "-t", "1", "-c", "2048", "--chat-template", "chatml"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  ASSERT_TRUE(s.wait_ready()) << s.stderr_text();
  int st = 0;
  const json yn = post(s.port(), "/v1/completions",
                       {{"prompt", "Once upon a time"},
                        {"max_tokens", 20},
                        {"temperature", 0},
                        {"grammar", "root ::= (\"yes\" | \"no\")"}},
                       &st);
  ASSERT_EQ(st, 200) << yn.dump();
  const std::string answer = yn["choices"][0]["text"];
  EXPECT_TRUE(answer == "yes" || answer == "no") << answer;
  EXPECT_EQ(yn["choices"][0]["finish_reason"], "stop");
  const json schema = json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
      "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 3}},
      "required": ["name", "age", "pets"]})");
  for (const json& sampling : {json{{"temperature", 0}}, json{{"seed", 5}}}) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Tell me about Lily."}}}},
                 {"max_tokens", 300},
                 {"response_format",
                  {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", schema}}}}}};
    body.update(sampling);
    const json a = post(s.port(), "/v1/chat/completions", body, &st);
    ASSERT_EQ(st, 200) << a.dump();
    EXPECT_EQ(a["choices"][0]["finish_reason"], "stop") << a.dump();
    const std::string text = a["choices"][0]["message"]["content"];
    const json obj = json::parse(text, nullptr, false);
    ASSERT_TRUE(obj.is_object()) << text;
    EXPECT_TRUE(obj["name"].is_string() && obj["age"].is_number_integer()) << text;
    EXPECT_LE(obj["pets"].size(), 3u) << text;
    const json b = post(s.port(), "/v1/chat/completions", body, &st);
    EXPECT_EQ(b["choices"][0]["message"]["content"], text) << sampling.dump();
  }
  EXPECT_EQ(s.stop(), 0) << s.stderr_text();
}

// The reasoning flags through `minfer serve`: Qwen3's template from a file, thinking turned off
// by --chat-template-kwargs (a request turns it back on), and a grammar that makes the real
// model write a thinking block, returned as reasoning_content.
TEST(ServerE2e, ReasoningFlagsAndSplitOnTheRealModel) {
  const std::string m = stories();
  const fs::path tmpl =
      fs::path(MINFER_SHARED_DIR) / "chat-templates" / "templates" / "Qwen-Qwen3-0.6B.jinja";
  if (m.empty() || !fs::exists(tmpl)) GTEST_SKIP() << "../shared absent";
  ServeProcess s({"-m", m, "--port", "0", "-t", "1", "-c", "2048", "--chat-template-file",
                  tmpl.string(), "--chat-template-kwargs", R"({"enable_thinking": false})",
                  "--reasoning-format", "deepseek"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  ASSERT_TRUE(s.wait_ready()) << s.stderr_text();
  httplib::Client c("127.0.0.1", s.port());
  auto props = c.Get("/props");
  ASSERT_TRUE(props && props->status == 200);
  EXPECT_EQ(json::parse(props->body)["reasoning_syntax"], "think");
  EXPECT_EQ(json::parse(props->body)["reasoning_format"], "deepseek");
  int st = 0;
  const json msgs = {{{"role", "user"}, {"content", "Is the sky blue?"}}};
  const std::string off_tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  json t = post(s.port(), "/apply-template", {{"messages", msgs}}, &st);
  ASSERT_EQ(st, 200) << t.dump();
  EXPECT_TRUE(t["prompt"].get<std::string>().ends_with(off_tail)) << t.dump();
  t = post(s.port(), "/apply-template",
           {{"messages", msgs}, {"chat_template_kwargs", {{"enable_thinking", true}}}}, &st);
  EXPECT_FALSE(t["prompt"].get<std::string>().ends_with(off_tail)) << t.dump();
  const json a = post(s.port(), "/v1/chat/completions",
                      {{"messages", msgs},
                       {"max_tokens", 60},
                       {"temperature", 0},
                       {"grammar", R"(root ::= "<think>\nSky.\n</think>\n\n" ("yes" | "no"))"}},
                      &st);
  ASSERT_EQ(st, 200) << a.dump();
  EXPECT_EQ(a["choices"][0]["message"]["reasoning_content"], "Sky.") << a.dump();
  const std::string answer = a["choices"][0]["message"]["content"];
  EXPECT_TRUE(answer == "yes" || answer == "no") << a.dump();
  EXPECT_EQ(s.stop(), 0) << s.stderr_text();
}

// Four slots on the real model: greedy text is the same alone and with every slot busy, and a
// shared prefix started in one slot is reused by another through the prefix cache.
TEST(ServerE2e, FourSlotsSameTextAndPrefixReuse) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  ServeProcess s({"-m", m, "--port", "0", "-t", "2", "-c", "4096", "-np", "4", "--metrics"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  ASSERT_TRUE(s.wait_ready()) << s.stderr_text();
  const fs::path g = fs::path(MINFER_SHARED_DIR) / "golden" / "stories260K";
  std::vector<std::string> prompts;
  for (int k = 1; k <= 3; ++k)
    prompts.push_back(slurp(g / ("case" + std::to_string(k) + ".prompt")));
  prompts.push_back("The little dog");
  auto body = [](const std::string& p) {
    return json{{"prompt", p}, {"n_predict", 64}, {"temperature", 0}, {"cache_prompt", false}};
  };
  std::vector<std::string> alone;
  int st = 0;
  for (const auto& p : prompts) {
    alone.push_back(post(s.port(), "/completion", body(p), &st)["content"]);
    ASSERT_EQ(st, 200);
  }
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<std::future<std::string>> fs;
    for (const auto& p : prompts)
      fs.push_back(std::async(std::launch::async, [&, p] {
        int code = 0;
        const json r = post(s.port(), "/completion", body(p), &code);
        return code == 200 ? r["content"].get<std::string>() : std::string("<error>");
      }));
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(fs[i].get(), alone[i]) << prompts[i];
  }
  // A long shared prefix (> 2 blocks of 16): A fills slot X; B and C then run together, one of
  // them in another slot, which attaches the prefix's cached blocks.
  std::string shared = "One day, a little girl named Lily went to the park with her mom. ";
  shared += shared + shared;
  const json a = post(s.port(), "/v1/completions",
                      {{"prompt", shared + "She"}, {"max_tokens", 4}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200);
  auto run = [&](const std::string& tail) {
    return std::async(std::launch::async, [&, tail] {
      int code = 0;
      return post(s.port(), "/completion",
                  {{"prompt", shared + tail}, {"n_predict", 24}, {"temperature", 0}}, &code);
    });
  };
  auto b = run("They"), c = run("The sun");
  const json rb = b.get(), rc = c.get();
  // Whichever slot each lands in, the shared prefix is not evaluated again: through the slot's
  // own previous prompt (A's) or through the prefix cache.
  EXPECT_GE(std::min(rb["tokens_cached"].get<int>(), rc["tokens_cached"].get<int>()), 32)
      << rb.dump() << rc.dump();
  httplib::Client cl("127.0.0.1", s.port());
  auto metrics = cl.Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_NE(metrics->body.find("minfer:prefix_cache_hits_total"), std::string::npos);
  // Run at the same time, B and C hold two slots, so at least one took the prefix from the
  // cache's blocks. (A loaded machine may serve them one after the other in A's slot: then the
  // slot's prompt cache served both, and no block lookup was needed.)
  if (rb["id_slot"] != rc["id_slot"]) {
    EXPECT_EQ(metrics->body.find("minfer:prefix_cache_hits_total 0\n"), std::string::npos)
        << metrics->body;
  }
  EXPECT_EQ(s.stop(), 0) << s.stderr_text();
}

TEST(ServerE2e, OpenAiNpmClient) {
  const std::string m = stories();
  if (m.empty()) GTEST_SKIP() << "../shared absent";
  std::string why;
  const std::string modules = openai_npm_modules(&why);
  if (modules.empty() && why.find("absent") != std::string::npos) GTEST_SKIP() << why;
  ASSERT_FALSE(modules.empty()) << why;
  ServeProcess s({"-m", m, "--port", "0", "-t", "1", "-c", "2048", "--chat-template", "chatml",
                  "--api-key", "e2e-key"});
  ASSERT_GT(s.port(), 0) << s.stderr_text();
  ASSERT_TRUE(s.wait_ready()) << s.stderr_text();
  const fs::path g = fs::path(MINFER_SHARED_DIR) / "golden" / "stories260K";
  const std::string cmd =
      "timeout 300 node '" + std::string(MINFER_SOURCE_DIR) + "/tests/server/openai_e2e.cjs' '" +
      modules + "' http://127.0.0.1:" + std::to_string(s.port()) + " e2e-key '" +
      (g / "case1.prompt").string() + "' '" + (g / "case1.expected").string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(s.stop(), 0) << s.stderr_text();
}

}  // namespace
}  // namespace minfer::testing
