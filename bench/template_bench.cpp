// minfer-bench-libs: minfer_template minfer_common
// Chat-template rendering with the Jinja interpreter (src/template): a 20-turn conversation
// (40 messages, ~100 bytes each) through the Qwen 2.5 template of ../shared/chat-templates,
// rendering only (the template parsed once, as `minfer chat` and the server keep it), plus
// parse alone and parse + render.
//   ./build/bench/bench_template
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "template/template.h"

namespace {

namespace fs = std::filesystem;
using minfer::tmpl::Template;
using Json = nlohmann::ordered_json;

std::string qwen_template() {
  const fs::path p =
      fs::path(MINFER_SHARED_DIR) / "chat-templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja";
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json conversation(int turns) {
  Json ctx;
  ctx["bos_token"] = "";
  ctx["eos_token"] = "<|im_end|>";
  ctx["add_generation_prompt"] = true;
  Json& msgs = ctx["messages"] = Json::array();
  msgs.push_back({{"role", "system"}, {"content", "You are a concise, helpful assistant."}});
  for (int i = 0; i < turns; ++i) {
    msgs.push_back({{"role", "user"},
                    {"content", "Question " + std::to_string(i) +
                                    ": how does the KV cache change decode cost as the context "
                                    "grows, and why?"}});
    msgs.push_back({{"role", "assistant"},
                    {"content", "Answer " + std::to_string(i) +
                                    ": each step attends over every cached key, so the cost is "
                                    "linear in the context length."}});
  }
  return ctx;
}

void BM_RenderQwen20Turns(benchmark::State& state) {
  const std::string src = qwen_template();
  if (src.empty()) {
    state.SkipWithError("Qwen 2.5 template not found (MINFER_SHARED_DIR)");
    return;
  }
  const Template t = Template::parse(src);
  const Json ctx = conversation(20);
  size_t bytes = 0;
  for (auto _ : state) {
    std::string out = t.render(ctx);
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["output_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderQwen20Turns)->Unit(benchmark::kMicrosecond);

void BM_ParseQwen(benchmark::State& state) {
  const std::string src = qwen_template();
  if (src.empty()) {
    state.SkipWithError("Qwen 2.5 template not found (MINFER_SHARED_DIR)");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(Template::parse(src));
}
BENCHMARK(BM_ParseQwen)->Unit(benchmark::kMicrosecond);

void BM_ParseAndRenderQwen20Turns(benchmark::State& state) {
  const std::string src = qwen_template();
  if (src.empty()) {
    state.SkipWithError("Qwen 2.5 template not found (MINFER_SHARED_DIR)");
    return;
  }
  const Json ctx = conversation(20);
  for (auto _ : state) benchmark::DoNotOptimize(minfer::tmpl::render_chat_template(src, ctx));
}
BENCHMARK(BM_ParseAndRenderQwen20Turns)->Unit(benchmark::kMicrosecond);

}  // namespace
