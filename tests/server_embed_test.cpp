// minfer-test-libs: minfer_server
// `serve --embeddings`: /v1/embeddings, /embeddings and /embedding over a real Session on
// stories260K, in process on a free loopback port (every client call has a timeout, every loop
// a count). Vectors are checked against llama.cpp's llama-embedding goldens
// (tests/data/embed/README.md); the request shapes and errors against llama-server's.
// The official `openai` npm client drives /v1/embeddings through
// tests/server/openai_embeddings.cjs (skipped only where npm is absent).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli_test_util.h"
#include "model/model.h"
#include "model/session.h"
#include "server/embeddings.h"
#include "server_test_util.h"

namespace minfer::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
const json kInputs = json::array({"Once upon a time", "The cat sat on the mat"});

std::vector<std::vector<float>> golden(const std::string& pooling) {
  std::ifstream in(fs::path(MINFER_TEST_DATA_DIR) / "embed" / ("stories260K-" + pooling + ".json"));
  const json j = json::parse(in);
  std::vector<std::vector<float>> out;
  for (const json& d : j.at("data")) out.push_back(d.at("embedding").get<std::vector<float>>());
  return out;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// A real model behind the HTTP server: Session (-np slots, -c tokens), the given pooling.
struct RealServer {
  RealServer(bool embeddings, Pooling pooling, int32_t n_seq = 2, int64_t n_ctx = 512) {
    model = Model::load(kModel.string());
    tk = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_gguf(model->file()));
    SessionParams sp;
    sp.n_ctx = n_ctx;
    sp.n_seq_max = n_seq;
    sp.n_threads = 1;
    session = std::make_unique<Session>(*model, sp);
    server::ServerParams p;
    p.port = 0;
    p.host = "127.0.0.1";
    p.embeddings = embeddings;
    srv = std::make_unique<server::HttpServer>(p);
    port = srv->bind();
    srv->start();
    server::ServedModel m;
    m.engine = session.get();
    m.tokenizer = tk.get();
    m.id = "stories260K.gguf";
    m.path = kModel.string();
    m.pooling = pooling;
    m.n_embd = model->hparams().n_embd;
    srv->set_model(m);
    httplib::Client c = client();
    for (int i = 0; i < 200; ++i) {  // bounded: 2 s
      if (auto r = c.Get("/health"); r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~RealServer() { srv->shutdown(); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    c.set_write_timeout(60, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const json& body) const {
    return client().Post(path, body.dump(), "application/json");
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<tok::Tokenizer> tk;
  std::unique_ptr<Session> session;
  std::unique_ptr<server::HttpServer> srv;
  int port = 0;
};

class ServerEmbed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << "../shared is absent: " << kModel;
  }
};

TEST_F(ServerEmbed, WithoutTheFlagEveryRouteIs501AsLlamaServer) {
  RealServer s(false, Pooling::Mean);
  for (const char* path : {"/v1/embeddings", "/embeddings", "/embedding"}) {
    auto r = s.post(path, {{"input", "hi"}});
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 501) << path;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["type"], "not_supported_error");
    EXPECT_NE(e["message"].get<std::string>().find("--embeddings"), std::string::npos);
  }
}

TEST_F(ServerEmbed, OpenAiRouteMatchesLlamaEmbeddingForEveryShapeOfInput) {
  for (const char* name : {"mean", "last", "cls"}) {
    RealServer s(true, parse_pooling(name, "--pooling"));
    const auto want = golden(name);
    auto r = s.post("/v1/embeddings", {{"input", kInputs}, {"model", "m"}});
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "list");
    EXPECT_EQ(j["model"], "m");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 15);  // 5 + 10 tokens with BOS
    EXPECT_EQ(j["usage"]["total_tokens"], 15);
    ASSERT_EQ(j["data"].size(), 2u);
    std::vector<std::vector<float>> got;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(j["data"][i]["object"], "embedding");
      EXPECT_EQ(j["data"][i]["index"], i);
      got.push_back(j["data"][i]["embedding"].get<std::vector<float>>());
      EXPECT_LT(max_diff(got[i], want[i]), 2e-3f) << name << " " << i;
    }
    // Token ids, a list of id lists, a single string: the same vectors.
    std::vector<json> ids;
    for (const json& t : kInputs)
      ids.push_back(s.tk->tokenize(t.get<std::string>(), {.add_special = true}));
    auto r2 = s.post("/v1/embeddings", {{"input", json::array({ids[0], ids[1]})}});
    ASSERT_TRUE(r2 && r2->status == 200) << r2->body;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_LT(max_diff(json::parse(r2->body)["data"][i]["embedding"], got[i]), 1e-5f);
    auto r3 = s.post("/v1/embeddings", {{"input", ids[1]}});
    ASSERT_TRUE(r3 && r3->status == 200) << r3->body;
    EXPECT_LT(max_diff(json::parse(r3->body)["data"][0]["embedding"], got[1]), 1e-5f);
    auto r4 = s.post("/v1/embeddings", {{"input", kInputs[0]}});
    ASSERT_TRUE(r4 && r4->status == 200) << r4->body;
    EXPECT_LT(max_diff(json::parse(r4->body)["data"][0]["embedding"], got[0]), 1e-5f);
    // base64: the float32 bytes of the same vector.
    auto r5 = s.post("/v1/embeddings", {{"input", kInputs[0]}, {"encoding_format", "base64"}});
    ASSERT_TRUE(r5 && r5->status == 200) << r5->body;
    const json d = json::parse(r5->body)["data"][0];
    EXPECT_EQ(d["encoding_format"], "base64");
    // (Against the single-input answer r4: inputs batched together may round differently.)
    EXPECT_EQ(d["embedding"], server::base64_floats(json::parse(r4->body)["data"][0]["embedding"]));
  }
}

