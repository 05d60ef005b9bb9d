#include "server/request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/error.h"
#include "server/constrain.h"

namespace minfer::server {

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    case json::value_t::discarded:
      return "invalid";
    default:
      return "number";
  }
}

[[noreturn]] void wrong_type(const char* field, const char* want, const json& v) {
  throw bad_request(fmt::format("'{}' must be {}, got {}", field, want, type_name(v)));
}

// Present and not null.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double get_number(const json& body, const char* name, double def, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, v->dump()));
  return d;
}

int64_t get_int(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number_integer()) {
    // 16.0 is an integer too (JavaScript clients send doubles).
    if (v->is_number_float() && std::isfinite(v->get<double>()) &&
        v->get<double>() == std::floor(v->get<double>()) && std::abs(v->get<double>()) < 1e15) {
    } else {
      wrong_type(name, "an integer", *v);
    }
  }
  const double d = v->get<double>();
  if (d < double(lo) || d > double(hi))
    throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, v->dump()));
  return static_cast<int64_t>(d);
}

bool get_bool(const json& body, const char* name, bool def) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::vector<std::string> get_stop(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) wrong_type("stop", "a string or a list of strings", *v);
  if (v->size() > 16) throw bad_request("'stop' holds at most 16 strings");
  std::vector<std::string> out;
  for (const json& s : *v) {
    if (!s.is_string()) wrong_type("stop[]", "a string", s);
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::vector<int32_t> get_token_list(const json& arr, const char* name) {
  std::vector<int32_t> out;
  for (const json& t : arr) {
    if (!t.is_number_integer()) wrong_type(name, "a list of token ids (integers)", t);
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      throw bad_request(fmt::format("'{}' holds an invalid token id {}", name, id));
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

// One logit_bias entry: a number in [-100, 100] (OpenAI's range: -100 bans in practice, 100
// all but forces) or llama.cpp's `false` (never sample the token).
float bias_value(const json& v) {
  if (v.is_boolean() && !v.get<bool>()) return -INFINITY;
  if (!v.is_number()) wrong_type("logit_bias values", "numbers (or false)", v);
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < -100.0 || d > 100.0)
    throw bad_request(fmt::format("'logit_bias' values must be in [-100, 100], got {}", v.dump()));
  return float(d);
}

int32_t bias_token(const json& id) {
  if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
      id.get<int64_t>() > std::numeric_limits<int32_t>::max())
    throw bad_request(fmt::format("'logit_bias' keys must be token ids, got {}", id.dump()));
  return int32_t(id.get<int64_t>());
}

// OpenAI's {"token id": bias, ...} or llama.cpp's [[token id, bias], ...].
std::vector<std::pair<int32_t, float>> get_logit_bias(const json& body) {
  const json* v = field(body, "logit_bias");
  if (!v) return {};
  std::vector<std::pair<int32_t, float>> out;
  if (v->is_object()) {
    for (const auto& [key, val] : v->items()) {
      const json id = json::parse(key, nullptr, /*allow_exceptions=*/false);
      out.emplace_back(bias_token(id.is_discarded() ? json(key) : id), bias_value(val));
    }
  } else if (v->is_array()) {
    for (const json& e : *v) {
      if (!e.is_array() || e.size() != 2)
        throw bad_request("'logit_bias' as a list holds [token id, bias] pairs");
      out.emplace_back(bias_token(e[0]), bias_value(e[1]));
    }
  } else {
    wrong_type("logit_bias", "an object of token id -> bias", *v);
  }
  return out;
}

// Fields shared by every endpoint: sampling, stop, stream, seed, penalties.
void parse_common(const json& b, GenParams& g) {
  SamplerParams& s = g.sampling;
  s.temperature = float(get_number(b, "temperature", s.temperature, 0.0, 2.0));
  s.top_p = float(get_number(b, "top_p", s.top_p, 0.0, 1.0));
  s.top_k = int32_t(get_int(b, "top_k", s.top_k, -1, 1 << 20));
  s.min_p = float(get_number(b, "min_p", s.min_p, 0.0, 1.0));
  s.repeat_penalty = float(get_number(b, "repeat_penalty", s.repeat_penalty, 0.01, 10.0));
  s.repeat_penalty = float(get_number(b, "repetition_penalty", s.repeat_penalty, 0.01, 10.0));
  s.repeat_last_n = int32_t(get_int(b, "repeat_last_n", s.repeat_last_n, 0, 1 << 16));
  const int64_t seed = get_int(b, "seed", -1, std::numeric_limits<int64_t>::min() / 2,
                               std::numeric_limits<int64_t>::max() / 2);
  if (seed >= 0) s.seed = static_cast<uint32_t>(seed & 0xFFFFFFFF);  // -1: the server's
  g.presence_penalty = float(get_number(b, "presence_penalty", 0.0, -2.0, 2.0));
  g.frequency_penalty = float(get_number(b, "frequency_penalty", 0.0, -2.0, 2.0));
  g.stop = get_stop(b);
  g.stream = get_bool(b, "stream", false);
  if (const json* so = field(b, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    g.include_usage = get_bool(*so, "include_usage", false);
  }
  g.cache_prompt = get_bool(b, "cache_prompt", true);
  g.ignore_eos = get_bool(b, "ignore_eos", false);
  g.logit_bias = get_logit_bias(b);
  parse_grammar_fields(b, g);
  const int64_t n = get_int(b, "n", 1, 1, 1 << 20);
  if (n != 1) throw bad_request("'n' must be 1: this server returns one choice per request");
  if (get_int(b, "best_of", 1, 1, 1 << 20) != 1) throw bad_request("'best_of' must be 1");
  try {
    s.validate();  // the sampler's own rules, so the decode loop never meets a bad value
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
}

int64_t cap_predict(int64_t requested, int64_t server_cap) {
  if (server_cap < 0) return requested;
  return requested < 0 ? server_cap : std::min(requested, server_cap);
}

std::string model_name(const json& b) {
  const json* m = field(b, "model");
  if (!m) return {};
  if (!m->is_string()) wrong_type("model", "a string", *m);
  return m->get<std::string>();
}

}  // namespace

json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad_request("the request body is not valid JSON");
  if (!j.is_object()) throw bad_request("the request body must be a JSON object");
  return j;
}

GenRequest parse_completions(const json& b, const GenParams& defaults) {
  GenRequest r;
  r.endpoint = Endpoint::Completions;
  r.gen = defaults;
  r.model = model_name(b);
  const json* p = field(b, "prompt");
  if (!p) throw bad_request("'prompt' is required");
  // [] is no prompt at all (llama-server: "prompt" must not be empty); "" is the empty text,
  // which tokenizes to BOS alone where the model adds one, as there.
  if (p->is_array() && p->empty()) throw bad_request("'prompt' must not be empty");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && p->at(0).is_number()) {
    r.prompt_tokens = get_token_list(*p, "prompt");
    r.prompt_is_tokens = true;
  } else if (p->is_array() && p->size() == 1 && p->at(0).is_string()) {
    r.prompt_text = p->at(0).get<std::string>();
  } else if (p->is_array() && p->size() == 1 && p->at(0).is_array()) {
    r.prompt_tokens = get_token_list(p->at(0), "prompt");
    r.prompt_is_tokens = true;
  } else {
    throw bad_request("'prompt' must be a string, a list of token ids, or a list of one of them");
  }
  parse_common(b, r.gen);
  r.gen.n_predict = cap_predict(get_int(b, "max_tokens", 16, 0, 1 << 24), defaults.n_predict);
  // Completions: logprobs is an integer count of alternatives (0..5 in OpenAI's API).
  if (const json* lp = field(b, "logprobs")) {
    if (lp->is_boolean()) {
      r.gen.logprobs = lp->get<bool>();
    } else {
      r.gen.top_logprobs = int32_t(get_int(b, "logprobs", 0, 0, 20));
      r.gen.logprobs = true;
    }
  }
  if (get_bool(b, "echo", false)) throw bad_request("'echo' is not supported");
  return r;
}

