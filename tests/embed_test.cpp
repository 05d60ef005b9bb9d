// minfer-test-libs: minfer_server
// Embeddings: pooling and normalization against plain references, the embeddings graph (no
// output head), the Session's hidden-state rows, and stories260K's vectors against llama.cpp's
// llama-embedding (tests/data/embed/README.md), through the library and through `minfer embed`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "common/error.h"
#include "common/quant.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/pooling.h"
#include "model/session.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModel = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
const fs::path kGolden = fs::path(MINFER_TEST_DATA_DIR) / "embed";
const char* kPrompts[] = {"Once upon a time", "The cat sat on the mat"};

// ---- pooling and normalization ----

TEST(Pooling, ParsesNamesAndRefusesOthersNamingFlagAndValue) {
  EXPECT_EQ(parse_pooling("mean", "--pooling"), Pooling::Mean);
  EXPECT_EQ(parse_pooling("last", "--pooling"), Pooling::Last);
  EXPECT_EQ(parse_pooling("cls", "--pooling"), Pooling::Cls);
  EXPECT_EQ(parse_pooling("none", "--pooling"), Pooling::None);
  for (const char* bad : {"avg", "rank", ""}) {
    try {
      parse_pooling(bad, "--pooling");
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--pooling"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(parse_normalize("-1", "--normalize"), -1);
  EXPECT_EQ(parse_normalize("2", "--normalize"), 2);
  EXPECT_THROW(parse_normalize("-2", "--normalize"), Error);
  EXPECT_THROW(parse_normalize("two", "--normalize"), Error);
}

TEST(Pooling, RowsAndPoolMatchAPlainReference) {
  const int64_t E = 3, n = 4;
  std::vector<float> h(static_cast<size_t>(E * n));
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i) * 0.5f - 2.0f;
  EXPECT_EQ(pooling_rows(Pooling::Cls, n), std::vector<int32_t>({0}));
  EXPECT_EQ(pooling_rows(Pooling::Last, n), std::vector<int32_t>({3}));
  EXPECT_EQ(pooling_rows(Pooling::Mean, n), std::vector<int32_t>({0, 1, 2, 3}));
  EXPECT_EQ(pooling_rows(Pooling::None, n), std::vector<int32_t>({0, 1, 2, 3}));
  const std::vector<float> mean = pool(Pooling::Mean, h, E);
  for (int64_t i = 0; i < E; ++i) {
    float ref = 0;
    for (int64_t r = 0; r < n; ++r) ref += h[static_cast<size_t>(r * E + i)];
    EXPECT_FLOAT_EQ(mean[static_cast<size_t>(i)], ref / n);
  }
  EXPECT_EQ(pool(Pooling::None, h, E), h);
  const std::vector<float> last(h.end() - E, h.end());
  EXPECT_EQ(pool(Pooling::Last, last, E), last);
}

TEST(Pooling, NormalizeModesAsLlamaCpp) {
  std::vector<float> v = {3, -4, 0, 1, 1, 1};  // two vectors of 3
  std::vector<float> a = v;
  normalize(a, 3, 2);
  EXPECT_FLOAT_EQ(a[0], 0.6f);
  EXPECT_FLOAT_EQ(a[1], -0.8f);
  EXPECT_FLOAT_EQ(a[3], 1.0f / std::sqrt(3.0f));
  std::vector<float> b = v;
  normalize(b, 3, 1);  // taxicab
  EXPECT_FLOAT_EQ(b[0], 3.0f / 7.0f);
  std::vector<float> c = v;
  normalize(c, 3, 0);  // max-abs to the int16 range
  EXPECT_FLOAT_EQ(c[1], -32760.0f);
  std::vector<float> d = v;
  normalize(d, 3, -1);
  EXPECT_EQ(d, v);
  std::vector<float> z = {0, 0, 0};
  normalize(z, 3, 2);  // a zero norm leaves zeros, no NaN
  EXPECT_EQ(z, std::vector<float>({0, 0, 0}));
}

// ---- the embeddings graph and Session ----

class EmbedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << "../shared is absent: " << kModel;
    model_ = Model::load(kModel.string());
    tk_ = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_gguf(model_->file()));
  }
  std::vector<int32_t> tokens(const char* text) const {
    return tk_->tokenize(text, {.add_special = true, .parse_special = true});
  }
  // One sequence's vectors through a Session built for embeddings, in chunks of n_batch.
  std::vector<float> embed(Session& s, const std::vector<int32_t>& toks, Pooling p,
                           size_t n_batch) {
    return embed_sequence(s, 0, toks, p, 2, static_cast<int32_t>(n_batch));
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<tok::Tokenizer> tk_;
};