TEST_F(ServerEmbed, NativeRouteAndPoolingNone) {
  RealServer s(true, Pooling::None);
  // OpenAI's route refuses pooling none, as llama-server.
  auto r = s.post("/v1/embeddings", {{"input", "hi"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("Pooling type 'none' is not OAI compatible"), std::string::npos);
  // The native route: every token's row, not normalized (llama-server normalizes pooled
  // vectors only); normalized here they are llama-embedding's.
  const auto want = golden("none");
  auto n = s.post("/embedding", {{"content", kInputs}});
  ASSERT_TRUE(n && n->status == 200) << n->body;
  const json j = json::parse(n->body);
  ASSERT_EQ(j.size(), 2u);
  size_t row = 0;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(j[i]["index"], i);
    for (const json& e : j[i]["embedding"]) {
      std::vector<float> v = e.get<std::vector<float>>();
      normalize(v, static_cast<int64_t>(v.size()), 2);
      ASSERT_LT(row, want.size());
      EXPECT_LT(max_diff(v, want[row]), 2e-3f) << row;
      ++row;
    }
  }
  EXPECT_EQ(row, want.size());
}

TEST_F(ServerEmbed, NativePooledIsOneNormalizedRowAndEmbdNormalizeApplies) {
  RealServer s(true, Pooling::Mean);
  auto r = s.post("/embeddings", {{"input", kInputs[0]}});
  ASSERT_TRUE(r && r->status == 200) << r->body;
  const json rows = json::parse(r->body)[0]["embedding"];
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_LT(max_diff(rows[0], golden("mean")[0]), 2e-3f);
  // embd_normalize -1: the raw mean; its euclidean normalization is the default answer.
  auto raw = s.post("/embeddings", {{"input", kInputs[0]}, {"embd_normalize", -1}});
  ASSERT_TRUE(raw && raw->status == 200) << raw->body;
  std::vector<float> v = json::parse(raw->body)[0]["embedding"][0];
  double norm = 0;
  for (float x : v) norm += double(x) * x;
  EXPECT_GT(std::abs(std::sqrt(norm) - 1.0), 1e-3);
  normalize(v, static_cast<int64_t>(v.size()), 2);
  EXPECT_LT(max_diff(v, rows[0]), 1e-6f);
}

TEST_F(ServerEmbed, BadRequestsAre400NamingTheProblem) {
  RealServer s(true, Pooling::Mean, 1, 32);  // a slot holds 32 tokens
  struct Case {
    json body;
    std::string want;
  };
  std::string longer = "Once";
  for (int i = 0; i < 40; ++i) longer += " upon";
  const size_t n_long = s.tk->tokenize(longer, {.add_special = true}).size();
  ASSERT_GT(n_long, 32u);
  const Case cases[] = {
      {{{"nothing", 1}}, "or \\\"content\\\" must be provided"},
      {{{"input", json::array()}}, "must not be empty"},
      {{{"input", json::array({1, json::object()})}}, "'input' element 0"},
      {{{"input", json::array({json::array({1, 100000})})}}, "token id 100000"},
      {{{"input", "hi"}, {"encoding_format", "hex"}}, "float or base64"},
      {{{"input", "hi"}, {"embd_normalize", "x"}}, "'embd_normalize'"},
      {{{"input", json::array({"hi", longer})}},
       "input 1 is " + std::to_string(n_long) + " tokens"},
  };
  for (const Case& c : cases) {
    auto r = s.post("/v1/embeddings", c.body);
    ASSERT_TRUE(r) << c.body.dump();
    EXPECT_EQ(r->status, 400) << c.body.dump();
    EXPECT_NE(r->body.find(c.want), std::string::npos) << c.body.dump() << " -> " << r->body;
  }
  auto r = s.post("/v1/embeddings", {{"input", longer}});
  ASSERT_TRUE(r);
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["type"], "exceed_context_size_error");
  EXPECT_EQ(e["n_ctx"], 32);
  EXPECT_EQ(e["n_prompt_tokens"], n_long);
}

