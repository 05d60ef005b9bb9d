// Shared by the server_reasoning*_test.cpp files: the template corpus, Qwen3's thinking shape
// and the HTTP helpers over the scripted fake engine (each byte a token: id 3 + byte).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "server_test_util.h"

namespace minfer::testing {

inline std::string corpus_template(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::path(MINFER_SHARED_DIR) / "chat-templates" / "templates" / (name + ".jinja");
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool have_corpus() {
  return std::filesystem::exists(std::filesystem::path(MINFER_SHARED_DIR) / "chat-templates" /
                                 "templates");
}

// Qwen3's shape: Hermes tool calls, reasoning_content of history turns rendered in <think>,
// enable_thinking false writes an empty thinking into the generation prompt.
constexpr const char* kThinkTemplate =
    "{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools>\nCall with <tool_call>{\"name\": <name>, \"arguments\": <args>}</tool_call>"
    "<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{% if m.reasoning_content %}<think>\n"
    "{{ m.reasoning_content }}\n</think>\n\n{% endif %}{% if m.content %}{{ m.content }}"
    "{% endif %}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n{\"name\": \""
    "{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
    "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}";

inline std::vector<int32_t> byte_script(std::string_view text, std::vector<int32_t> prefix = {}) {
  for (unsigned char c : text) prefix.push_back(3 + int32_t(c));
  return prefix;
}

inline tok::Vocab vocab_with(const char* chat_template) {
  tok::Vocab v = fake_vocab();
  v.chat_template = chat_template;
  return v;
}

inline FakeParams scripted(std::vector<int32_t> script) {
  FakeParams fp;
  fp.script = std::move(script);
  return fp;
}

inline json chat_body(bool stream, json extra = json::object()) {
  json b = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
            {"temperature", 0},
            {"stream", stream}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

inline json post(const TestServer& s, const json& body, int* status,
                 const char* route = "/v1/chat/completions") {
  auto r = s.client().Post(route, body.dump(), "application/json");
  *status = r ? r->status : -1;
  return r ? json::parse(r->body, nullptr, false) : json();
}

struct Streamed {
  std::string reasoning, content;
  bool reasoning_after_content = false;
  json last;
  bool done = false;
};

inline Streamed post_stream(const TestServer& s, const json& body) {
  auto r = s.client().Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200);
  Streamed out;
  if (!r) return out;
  const std::vector<json> p = sse_payloads(r->body, &out.done);
  for (size_t i = 1; i < p.size(); ++i) {
    const json& d = p[i]["choices"][0]["delta"];
    if (d.contains("reasoning_content")) {
      EXPECT_EQ(d.size(), 1u) << d.dump();
      out.reasoning += d["reasoning_content"].get<std::string>();
      out.reasoning_after_content |= !out.content.empty();
    }
    if (d.contains("content")) out.content += d["content"].get<std::string>();
  }
  if (!p.empty()) out.last = p.back();
  return out;
}

}  // namespace minfer::testing