TEST_F(EmbedModel, GraphOutputsHiddenStatesAndNeverReadsTheHead) {
  GraphParams gp;
  gp.n_tokens = 5;
  gp.n_outputs = 2;
  gp.type = GraphType::Embeddings;
  gp.cparams.n_ctx = 64;
  const Graph g = model_->build_graph(gp);
  ASSERT_EQ(g.outputs().size(), 1u);
  const Node& out = g.node(g.outputs()[0]);
  EXPECT_EQ(out.name, kOutEmbd);
  EXPECT_EQ(out.ne[0], model_->hparams().n_embd);
  EXPECT_EQ(out.ne[1], 2);
  const WeightRef& head =
      model_->weights().tied_output ? model_->weights().tok_embd : model_->weights().output;
  // The head's bytes feed no matmul (a tied embedding is still read, by the row gather).
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i) {
    const Node& n = g.node(i);
    if (n.op != Op::MatMul) continue;
    for (NodeId src : n.src)
      if (src != kNoNode && g.node(src).op == Op::Weight)
        EXPECT_NE(g.weights()[static_cast<size_t>(g.node(src).p.weight_id)].data, head.data)
            << n.name;
  }
}

TEST_F(EmbedModel, SessionReturnsNEmbdRowsThatDoNotDependOnChunking) {
  SessionParams sp;
  sp.n_ctx = 256;
  sp.embeddings = true;
  Session s(*model_, sp);
  EXPECT_EQ(s.n_out_row(), model_->hparams().n_embd);
  const auto toks = tokens(kPrompts[1]);
  const auto whole = embed(s, toks, Pooling::Mean, toks.size());
  const auto chunked = embed(s, toks, Pooling::Mean, 3);  // three micro-batches and a tail
  ASSERT_EQ(whole.size(), chunked.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(whole[i], chunked[i], 1e-5f) << i;
}

// The embeddings output is exactly what the head reads: the head's rows times the hidden
// state give the logits a causal Session returns.
TEST_F(EmbedModel, HiddenStateTimesTheHeadIsTheLogits) {
  SessionParams sp;
  sp.n_ctx = 256;
  sp.repack_weights = false;  // the head stays readable in the file's layout
  Session logits_s(*model_, sp);
  sp.embeddings = true;
  Session embd_s(*model_, sp);
  const auto toks = tokens(kPrompts[0]);
  const auto logits = logits_s.eval_last(toks, 0);
  const std::vector<float> logit_row(logits.begin(), logits.end());
  const auto h = embd_s.eval_last(toks, 0);
  const int64_t E = model_->hparams().n_embd, V = model_->hparams().n_vocab;
  ASSERT_EQ(static_cast<int64_t>(h.size()), E);
  const WeightRef& head =
      model_->weights().tied_output ? model_->weights().tok_embd : model_->weights().output;
  std::vector<float> row(static_cast<size_t>(E));
  for (int64_t v = 0; v < V; ++v) {
    dequantize_row(head.type, head.data + v * row_size(head.type, E), row.data(), E);
    double dot = 0;
    for (int64_t i = 0; i < E; ++i) dot += double(row[size_t(i)]) * h[size_t(i)];
    ASSERT_NEAR(dot, logit_row[size_t(v)], 1e-3 * (1 + std::abs(dot))) << "token " << v;
  }
}

TEST(Pooling, DefaultIsTheFilesPoolingTypeElseNone) {
  const auto file = [](std::optional<uint32_t> pooling) {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::string("qwen3"));
    if (pooling) w.set("qwen3.pooling_type", gguf::Value::u32(*pooling));
    return w.to_bytes();
  };
  const auto last = file(3), none = file(std::nullopt), rank = file(4);
  const gguf::File fl = gguf::File::from_memory(last.data(), last.size(), "emb.gguf");
  const gguf::File fn = gguf::File::from_memory(none.data(), none.size(), "plain.gguf");
  const gguf::File fr = gguf::File::from_memory(rank.data(), rank.size(), "rank.gguf");
  EXPECT_EQ(gguf_pooling(fl), Pooling::Last);  // Qwen3-Embedding's
  EXPECT_EQ(resolve_pooling(Pooling::Unspecified, fl), Pooling::Last);
  EXPECT_EQ(resolve_pooling(Pooling::Mean, fl), Pooling::Mean);  // --pooling wins
  EXPECT_EQ(gguf_pooling(fn), Pooling::Unspecified);
  EXPECT_EQ(resolve_pooling(Pooling::Unspecified, fn), Pooling::None);  // llama.cpp's rule
  try {
    gguf_pooling(fr);
    FAIL() << "rank accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen3.pooling_type"), std::string::npos) << e.what();
  }
}

