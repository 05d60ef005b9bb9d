// minfer-fuzz-libs: minfer_tokenizer minfer_sample nlohmann_json::nlohmann_json
// minfer-fuzz-sources: src/server/request.cpp src/server/text_stream.cpp src/server/constrain.cpp
// minfer-fuzz-sources: src/server/reasoning.cpp src/server/tool_call_formats.cpp src/server/json_scan.cpp
// minfer-fuzz-sources: src/server/tool_call_formats_more.cpp src/server/constrain_more.cpp
// minfer-fuzz-sources: src/server/tool_calls.cpp
// libFuzzer target for the server's request parsing (src/server/request.h, issue #13/#15): what
// a client controls before any model runs. Built from three server sources on libraries the other
// targets already build (no HTTP library, no kernels), so it is cheap in CI.
//
// Input whose first byte is 0x01: the stop-string hold-back (StopMatcher). The rest is split on
// NUL bytes: the first up-to-4 pieces after a 0x02 marker are stop strings, every other piece is
// a chunk of generated text. Checks: what is released never contains a stop string, is a prefix
// of the whole text, and with flush() is all of it when no stop string matched; when one
// matched, the release plus the stop word is a prefix of the text; the held tail stays shorter
// than the longest stop string; utf8_complete_prefix never cuts a complete text.
//
// Any other input: a request body, through parse_body and then each of parse_completions,
// parse_chat and parse_native (what /v1/completions, /v1/chat/completions and /completion do).
// An ApiError with status 400 is a clean refusal (its JSON must serialise: it is the response
// body); a parse that succeeds must give in-range values. A crash, a sanitizer report, another
// exception type (the HTTP layer would turn it into a 500) or an out-of-range value is a
// finding.
//
// Seeds (MINFER_FUZZ_SEED_DIR): request bodies of every endpoint (valid ones and ones with each
// field mistyped) and stop-string cases. Dictionary: fuzz/server.dict (the field names).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "server/request.h"
#include "server/text_stream.h"

namespace {

using namespace minfer;
using namespace minfer::server;

void write_seeds(const std::string& dir) {
  const char* bodies[] = {
      R"({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0})",
      R"({"prompt": [1, 2, 3], "stream": true, "stream_options": {"include_usage": true}})",
      R"({"prompt": [[1, 2]], "logprobs": 3, "stop": ["\n", "END"], "seed": 42})",
      R"({"prompt": ["text"], "top_k": 40, "top_p": 0.9, "min_p": 0.05, "n": 1})",
      R"({"messages": [{"role": "system", "content": "Be terse."},
          {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
          "max_completion_tokens": 8, "logprobs": true, "top_logprobs": 2})",
      R"({"messages": [{"role": "user", "content": "\u00e9\u4e16 \ud83d\ude00"}], "stop": "x",
          "presence_penalty": 1.5, "frequency_penalty": -1, "repeat_penalty": 1.1,
          "repeat_last_n": 64})",
      R"({"prompt": "Hi", "n_predict": 8, "cache_prompt": false, "n_probs": 2,
          "return_tokens": true, "ignore_eos": true, "model": "m"})",
      R"({"prompt": "x", "max_tokens": 16.0, "temperature": 3, "n": 2, "best_of": 2})",
      R"({"prompt": "x", "echo": true, "seed": -1, "top_k": -1, "stop": [1]})",
      R"({"messages": [], "messages": [{"role": 1}], "top_logprobs": 3})",
      R"({"messages": [{"role": "assistant", "content": "a", "reasoning_content": "b"}],
          "chat_template_kwargs": {"enable_thinking": false}, "reasoning_format": "deepseek"})",
      R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1],
          "reasoning_format": "legacy"})",
      R"([1, 2, 3])",
      R"({"prompt": 1e400})",
  };
  int i = 0;
  for (const char* b : bodies) fuzz::write_seed(dir, "body" + std::to_string(i++), b);
  using namespace std::string_literals;
  fuzz::write_seed(dir, "stop0", "\x01\x02" "END\0" "\n\n\0" "Once upon\0 a time E\0ND here"s);
  fuzz::write_seed(dir, "stop1", "\x01\x02" "abcd\0" "bc\0" "ab\0" "cd"s);
  fuzz::write_seed(dir, "stop2", "\x01\x02" "\xe4\xb8\x96\0" "\xe4\0" "\xb8\x96\xe4"s);
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "server_fuzz: %s\n", what);
  std::abort();
}