namespace {

// content: a string, or a list of parts of which only {"type": "text", "text": ...} is allowed.
// A message without the key is a 400 unless it carries tool_calls (llama-server's rule, issues
// 8367 / 12279 there): a client that misspells the field gets told instead of an empty turn.
// An explicit null is an empty text, as there (an assistant's tool-call turn sends it).
std::string message_content(const json& m, size_t i) {
  if (!m.contains("content") && !m.contains("tool_calls"))
    throw bad_request(fmt::format("messages[{}]: expected 'content' or 'tool_calls'", i));
  const json* c = field(m, "content");
  if (!c) return {};
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) wrong_type("messages[].content", "a string or a list of text parts", *c);
  std::string out;
  for (const json& part : *c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw bad_request(fmt::format(
          "messages[{}].content: only parts of type 'text' with a string 'text' are supported", i));
    out += part["text"].get<std::string>();
  }
  return out;
}

// Whether `o` is an object whose "function" is an object with a string "name": the part that
// OpenAI's tool_calls, tools and tool_choice share.
bool names_a_function(const json& o) {
  if (!o.is_object()) return false;
  const json* fn = field(o, "function");
  return fn && fn->is_object() && fn->contains("name") && (*fn)["name"].is_string();
}

// A message's keys beyond role and content that templates read. tool_calls are OpenAI's
// {"id", "type": "function", "function": {"name", "arguments"}}; `arguments` comes as JSON text,
// but templates (Qwen2.5, Llama 3.1, Hermes, Mistral) print it with tojson and expect an object,
// so a text that parses as an object is passed as that object, as llama.cpp's Jinja path does
// (minja's object-arguments polyfill); any other text stays as it is.
json message_fields(const json& m, size_t i) {
  json out = json::object();
  if (const json* tc = field(m, "tool_calls")) {
    if (!tc->is_array()) wrong_type("messages[].tool_calls", "a list", *tc);
    json calls = *tc;
    for (json& c : calls) {
      if (!names_a_function(c))
        throw bad_request(fmt::format(
            "messages[{}].tool_calls: each call needs a 'function' with a string 'name'", i));
      json& fn = c["function"];
      if (fn.contains("arguments") && fn["arguments"].is_string()) {
        json args = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
        if (args.is_object()) fn["arguments"] = std::move(args);
      }
    }
    out["tool_calls"] = std::move(calls);
  }
  // reasoning_content: an assistant turn's thinking as this server returned it; templates that
  // keep the thinking of recent turns (Qwen3, GLM) read it.
  for (const char* key : {"tool_call_id", "name", "reasoning_content"}) {
    if (const json* v = field(m, key)) {
      if (!v->is_string())
        throw bad_request(fmt::format("messages[{}].{} must be a string", i, key));
      out[key] = *v;
    }
  }
  return out;
}

