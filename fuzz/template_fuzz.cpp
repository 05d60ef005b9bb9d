// minfer-fuzz-libs: minfer_template minfer_common
// libFuzzer target for the Jinja interpreter (src/template): the input is a template's text; it
// is parsed and, when it parses, rendered against a small conversation with tools under tight
// sandbox limits. Any TemplateError is an accepted outcome; a crash, a sanitizer report, an
// abort (MINFER_ASSERT), another exception type, a hang or a memory blow-up is a finding.
// Inputs of odd length render in a mutable sandbox so list.append / dict.update run too.
//
// Seeds (MINFER_FUZZ_SEED_DIR): the 44 real chat templates of ../shared/chat-templates.
// Mutation dictionary: fuzz/template.dict (Jinja tags, filters, tests, methods), e.g.
//   build-fuzz/fuzz/fuzz_template -dict=fuzz/template.dict build-fuzz/fuzz-corpus/template
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "fuzz_util.h"
#include "template/template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "messages": [
      {"role": "system", "content": "Be terse."},
      {"role": "user", "content": "Hi <b>&</b> \u00e9\u4e16"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 21.5}"},
      {"role": "assistant", "content": "It is 21.5 C.", "reasoning_content": "look"},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ]})");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = minfer::fuzz::seed_dir();
  if (dir.empty()) return 0;
  std::error_code ec;
  const auto templates = minfer::fuzz::shared_dir() / "chat-templates" / "templates";
  for (const auto& e : std::filesystem::directory_iterator(templates, ec)) {
    minfer::fuzz::write_seed(dir, e.path().filename().string(), minfer::fuzz::read_file(e.path()));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minfer::tmpl;
  if (size > 64 * 1024) return 0;
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  TemplateOptions opts;
  opts.limits.max_output_bytes = 1 << 20;
  opts.limits.max_loop_iterations = 100'000;
  opts.limits.max_call_depth = 32;
  opts.immutable = size % 2 == 0;
  try {
    const Template t = Template::parse(src, opts);
    (void)t.render(context());
  } catch (const TemplateError&) {
  }
  return 0;
}