void check_request(const GenRequest& r, const GenParams& defaults) {
  const GenParams& g = r.gen;
  const SamplerParams& s = g.sampling;
  if (!(std::isfinite(s.temperature) && s.temperature >= 0 && s.temperature <= 2))
    finding("temperature out of range");
  if (!(s.top_p >= 0 && s.top_p <= 1) || !(s.min_p >= 0 && s.min_p <= 1))
    finding("top_p / min_p out of range");
  if (!(std::abs(g.presence_penalty) <= 2 && std::abs(g.frequency_penalty) <= 2))
    finding("penalty out of range");
  if (g.n_predict < -1) finding("n_predict below -1");
  if (defaults.n_predict >= 0 && (g.n_predict < 0 || g.n_predict > defaults.n_predict))
    finding("n_predict escapes the server's cap");
  if (g.top_logprobs < 0 || g.top_logprobs > 20) finding("top_logprobs out of range");
  if (g.stop.size() > 16) finding("more than 16 stop strings");
  if (s.repeat_last_n < 0) finding("negative repeat_last_n");
  for (const auto& [id, bias] : g.logit_bias)
    if (id < 0 || std::isnan(bias) || bias > 100) finding("logit_bias entry out of range");
  for (int32_t id : r.prompt_tokens)
    if (id < 0) finding("negative token id accepted");
  if (r.endpoint == Endpoint::ChatCompletions && r.messages.empty()) finding("chat with no messages");
}

void fuzz_body(const std::string& body) {
  json j;
  try {
    j = parse_body(body);
  } catch (const ApiError& e) {
    if (e.status() != 400) finding("parse_body: status other than 400");
    (void)e.to_json().dump();
    return;
  }
  GenParams defaults;
  defaults.n_predict = body.size() % 2 ? -1 : 64;  // with and without a server-wide cap
  using Parse = GenRequest (*)(const json&, const GenParams&);
  for (Parse parse : {Parse(parse_completions), Parse(parse_chat), Parse(parse_native)}) {
    try {
      check_request(parse(j, defaults), defaults);
    } catch (const ApiError& e) {
      if (e.status() != 400) finding("parse: status other than 400");
      (void)e.to_json().dump();  // the response body: must serialise (valid UTF-8)
    }
  }
}

void fuzz_stops(std::string_view in) {
  std::vector<std::string> pieces;
  size_t at = 0;
  while (at <= in.size() && pieces.size() < 64) {
    const size_t nul = in.find('\0', at);
    const size_t end = nul == std::string_view::npos ? in.size() : nul;
    pieces.emplace_back(in.substr(at, end - at));
    at = end + 1;
  }
  std::vector<std::string> stops;
  size_t first_chunk = 0;
  if (!pieces.empty() && !pieces[0].empty() && pieces[0][0] == '\x02') {
    pieces[0].erase(0, 1);
    for (; first_chunk < pieces.size() && first_chunk < 4; ++first_chunk)
      stops.push_back(pieces[first_chunk]);
  }
  size_t longest = 0;
  for (const std::string& s : stops) longest = std::max(longest, s.size());
  StopMatcher m(stops);
  std::string full, out;
  for (size_t i = first_chunk; i < pieces.size(); ++i) {
    full += pieces[i];
    const std::string got = m.push(pieces[i]);
    for (const std::string& s : stops)
      if (!s.empty() && got.find(s) != std::string::npos) finding("a stop string was released");
    out += got;
    if (!m.stopped() && m.held_bytes() >= std::max<size_t>(longest, 1))
      finding("held more than the longest stop string");
  }
  const bool stopped = m.stopped();
  const std::string word = m.stop_word();
  out += m.flush();
  if (full.compare(0, out.size(), out) != 0) finding("released text is not a prefix of the text");
  if (stopped) {
    if (full.compare(0, out.size() + word.size(), out + word) != 0)
      finding("release + stop word is not a prefix of the text");
  } else {
    if (out != full) finding("text lost without a stop string");
    for (const std::string& s : stops)
      if (!s.empty() && full.find(s) != std::string::npos) finding("a stop string was missed");
  }
  const size_t cut = utf8_complete_prefix(full);
  if (cut > full.size() || full.size() - cut > 3) finding("utf8_complete_prefix cut too much");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  if (!in.empty() && in[0] == '\x01')
    fuzz_stops(in.substr(1));
  else
    fuzz_body(std::string(in));
  return 0;
}
