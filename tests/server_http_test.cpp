// minfer-test-libs: minfer_server
// The server over HTTP on 127.0.0.1 with a FakeSeqEngine: exact greedy text whatever the
// load, 32 concurrent clients, hostile requests, queue limit, disconnects, KV exhaustion,
// prompt cache, stop strings, API key. Every wait is bounded.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "server_test_util.h"

namespace minfer::testing {
namespace {

json post_json(httplib::Client& c, const std::string& path, const json& body, int* status,
               httplib::Headers h = {}) {
  auto r = c.Post(path.c_str(), h, body.dump(), "application/json");
  if (!r) {
    *status = -1;
    return json();
  }
  *status = r->status;
  return json::parse(r->body, nullptr, false);
}

json get_json(const TestServer& s, const std::string& path) {
  auto c = s.client();
  auto r = c.Get(path.c_str());
  return r ? json::parse(r->body, nullptr, false) : json();
}

// POST /v1/completions, greedy, n tokens; expects 200.
json complete_greedy(const TestServer& s, const std::string& prompt, int n) {
  auto c = s.client();
  int st = 0;
  json r = post_json(c, "/v1/completions",
                     {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}}, &st);
  EXPECT_EQ(st, 200) << r.dump();
  return r;
}

// Waits (bounded) until /slots shows every slot idle.
bool all_slots_idle(const TestServer& s, int max_ms = 3000) {
  for (int i = 0; i < max_ms / 10; ++i) {
    const json sl = get_json(s, "/slots");
    bool idle = sl.is_array() && !sl.empty();
    for (const json& x : sl) idle = idle && !x["is_processing"].get<bool>();
    if (idle) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string completion_text(const TestServer& s, const std::string& prompt, int n, bool stream) {
  auto c = s.client();
  json body = {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"stream", stream}};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  if (!r)
    return "<no answer: " + httplib::to_string(r.error()) + " after " +
           std::to_string((std::chrono::steady_clock::now() - t0).count() / 1000000) +
           " ms stream " + std::to_string(stream) + ">";
  if (r->status != 200) return "<status " + std::to_string(r->status) + ": " + r->body + ">";
  if (!stream) return json::parse(r->body)["choices"][0]["text"];
  std::string text;
  bool done = false;
  for (const json& p : sse_payloads(r->body, &done))
    text += p["choices"][0]["text"].get<std::string>();
  return done ? text : "<no [DONE]>";
}

TEST(ServerHttp, GreedyTextIsExactAloneAndUnderLoad) {
  FakeParams fp;
  fp.delay_us = 300;
  TestServer s(fp);
  const std::string alone = completion_text(s, "Once upon a time", 24, false);
  EXPECT_EQ(alone, s.greedy_text("Once upon a time", 24));
  EXPECT_EQ(completion_text(s, "Once upon a time", 24, true), alone);
  // Four at once, different prompts, all slots busy: each text is still its own greedy text.
  std::vector<std::future<std::string>> fs;
  const std::vector<std::string> prompts = {"Once upon a time", "the cat", "a dog ran", "xyz"};
  for (int rep = 0; rep < 2; ++rep) {
    fs.clear();
    for (size_t i = 0; i < prompts.size(); ++i)
      fs.push_back(std::async(std::launch::async,
                              [&, i] { return completion_text(s, prompts[i], 40, i % 2 == 0); }));
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(fs[i].get(), s.greedy_text(prompts[i], 40)) << prompts[i];
  }
  EXPECT_GE(s.eng.max_seqs_in_batch.load(), 2) << "slots were never batched together";
  EXPECT_FALSE(s.eng.wrong_thread.load());
  EXPECT_TRUE(all_slots_idle(s));
}

TEST(ServerHttp, ThirtyTwoClientsNoErrorsEverySlotFreed) {
  FakeParams fp;
  fp.delay_us = 200;
  server::ServerParams sp;
  TestServer s(fp, sp);
  std::atomic<int> errors{0}, ok{0};
  std::vector<std::thread> ts;
  for (int c = 0; c < 32; ++c)
    ts.emplace_back([&, c] {
      for (int k = 0; k < 3; ++k) {
        const std::string prompt = "client " + std::to_string(c) + " req " + std::to_string(k);
        const std::string got = completion_text(s, prompt, 8 + (c + k) % 8, (c + k) % 2 == 0);
        if (got == s.greedy_text(prompt, 8 + (c + k) % 8)) {
          ok++;
        } else {
          errors++;
          ADD_FAILURE() << prompt << ": " << got;
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(ok.load(), 96);
  EXPECT_TRUE(all_slots_idle(s));
  EXPECT_FALSE(s.eng.wrong_thread.load());
  EXPECT_EQ(s.srv.metrics().requests_done.load(), 96u);
}

// Sends raw bytes and returns the status code of the answer (-1: none).
int raw_status(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  (void)!::write(fd, request.data(), request.size());
  std::string got;
  char buf[256];
  while (got.size() < 12) {  // bounded by SO_RCVTIMEO
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  ::close(fd);
  if (got.size() < 12) return -1;
  return std::atoi(got.substr(9, 3).c_str());
}

TEST(ServerHttp, HostileRequestsGetTheirStatusCodes) {
  server::ServerParams sp;
  sp.max_body_bytes = 4096;
  FakeParams fp;
  fp.n_ctx_seq = 64;
  TestServer s(fp, sp);
  auto c = s.client();
  struct Case {
    const char* method;
    const char* path;
    std::string body;
    int status;
  };
  const std::vector<Case> cases = {
      {"POST", "/v1/completions", "{not json", 400},
      {"POST", "/v1/completions", "[]", 400},
      {"POST", "/v1/completions", "{}", 400},
      {"POST", "/v1/completions", R"({"prompt":"x","temperature":"hot"})", 400},
      {"POST", "/v1/completions", R"({"prompt":"x","max_tokens":1e30})", 400},
      {"POST", "/v1/completions", R"({"prompt":[999999]})", 400},
      {"POST", "/v1/completions", R"({"prompt":"x","n":3})", 400},
      {"POST", "/v1/chat/completions", R"({"messages":{}})", 400},
      {"POST", "/v1/chat/completions", R"({"messages":[{"role":"user"}],"top_k":"a"})", 400},
      {"POST", "/completion", R"({"prompt":{"a":1}})", 400},
      {"POST", "/detokenize", R"({"tokens":[-1]})", 400},
      {"POST", "/tokenize", R"({"content":5})", 400},
      {"POST", "/v1/completions", std::string(8000, 'x'), 413},
      {"GET", "/nope", "", 404},
      {"GET", "/v1/completions", "", 405},
      {"POST", "/v1/models", "{}", 405},
      {"DELETE", "/health", "", 405},
      {"POST", "/v1/completions", R"({"prompt":"x\u0000 y","max_tokens":2})", 200},
      // A lone surrogate and raw invalid UTF-8 are not JSON (RFC 8259): 400, not a crash.
      {"POST", "/v1/completions", R"({"prompt":"x\udfff","max_tokens":2})", 400},
      {"POST", "/v1/completions", "{\"prompt\":\"\xff\xfe\",\"max_tokens\":2}", 400},
      {"POST", "/v1/completions", R"({"prompt":"","max_tokens":2})", 200},
      {"POST", "/v1/completions", R"({"prompt":"x","max_tokens":0})", 200},
  };
  for (const Case& k : cases) {
    httplib::Result r = std::string(k.method) == "GET" ? c.Get(k.path)
                        : std::string(k.method) == "POST"
                            ? c.Post(k.path, k.body, "application/json")
                            : c.Delete(k.path);
    ASSERT_TRUE(r) << k.method << " " << k.path << " " << k.body.substr(0, 60);
    EXPECT_EQ(r->status, k.status)
        << k.method << " " << k.path << " " << k.body.substr(0, 60) << " -> " << r->body;
    if (r->status >= 400) {
      const json e = json::parse(r->body, nullptr, false);
      EXPECT_TRUE(e.contains("error") && e["error"]["code"] == r->status) << r->body;
    }
  }
  // Too long for a slot: 400 exceed_context_size_error with the sizes.
  int st = 0;
  const json e = post_json(c, "/v1/completions", {{"prompt", std::string(200, 'a')}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(e["error"]["type"], "exceed_context_size_error");
  EXPECT_EQ(e["error"]["n_ctx"], 64);
  EXPECT_GT(e["error"]["n_prompt_tokens"].get<int>(), 64);
  // Broken HTTP itself.
  EXPECT_EQ(raw_status(s.port, "GARBAGE\r\n\r\n"), 400);
  EXPECT_EQ(raw_status(s.port, "POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n"),
            400);
  EXPECT_TRUE(all_slots_idle(s));
  EXPECT_EQ(completion_text(s, "still alive", 4, false), s.greedy_text("still alive", 4));
}

TEST(ServerHttp, ApiKeyIsRequiredAndCompared) {
  server::ServerParams sp;
  sp.api_key = "sekrit";
  TestServer s({}, sp);
  auto c = s.client();
  const json body = {{"prompt", "x"}, {"max_tokens", 2}};
  int st = 0;
  json e = post_json(c, "/v1/completions", body, &st);
  EXPECT_EQ(st, 401);
  EXPECT_EQ(e["error"]["type"], "authentication_error");
  post_json(c, "/v1/completions", body, &st, {{"Authorization", "Bearer sekrip"}});
  EXPECT_EQ(st, 401);
  post_json(c, "/v1/completions", body, &st, {{"Authorization", "Bearer sekrit-and-more"}});
  EXPECT_EQ(st, 401);
  post_json(c, "/v1/completions", body, &st, {{"Authorization", "Bearer sekrit"}});
  EXPECT_EQ(st, 200);
  EXPECT_EQ(c.Get("/health")->status, 200);  // public
  EXPECT_EQ(c.Get("/slots")->status, 401);
}

TEST(ServerHttp, QueueFullIs503WithRetryAfter) {
  server::ServerParams sp;
  sp.sched.max_queue = 1;
  FakeParams fp;
  fp.n_seq = 1;
  fp.delay_us = 5000;  // 5 ms a step: requests overlap
  TestServer s(fp, sp);
  std::atomic<int> n503{0}, n200{0}, retry_after{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; ++i)
    ts.emplace_back([&] {
      auto c = s.client();
      auto r = c.Post("/v1/completions", json{{"prompt", "x"}, {"max_tokens", 20}}.dump(),
                      "application/json");
      if (r && r->status == 503) {
        n503++;
        if (r->has_header("Retry-After")) retry_after++;
      }
      if (r && r->status == 200) n200++;
    });
  for (auto& t : ts) t.join();
  EXPECT_GE(n200.load(), 2);
  EXPECT_GE(n503.load(), 1);
  EXPECT_EQ(retry_after.load(), n503.load());
  EXPECT_EQ(n200 + n503, 6);
  EXPECT_TRUE(all_slots_idle(s));
}

TEST(ServerHttp, ClientDisconnectFreesTheSlot) {
  FakeParams fp;
  fp.n_seq = 1;
  fp.delay_us = 2000;
  TestServer s(fp);
  for (bool stream : {true, false}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(s.port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string body =
        json{{"prompt", "long"}, {"max_tokens", 100000}, {"stream", stream}}.dump();
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::write(fd, req.data(), req.size()), ssize_t(req.size()));
    // Wait until it is generating, then hang up.
    bool busy = false;
    for (int i = 0; i < 300 && !busy; ++i) {
      const json sl = get_json(s, "/slots");
      busy = sl.is_array() && sl[0]["is_processing"].get<bool>() && sl[0]["n_decoded"] > 3;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(busy);
    ::close(fd);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(all_slots_idle(s, 2000)) << (stream ? "stream" : "non-stream");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  }
  EXPECT_EQ(s.srv.metrics().requests_cancelled.load(), 2u);
}

TEST(ServerHttp, KvExhaustionEndsOneRequestNotTheServer) {
  FakeParams fp;
  fp.n_seq = 2;
  fp.n_ctx = 80;  // two slots of up to 64 tokens cannot both fill up
  fp.n_ctx_seq = 64;
  fp.delay_us = 2000;
  TestServer s(fp);
  std::vector<std::future<int>> fs;
  for (int i = 0; i < 2; ++i) {
    fs.push_back(std::async(std::launch::async, [&, i] {
      auto c = s.client();
      int st = 0;
      post_json(c, "/v1/completions",
                {{"prompt", i == 0 ? "first prompt here" : "second one here"}, {"max_tokens", 60}},
                &st);
      return st;
    }));
    // The second starts once the first is generating, so the two certainly overlap.
    for (int k = 0; i == 0 && k < 500; ++k) {
      const json sl = get_json(s, "/slots");
      bool gen = false;
      for (const json& x : sl) gen = gen || x["n_decoded"].get<int>() > 0;
      if (gen) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  std::vector<int> sts = {fs[0].get(), fs[1].get()};
  std::sort(sts.begin(), sts.end());
  EXPECT_EQ(sts[0], 200);
  EXPECT_EQ(sts[1], 503);
  EXPECT_TRUE(all_slots_idle(s));
  EXPECT_EQ(completion_text(s, "after", 4, false), s.greedy_text("after", 4));
}

// Generation ends on a token llama.cpp stops on by name even where the file's EOS is another
// id: Phi-3's user-defined </s> (id 2 here, as in Phi-3; Vocab::apply_llama_cpp_special_rules
// makes it control). The fake engine puts id 2 on top after 1 in 8 histories. The control:
// the same vocabulary with that token renamed runs to max_tokens.
TEST(ServerHttp, EndOfGenerationByNameStops) {
  FakeParams fp;
  fp.eos_sometimes = true;
  for (const char* text : {"</s>", "<x>"}) {
    tok::Vocab v = fake_vocab();
    v.tokens[2] = text;
    v.types[2] = tok::TokenType::UserDefined;
    v.eos = tok::kNoToken;
    v.apply_llama_cpp_special_rules();
    TestServer s(fp, {}, std::move(v));
    auto c = s.client();
    int st = 0;
    const json r =
        post_json(c, "/v1/completions",
                  {{"prompt", "Once upon"}, {"max_tokens", 64}, {"temperature", 0}}, &st);
    ASSERT_EQ(st, 200) << text;
    const bool named = std::string_view(text) == "</s>";
    EXPECT_EQ(r["choices"][0]["finish_reason"], named ? "stop" : "length") << text;
    EXPECT_EQ(r["usage"]["completion_tokens"].get<int>() < 64, named) << r.dump();
    if (named) {
      EXPECT_EQ(s.tk.vocab().type_of(2), tok::TokenType::Control);
    }
  }
}

TEST(ServerHttp, PromptCacheUsageAndStopStrings) {
  TestServer s;
  auto c = s.client();
  const std::string prompt = "Once upon a time there was a cat";
  int st = 0;
  json a = post_json(c, "/v1/completions",
                     {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(a["usage"]["completion_tokens"], 6);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  json b = post_json(c, "/v1/completions",
                     {{"prompt", prompt + " and"}, {"max_tokens", 6}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_GE(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 30);
  EXPECT_EQ(b["choices"][0]["text"], s.greedy_text(prompt + " and", 6));
  // A stop string: the third word of the greedy text.
  const std::string full = s.greedy_text("stop test", 12);
  size_t at = 0;
  for (int w = 0; w < 3; ++w) at = full.find(' ', at + 1);
  const std::string stop = full.substr(at, full.find(' ', at + 1) - at);
  for (bool stream : {false, true}) {
    auto r = c.Post("/v1/completions",
                    json{{"prompt", "stop test"},
                         {"max_tokens", 12},
                         {"temperature", 0},
                         {"stop", {stop}},
                         {"stream", stream}}
                        .dump(),
                    "application/json");
    ASSERT_TRUE(r && r->status == 200);
    std::string text, reason;
    if (stream) {
      for (const json& p : sse_payloads(r->body)) {
        text += p["choices"][0]["text"].get<std::string>();
        if (!p["choices"][0]["finish_reason"].is_null()) reason = p["choices"][0]["finish_reason"];
      }
    } else {
      const json j = json::parse(r->body);
      text = j["choices"][0]["text"];
      reason = j["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(text, full.substr(0, full.find(stop))) << "stop '" << stop << "'";
    EXPECT_EQ(reason, "stop");
  }
}

// Issue #19: two requests of one conversation at once (a replica behind a session-affinity
// balancer). The second cannot have the slot holding the conversation (the first runs there);
// it takes the other slot, which shares only the first block (a common opening), and must
// attach the conversation's blocks from the prefix cache rather than keep that one block and
// evaluate the rest again.
TEST(ServerHttp, ConcurrentRequestsOfOneConversationShareItsPrefix) {
  FakeParams fp;
  fp.n_seq = 2;
  fp.delay_us = 2000;
  TestServer s(fp);
  const std::string head = "Once upon a time the cat";
  const std::string conv = head + " sat on the mat and the dog ran far away and then it was happy";
  auto complete = [&s](const std::string& prompt, int n) { return complete_greedy(s, prompt, n); };
  // The conversation on one slot, another sharing its first block on the other.
  auto a = std::async(std::launch::async, complete, conv, 20);
  auto b = std::async(std::launch::async, complete, head + " sun moon tree bird sang", 20);
  a.get();
  b.get();
  const json sl = get_json(s, "/slots");
  ASSERT_TRUE(sl.is_array() && sl.size() == 2);
  ASSERT_GT(sl[0]["n_cache"].get<int>(), 0);
  ASSERT_GT(sl[1]["n_cache"].get<int>(), 0);
  // The conversation goes on twice at once: the first continuation takes its slot.
  auto first = std::async(std::launch::async, complete, conv + " and", 50);
  bool running = false;
  for (int i = 0; i < 300 && !running; ++i) {
    for (const json& x : get_json(s, "/slots"))
      running = running || (x["is_processing"].get<bool>() && x["n_decoded"].get<int>() > 2);
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(running);
  const json second = complete(conv + " then", 5);
  const int64_t n_conv =
      int64_t(s.tk.tokenize(conv, {.add_special = true, .parse_special = true}).size());
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
            n_conv / 4 * 4);
  EXPECT_EQ(second["choices"][0]["text"], s.greedy_text(conv + " then", 5));
  EXPECT_GE(first.get()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), n_conv);
}

// A request sharing only a short opening with a long kept conversation takes the empty slot,
// not the conversation's: the conversation's next turn then finds all of it on its slot.
TEST(ServerHttp, ShortSharedOpeningDoesNotEvictAConversation) {
  FakeParams fp;
  fp.n_seq = 2;
  TestServer s(fp);
  const std::string head = "Once upon a time the cat";
  const std::string conv = head + " sat on the mat and the dog ran far away and then it was happy";
  auto complete = [&s](const std::string& prompt, int n) { return complete_greedy(s, prompt, n); };
  const int64_t n_conv =
      int64_t(s.tk.tokenize(conv, {.add_special = true, .parse_special = true}).size());
  complete(conv, 8);                               // one slot keeps the conversation
  complete(head + " sun moon tree bird sang", 8);  // shares its first block only
  int kept = 0;
  for (const json& x : get_json(s, "/slots")) kept += x["n_cache"].get<int64_t>() >= n_conv;
  EXPECT_EQ(kept, 1);
  const json next = complete(conv + " and", 4);
  EXPECT_GE(next["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), n_conv);
}

TEST(ServerHttp, ChatNativeTokenizeLogprobsMetrics) {
  server::ServerParams sp;
  sp.metrics = true;
  TestServer s({}, sp);
  auto c = s.client();
  int st = 0;
  json chat = post_json(c, "/v1/chat/completions",
                        {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                         {"max_tokens", 5},
                         {"logprobs", true},
                         {"top_logprobs", 2}},
                        &st);
  ASSERT_EQ(st, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"].size(), 5u);
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  json nat =
      post_json(c, "/completion", {{"prompt", "abc"}, {"n_predict", 3}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(nat["content"], s.greedy_text("abc", 3));
  EXPECT_EQ(nat["tokens_predicted"], 3);
  EXPECT_EQ(nat["stop_type"], "limit");
  EXPECT_TRUE(nat["timings"].contains("predicted_per_second"));
  json tk = post_json(c, "/tokenize", {{"content", "ab"}}, &st);
  ASSERT_EQ(st, 200);
  json dt = post_json(c, "/detokenize", {{"tokens", tk["tokens"]}}, &st);
  EXPECT_EQ(dt["content"], "ab");  // the SPM space prefix removed again
  json tpl =
      post_json(c, "/apply-template", {{"messages", {{{"role", "user"}, {"content", "q"}}}}}, &st);
  EXPECT_EQ(tpl["prompt"], "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
  const json models = get_json(s, "/v1/models");
  EXPECT_EQ(models["data"][0]["id"], "fake");
  const json props = get_json(s, "/props");
  EXPECT_EQ(props["total_slots"], 4);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  for (const char* k :
       {"minfer:tokens_predicted_total", "minfer:prompt_tokens_total", "minfer:kv_blocks_used",
        "minfer:kv_blocks_free", "minfer:requests_deferred", "minfer:prefix_cache_hits_total",
        "minfer:predicted_tokens_seconds"})
    EXPECT_NE(m->body.find(k), std::string::npos) << k;
}

// logit_bias (OpenAI's {"id": bias} and llama.cpp's [[id, bias]] / false) moves the sampler as
// llama-server's does; it was accepted and silently ignored.
TEST(ServerHttp, LogitBiasBansAndForcesTokens) {
  TestServer s;
  auto c = s.client();
  int st = 0;
  auto first_token = [&](const json& bias) {
    json body = {{"prompt", "bias"}, {"n_predict", 1}, {"temperature", 0}, {"return_tokens", true}};
    if (!bias.is_null()) body["logit_bias"] = bias;
    const json r = post_json(c, "/completion", body, &st);
    EXPECT_EQ(st, 200) << r.dump();
    return r.value("tokens", json::array()).empty() ? -1 : r["tokens"][0].get<int>();
  };
  const int greedy = first_token(nullptr);
  ASSERT_GE(greedy, 0);
  const int other = greedy == 7 ? 8 : 7;
  EXPECT_NE(first_token({{std::to_string(greedy), -100}}), greedy);
  EXPECT_NE(first_token(json::array({json::array({greedy, false})})), greedy);
  EXPECT_EQ(first_token({{std::to_string(other), 100}}), other);
  EXPECT_EQ(first_token(json::array({json::array({other, 100.0})})), other);
  // Out of the vocabulary, out of range or mistyped: 400 naming the field.
  for (const json& bad : {json{{"999999", 1}}, json{{"1", 500}}, json{{"x", 1}}, json("5")}) {
    const json r = post_json(c, "/v1/completions",
                             {{"prompt", "bias"}, {"max_tokens", 1}, {"logit_bias", bad}}, &st);
    EXPECT_EQ(st, 400) << bad.dump();
    EXPECT_NE(r.dump().find("logit_bias"), std::string::npos) << r.dump();
  }
}

// A grammar leaves the model only the sentences it allows, then the end token; greedy and
// seeded requests repeat exactly. Over the fake engine, words outscore bytes: unconstrained
// greedy text never holds "{", so every JSON token below came through the grammar's mask.
TEST(ServerHttp, GrammarAndJsonSchemaConstrainTheOutput) {
  TestServer s;
  auto c = s.client();
  int st = 0;
  const json g = post_json(c, "/v1/completions",
                           {{"prompt", "Once upon"},
                            {"max_tokens", 50},
                            {"temperature", 0},
                            {"grammar", R"(root ::= (" cat" | " dog") " sat on" " the"? " mat")"}},
                           &st);
  ASSERT_EQ(st, 200) << g.dump();
  const std::string text = g["choices"][0]["text"];
  EXPECT_TRUE(text == " cat sat on mat" || text == " dog sat on mat" ||
              text == " cat sat on the mat" || text == " dog sat on the mat")
      << text;
  EXPECT_EQ(g["choices"][0]["finish_reason"], "stop");
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"animal", {{"enum", {"cat", "dog"}}}},
                         {"n", {{"type", "integer"}}},
                         {"ok", {{"type", "boolean"}}}}},
                       {"required", {"animal", "n", "ok"}}};
  for (const char* path : {"/v1/chat/completions", "/completion"}) {
    json body = {{"max_tokens", 200}, {"temperature", 0.8}, {"seed", 7}};
    if (std::string(path) == "/completion") {
      body["prompt"] = "json";
      body["json_schema"] = schema;
    } else {
      body["messages"] = {{{"role", "user"}, {"content", "json"}}};
      body["response_format"] = {{"type", "json_schema"},
                                 {"json_schema", {{"name", "x"}, {"schema", schema}}}};
    }
    const json a = post_json(c, path, body, &st);
    ASSERT_EQ(st, 200) << a.dump();
    const json b = post_json(c, path, body, &st);
    const std::string out = std::string(path) == "/completion"
                                ? a["content"].get<std::string>()
                                : a["choices"][0]["message"]["content"].get<std::string>();
    const json parsed = json::parse(out, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << out;
    EXPECT_TRUE(parsed["animal"] == "cat" || parsed["animal"] == "dog") << out;
    EXPECT_TRUE(parsed["n"].is_number_integer() && parsed["ok"].is_boolean()) << out;
    EXPECT_EQ(out, std::string(path) == "/completion"
                       ? b["content"].get<std::string>()
                       : b["choices"][0]["message"]["content"].get<std::string>());
  }
  const json e =
      post_json(c, "/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                 {"response_format",
                  {{"type", "json_schema"},
                   {"json_schema", {{"schema", {{"type", "string"}, {"format", "date"}}}}}}}},
                &st);
  EXPECT_EQ(st, 400);
  EXPECT_NE(e.dump().find("keyword 'format' is not supported"), std::string::npos) << e.dump();
  EXPECT_TRUE(all_slots_idle(s));
}

TEST(ServerHttp, ShutdownEndsStreamsCleanly) {
  FakeParams fp;
  fp.delay_us = 2000;
  server::ServerParams sp;
  sp.sched.shutdown_grace_ms = 100;
  auto s = std::make_unique<TestServer>(fp, sp);
  auto fut = std::async(std::launch::async, [&] {
    auto c = s->client();
    auto r = c.Post("/v1/completions",
                    json{{"prompt", "x"}, {"max_tokens", 100000}, {"stream", true}}.dump(),
                    "application/json");
    return r ? r->body : std::string("<no answer>");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  s->srv.shutdown();
  const std::string body = fut.get();
  bool done = false;
  const auto p = sse_payloads(body, &done);
  EXPECT_TRUE(done) << body.substr(body.size() > 300 ? body.size() - 300 : 0);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.back()["choices"][0]["finish_reason"], "length");
}

// Issue #19: a proxy retries a request on another replica only while no response has begun. A
// stream still queued when the server shuts down answers 503 with no body (not a 200 and an
// error frame), and /health answers 503 while the in-flight streams drain.
TEST(ServerHttp, StreamRefusedBeforeItsFirstTokenIs503AndHealthDrains) {
  FakeParams fp;
  fp.n_seq = 1;  // the second stream waits in the queue
  fp.delay_us = 2000;
  server::ServerParams sp;
  sp.sched.shutdown_grace_ms = 500;
  auto s = std::make_unique<TestServer>(fp, sp);
  auto stream = [&s] {
    auto c = s->client();
    auto r = c.Post("/v1/completions",
                    json{{"prompt", "x"}, {"max_tokens", 100000}, {"stream", true}}.dump(),
                    "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
  };
  auto running = std::async(std::launch::async, stream);
  bool busy = false;
  for (int i = 0; i < 300 && !busy; ++i) {
    const json sl = get_json(*s, "/slots");
    busy = sl.is_array() && sl[0]["n_decoded"] > 3;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(busy);
  auto queued = std::async(std::launch::async, stream);
  for (int i = 0; i < 300 && s->srv.metrics().requests.load() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(s->srv.metrics().requests.load(), 2u);
  auto stopper = std::async(std::launch::async, [&s] { s->srv.shutdown(); });
  bool draining = false;
  for (int i = 0; i < 200 && !draining; ++i) {  // within the 500 ms grace
    auto c = s->client(1);
    auto r = c.Get("/health");
    draining = r && r->status == 503;
    if (!draining) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_TRUE(draining);
  stopper.get();
  const auto [st_q, body_q] = queued.get();
  EXPECT_EQ(st_q, 503) << body_q;
  EXPECT_NE(body_q.find("shutting down"), std::string::npos) << body_q;
  const auto [st_r, body_r] = running.get();
  EXPECT_EQ(st_r, 200);
  bool done = false;
  const auto p = sse_payloads(body_r, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.back()["choices"][0]["finish_reason"], "length");
}

}  // namespace
}  // namespace minfer::testing

namespace minfer::testing {
namespace {

TEST(ServerHttp, ContextShiftKeepsGeneratingElseLength) {
  FakeParams fp;
  fp.n_ctx_seq = 32;
  for (bool shift : {false, true}) {
    server::ServerParams sp;
    sp.sched.context_shift = shift;
    TestServer s(fp, sp);
    auto c = s.client();
    int st = 0;
    const json r = post_json(c, "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 60}}, &st);
    ASSERT_EQ(st, 200) << r.dump();
    if (shift) {
      EXPECT_EQ(r["usage"]["completion_tokens"], 60);
      EXPECT_GE(s.eng.n_shifts.load(), 1);
    } else {
      EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 32);
      EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    }
  }
}

TEST(ServerHttp, ChunkedPrefillKeepsStreamsPaced) {
  FakeParams fp;
  fp.delay_us = 1000;
  server::ServerParams sp;
  sp.sched.n_batch = 256;
  sp.sched.n_ubatch = 16;
  TestServer s(fp, sp);
  auto stream =
      std::async(std::launch::async, [&] { return completion_text(s, "short", 150, true); });
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const std::string long_prompt(600, 'z');  // 600 byte tokens + BOS
  EXPECT_EQ(completion_text(s, long_prompt, 4, false), s.greedy_text(long_prompt, 4));
  EXPECT_EQ(stream.get(), s.greedy_text("short", 150));
  // While "short" was generating, the long prompt came in chunks of 16 next to its token.
  EXPECT_LE(s.eng.max_batch.load(), 16 + 4);
  EXPECT_GE(s.eng.max_seqs_in_batch.load(), 2);
}

TEST(ServerHttp, SlotsAndMetricsCanBeTurnedOff) {
  server::ServerParams sp;
  sp.slots = false;
  TestServer s({}, sp);
  auto c = s.client();
  EXPECT_EQ(c.Get("/slots")->status, 501);
  EXPECT_EQ(c.Get("/metrics")->status, 501);  // --metrics not given
}

}  // namespace
}  // namespace minfer::testing