// Several requests of several inputs at once over 2 slots: every vector as when alone, every
// sequence freed at the end, and completions still served in between (never in the same
// step: llama-server batches embeddings and completions apart too).
TEST_F(ServerEmbed, ConcurrentRequestsBatchTogetherAndFreeTheirSequences) {
  RealServer s(true, Pooling::Mean, 2);
  const auto want = golden("mean");
  auto solo = s.post("/completion", {{"prompt", "Once"}, {"n_predict", 12}, {"temperature", 0}});
  ASSERT_TRUE(solo && solo->status == 200);
  const std::string text = json::parse(solo->body)["content"];
  std::vector<std::thread> th;
  std::vector<std::string> errors(6);
  for (int t = 0; t < 6; ++t)
    th.emplace_back([&, t] {
      if (t == 5) {  // a generation among the embeddings
        auto r = s.post("/completion", {{"prompt", "Once"}, {"n_predict", 12}, {"temperature", 0}});
        if (!r || r->status != 200 || json::parse(r->body)["content"] != text)
          errors[t] = "completion differs: " + (r ? r->body : "none");
        return;
      }
      auto r = s.post("/v1/embeddings",
                      {{"input", json::array({kInputs[t % 2], kInputs[0], kInputs[1]})}});
      if (!r || r->status != 200) {
        errors[t] = r ? r->body : "no answer";
        return;
      }
      const json d = json::parse(r->body)["data"];
      const size_t which[] = {size_t(t % 2), 0, 1};
      for (size_t i = 0; i < 3; ++i)
        if (max_diff(d[i]["embedding"], want[which[i]]) > 2e-3f)
          errors[t] += "input " + std::to_string(i) + " differs; ";
    });
  for (auto& x : th) x.join();
  for (int t = 0; t < 6; ++t) EXPECT_EQ(errors[t], "") << t;
  // Every embedding input's sequence was dropped (the completion's slot keeps its prompt).
  httplib::Client c = s.client();
  int64_t held = 0;
  for (int i = 0; i < 100; ++i) {  // the final event precedes the slot snapshot: bounded wait
    auto r = c.Get("/slots");
    ASSERT_TRUE(r && r->status == 200);
    held = 0;
    bool busy = false;
    for (const json& sl : json::parse(r->body)) {
      held += sl["n_cache"].get<int64_t>();
      busy = busy || sl["is_processing"].get<bool>();
    }
    if (!busy) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LE(held, 13);  // at most the completion's 2 + 12 - 1 tokens
}

// A long generation in flight does not hold an embeddings request back: the two kinds take
// turns step by step (a step carries one kind only).
TEST_F(ServerEmbed, EmbeddingsAreNotQueuedBehindALongGeneration) {
  RealServer s(true, Pooling::Mean, 2, 2048);
  std::atomic<bool> gen_done{false};
  std::thread gen([&] {
    s.post("/completion", {{"prompt", "Once"}, {"n_predict", 1500}, {"ignore_eos", true}});
    gen_done = true;
  });
  bool started = false;
  httplib::Client c = s.client();
  for (int i = 0; i < 500 && !started; ++i) {  // bounded: 5 s
    if (auto r = c.Get("/slots"); r && r->status == 200)
      for (const json& sl : json::parse(r->body)) started = started || sl["state"] == "generating";
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(started);
  auto r = s.post("/v1/embeddings", {{"input", kInputs}});
  const bool before = !gen_done;
  gen.join();
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "none");
  EXPECT_TRUE(before) << "the embeddings waited for the whole generation";
}

TEST_F(ServerEmbed, OfficialOpenAiClient) {
  std::string why;
  const std::string modules = openai_npm_modules(&why);
  if (modules.empty()) GTEST_SKIP() << why;
  RealServer s(true, Pooling::Mean);
  const fs::path script =
      fs::path(MINFER_SOURCE_DIR) / "tests" / "server" / "openai_embeddings.cjs";
  const fs::path gold = fs::path(MINFER_TEST_DATA_DIR) / "embed" / "stories260K-mean.json";
  const std::string cmd = "timeout 120 node '" + script.string() + "' '" + modules +
                          "' http://127.0.0.1:" + std::to_string(s.port) + " '" + gold.string() +
                          "'";
  const test::CliResult r = test::run_captured(cmd, "openai_embeddings");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
}

}  // namespace
}  // namespace minfer::testing