// tools: OpenAI's [{"type": "function", "function": {"name", "description", "parameters"}}],
// passed to the template as given (key order kept: templates print it with tojson).
json get_tools(const json& b) {
  const json* t = field(b, "tools");
  if (!t) return nullptr;
  if (!t->is_array()) wrong_type("tools", "a list", *t);
  for (size_t i = 0; i < t->size(); ++i) {
    const json& tool = (*t)[i];
    if (!names_a_function(tool) || !tool.contains("type") || tool["type"] != "function")
      throw bad_request(fmt::format(
          "tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i));
  }
  return *t;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
json get_tool_choice(const json& b) {
  const json* c = field(b, "tool_choice");
  if (!c) return nullptr;
  if (c->is_string() && (*c == "none" || *c == "auto" || *c == "required")) return *c;
  if (names_a_function(*c)) return *c;
  throw bad_request(
      "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
      "\"function\": {\"name\": ...}}");
}

// chat_template_kwargs: an object of extra template variables (llama-server's field).
json get_template_kwargs(const json& b) {
  const json* k = field(b, "chat_template_kwargs");
  if (!k) return nullptr;
  if (!k->is_object()) {
    std::string v = k->dump(-1, ' ', false, json::error_handler_t::replace);
    if (v.size() > 80) v = v.substr(0, 77) + "...";  // the message stays one short line
    throw bad_request(
        fmt::format("'chat_template_kwargs' must be an object, got {} {}", type_name(*k), v));
  }
  return *k;
}

std::optional<ReasoningFormat> get_reasoning_format(const json& b) {
  const json* f = field(b, "reasoning_format");
  if (!f) return std::nullopt;
  if (!f->is_string()) wrong_type("reasoning_format", "a string", *f);
  const auto r = parse_reasoning_format(f->get<std::string>());
  if (!r)
    throw bad_request(fmt::format(
        "'reasoning_format' must be \"none\", \"deepseek\", \"deepseek-legacy\" or \"auto\", "
        "got {}",
        f->dump()));
  return r;
}

}  // namespace

GenRequest parse_chat(const json& b, const GenParams& defaults) {
  GenRequest r;
  r.endpoint = Endpoint::ChatCompletions;
  r.gen = defaults;
  r.model = model_name(b);
  const json* ms = field(b, "messages");
  if (!ms) throw bad_request("'messages' is required");
  if (!ms->is_array()) wrong_type("messages", "a list", *ms);
  if (ms->empty()) throw bad_request("'messages' must not be empty");
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    if (!m.is_object()) wrong_type("messages[]", "an object", m);
    const json* role = field(m, "role");
    if (!role || !role->is_string())
      throw bad_request(fmt::format("messages[{}].role must be a string", i));
    r.messages.push_back({role->get<std::string>(), message_content(m, i), message_fields(m, i)});
  }
  r.chat_options.tools = get_tools(b);
  r.chat_options.tool_choice = get_tool_choice(b);
  if (const json& c = r.chat_options.tool_choice; c.is_object()) {
    // A named function must be one of the tools: the call grammar is built from its schema.
    const std::string name = c["function"]["name"].get<std::string>();
    const json& tools = r.chat_options.tools;
    const bool known = tools.is_array() && std::any_of(tools.begin(), tools.end(), [&](auto& t) {
                         return t["function"]["name"] == name;
                       });
    if (!known)
      throw bad_request(
          fmt::format("'tool_choice' names function \"{}\", which is not in 'tools'", name));
  }
  r.parallel_tool_calls = get_bool(b, "parallel_tool_calls", true);
  r.chat_options.kwargs = get_template_kwargs(b);
  // reasoning_effort (OpenAI's field): the variable gpt-oss's and Solar Open's templates read;
  // a chat_template_kwargs key of the same name wins.
  if (const json* e = field(b, "reasoning_effort")) {
    if (!e->is_string()) wrong_type("reasoning_effort", "a string", *e);
    if (!r.chat_options.kwargs.is_object()) r.chat_options.kwargs = json::object();
    if (!r.chat_options.kwargs.contains("reasoning_effort"))
      r.chat_options.kwargs["reasoning_effort"] = *e;
  }
  r.reasoning_format = get_reasoning_format(b);
  parse_common(b, r.gen);
  int64_t max_tokens = get_int(b, "max_tokens", -1, -1, 1 << 24);
  max_tokens = get_int(b, "max_completion_tokens", max_tokens, -1, 1 << 24);
  r.gen.n_predict = cap_predict(max_tokens, defaults.n_predict);
  r.gen.logprobs = get_bool(b, "logprobs", false);
  r.gen.top_logprobs = int32_t(get_int(b, "top_logprobs", 0, 0, 20));
  if (r.gen.top_logprobs > 0 && !r.gen.logprobs)
    throw bad_request("'top_logprobs' needs 'logprobs': true");
  return r;
}

GenRequest parse_native(const json& b, const GenParams& defaults) {
  GenRequest r;
  r.endpoint = Endpoint::Native;
  r.gen = defaults;
  const json* p = field(b, "prompt");
  if (!p) throw bad_request("'prompt' is required");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array()) {
    r.prompt_tokens = get_token_list(*p, "prompt");
    r.prompt_is_tokens = true;
  } else {
    wrong_type("prompt", "a string or a list of token ids", *p);
  }
  parse_common(b, r.gen);
  r.gen.n_predict = cap_predict(get_int(b, "n_predict", -1, -1, 1 << 24), defaults.n_predict);
  r.gen.top_logprobs = int32_t(get_int(b, "n_probs", 0, 0, 20));
  r.gen.logprobs = r.gen.top_logprobs > 0;
  r.gen.return_tokens = get_bool(b, "return_tokens", false);
  return r;
}

void check_token_ids(const std::vector<int32_t>& ids, int32_t n_vocab, const char* field_name) {
  for (int32_t id : ids)
    if (id < 0 || id >= n_vocab)
      throw bad_request(fmt::format("'{}' holds token id {} outside the vocabulary [0, {})",
                                    field_name, id, n_vocab));
}

}  // namespace minfer::server