// --device sim: the layers (and with -ngl past n_layer the final norm) on the simulated device
// give the CPU's vectors to the bit (the output is copied back through the backend).
TEST_F(EmbedModel, SimulatedDeviceGivesTheCpuVectors) {
  SessionParams sp;
  sp.n_ctx = 256;
  sp.embeddings = true;
  Session cpu(*model_, sp);
  const auto toks = tokens(kPrompts[1]);
  const auto want = embed(cpu, toks, Pooling::Mean, 512);
  for (int32_t ngl : {2, 99}) {
    sp.device = BackendKind::Sim;
    sp.n_gpu_layers = ngl;
    Session dev(*model_, sp);
    EXPECT_EQ(embed(dev, toks, Pooling::Mean, 512), want) << "-ngl " << ngl;
  }
}

std::vector<std::vector<float>> golden(const std::string& pooling) {
  std::ifstream in(kGolden / ("stories260K-" + pooling + ".json"));
  const json j = json::parse(in);
  std::vector<std::vector<float>> out;
  for (const json& d : j.at("data")) out.push_back(d.at("embedding").get<std::vector<float>>());
  return out;
}

void expect_close(const std::vector<std::vector<float>>& want, const std::vector<float>& got,
                  const std::string& what) {
  ASSERT_FALSE(want.empty());
  const size_t E = want[0].size();
  ASSERT_EQ(got.size(), want.size() * E) << what;
  float worst = 0;
  for (size_t v = 0; v < want.size(); ++v)
    for (size_t i = 0; i < E; ++i) worst = std::max(worst, std::abs(want[v][i] - got[v * E + i]));
  EXPECT_LT(worst, 2e-3f) << what;
}

TEST_F(EmbedModel, MatchesLlamaEmbeddingForEveryPooling) {
  SessionParams sp;
  sp.n_ctx = 256;
  sp.embeddings = true;
  Session s(*model_, sp);
  for (const char* name : {"mean", "cls", "last", "none"}) {
    const Pooling p = parse_pooling(name, "--pooling");
    std::vector<float> got;
    for (const char* text : kPrompts) {
      const auto v = embed(s, tokens(text), p, 512);
      got.insert(got.end(), v.begin(), v.end());
    }
    expect_close(golden(name), got, name);
  }
}

TEST_F(EmbedModel, CliMatchesLlamaEmbeddingAndDefaultsToTheFilesPooling) {
  const std::string base = std::string(MINFER_BINARY) + " embed -m " + kModel.string() +
                           " -t 1 -p \"$(printf 'Once upon a time\\nThe cat sat on the mat')\"";
  for (const std::string name : {"mean", "last", ""}) {  // "": no key in the file -> none
    const auto r = test::run_captured(
        base + (name.empty() ? "" : " --pooling " + name) + " -o json", "embed_cli");
    ASSERT_EQ(r.status, 0) << r.err;
    std::vector<float> got;
    const json out = json::parse(r.out);  // kept: a range-for over a temporary's member dangles
    for (const json& d : out.at("data")) {
      const auto v = d.at("embedding").get<std::vector<float>>();
      got.insert(got.end(), v.begin(), v.end());
    }
    expect_close(golden(name.empty() ? "none" : name), got, "cli " + name);
  }
}

TEST(EmbedCli, BadFlagsNameTheFlagAndValue) {
  const std::string base = std::string(MINFER_BINARY) + " embed -m " + kModel.string() + " -p hi";
  struct Case {
    std::string args, want;
  };
  for (const Case& c : {Case{" --pooling avg", "--pooling 'avg'"},
                        Case{" --normalize x", "--normalize 'x'"}, Case{" -o yaml", "-o 'yaml'"}}) {
    const auto r = test::run_captured(base + c.args, "embed_cli_bad");
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
  }
}

// -f: the file's final newline is not an empty last prompt (llama.cpp's -f drops it too).
TEST_F(EmbedModel, CliFileEndingInANewlineIsOnePromptPerLine) {
  const fs::path f = fs::temp_directory_path() / ("minfer_embed_" + std::to_string(::getpid()));
  std::ofstream(f) << kPrompts[0] << "\n" << kPrompts[1] << "\n";
  const auto r = test::run_captured(std::string(MINFER_BINARY) + " embed -m " + kModel.string() +
                                        " -t 1 --pooling mean -o json -f " + f.string(),
                                    "embed_cli_file");
  fs::remove(f);
  ASSERT_EQ(r.status, 0) << r.err;
  const json out = json::parse(r.out);
  std::vector<float> got;
  for (const json& d : out.at("data")) {
    const auto v = d.at("embedding").get<std::vector<float>>();
    got.insert(got.end(), v.begin(), v.end());
  }
  expect_close(golden("mean"), got, "cli -f");
}

TEST_F(EmbedModel, CliRefusesAPromptLongerThanTheContext) {
  const auto r = test::run_captured(std::string(MINFER_BINARY) + " embed -m " + kModel.string() +
                                        " -c 4 -p 'Once upon a time there was a cat'",
                                    "embed_cli_long");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("longer than the context of 4 tokens"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace minfer
