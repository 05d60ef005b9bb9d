#include "server/responses.h"

#include "server/text_stream.h"

namespace minfer::server {

namespace {

json timings_json(const Timings& t) {
  auto per_tok = [](double ms, int64_t n) { return n > 0 ? ms / double(n) : 0.0; };
  auto per_s = [](double ms, int64_t n) { return ms > 0 ? 1e3 * double(n) / ms : 0.0; };
  return {{"prompt_n", t.prompt_n},
          {"prompt_ms", t.prompt_ms},
          {"prompt_per_token_ms", per_tok(t.prompt_ms, t.prompt_n)},
          {"prompt_per_second", per_s(t.prompt_ms, t.prompt_n)},
          {"predicted_n", t.predicted_n},
          {"predicted_ms", t.predicted_ms},
          {"predicted_per_token_ms", per_tok(t.predicted_ms, t.predicted_n)},
          {"predicted_per_second", per_s(t.predicted_ms, t.predicted_n)}};
}

// Token texts in JSON must be valid UTF-8: a byte-fallback piece is shown as U+FFFD.
std::string piece_text(const tok::Tokenizer& tk, int32_t id) {
  std::string s(tk.token_to_piece(id));
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80             ? 1
               : (c & 0xE0) == 0xC0 ? 2
               : (c & 0xF0) == 0xE0 ? 3
               : (c & 0xF8) == 0xF0 ? 4
                                    : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// A streamed delta as OpenAI sends it: the call's index, id, type and name (arguments "")
// first, then its arguments in pieces.
json delta_json(const ToolCallDelta& d) {
  switch (d.kind) {
    case ToolCallDelta::Kind::Begin:
      return {{"tool_calls", json::array({{{"index", d.index},
                                           {"id", d.id},
                                           {"type", "function"},
                                           {"function", {{"name", d.text}, {"arguments", ""}}}}})}};
    case ToolCallDelta::Kind::Arguments:
      return {{"tool_calls",
               json::array({{{"index", d.index}, {"function", {{"arguments", d.text}}}}})}};
    case ToolCallDelta::Kind::Content:
      break;
  }
  return {{"content", d.text}};
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

// As llama-server: a model that stopped by itself after calls stopped to call them.
std::string finish_reason(const std::string& model_reason, bool has_calls) {
  return has_calls && model_reason == "stop" ? "tool_calls" : model_reason;
}

}  // namespace

ResponseBuilder::ResponseBuilder(ResponseContext ctx) : ctx_(std::move(ctx)) {
  // A whole answer is parsed once in body(); a stream as it comes.
  const bool chat_stream = ctx_.endpoint == Endpoint::ChatCompletions && ctx_.gen.stream;
  if (chat_stream && ctx_.harmony) {
    harmony_.emplace(*ctx_.harmony, ctx_.tool_format == ToolCallFormat::Harmony,
                     ctx_.parallel_tool_calls);
    return;
  }
  if (chat_stream && ctx_.tool_format != ToolCallFormat::None)
    tools_.emplace(ctx_.tool_format, ctx_.parallel_tool_calls, ctx_.tool_types);
  if (chat_stream && !ctx_.reasoning.empty())
    think_.emplace(ctx_.reasoning, ctx_.reasoning_open, ctx_.reasoning_keep_text);
}

// A streamed harmony text: its deltas in the order the messages came.
std::vector<json> ResponseBuilder::harmony_deltas(const std::string& text, bool at_end) {
  std::vector<HarmonyDelta> ds = harmony_->push(text);
  if (at_end)
    for (HarmonyDelta& d : harmony_->finish()) ds.push_back(std::move(d));
  std::vector<json> out;
  for (HarmonyDelta& d : ds) {
    switch (d.kind) {
      case HarmonyDelta::Kind::Reasoning:
        out.push_back({{"reasoning_content", std::move(d.text)}});
        break;
      case HarmonyDelta::Kind::Content:
        out.push_back({{"content", std::move(d.text)}});
        break;
      case HarmonyDelta::Kind::Begin:
        out.push_back(delta_json({ToolCallDelta::Kind::Begin, d.index, d.text, d.id}));
        break;
      case HarmonyDelta::Kind::Arguments:
        out.push_back(delta_json({ToolCallDelta::Kind::Arguments, d.index, d.text, {}}));
        break;
    }
  }
  return out;
}

// A streamed chat text through the thinking splitter, then the tool-call parser: the deltas
// to send, reasoning first.
std::vector<json> ResponseBuilder::text_deltas(const std::string& text, bool at_end) {
  if (harmony_) return harmony_deltas(text, at_end);
  std::vector<json> out;
  std::string content = text;
  if (think_) {
    ReasoningPiece p = think_->push(text);
    if (at_end) {
      ReasoningPiece rest = think_->finish();
      p.reasoning += rest.reasoning;
      p.content += rest.content;
    }
    if (!p.reasoning.empty()) out.push_back({{"reasoning_content", p.reasoning}});
    content = std::move(p.content);
  }
  if (tools_) {
    std::vector<ToolCallDelta> deltas = tools_->push(content);
    if (at_end)
      for (ToolCallDelta& d : tools_->finish()) deltas.push_back(std::move(d));
    for (const ToolCallDelta& d : deltas) out.push_back(delta_json(d));
  } else if (!content.empty()) {
    out.push_back({{"content", content}});
  }
  return out;
}

// One chunk per delta; the event's logprobs go with the last (or alone, when nothing is sent).
std::string ResponseBuilder::delta_chunks(const std::vector<json>& deltas,
                                          const std::vector<TokenLogprob>& lps) const {
  std::string out;
  for (size_t i = 0; i < deltas.size(); ++i) {
    json c = chunk("", i + 1 == deltas.size() ? lps : std::vector<TokenLogprob>{}, {}, nullptr);
    c["choices"][0]["delta"] = deltas[i];
    out += sse_data(dump(c));
  }
  if (deltas.empty() && !lps.empty()) out += sse_data(dump(chunk("", lps, {}, nullptr)));
  return out;
}

json ResponseBuilder::usage_json(const Usage& u) const {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json ResponseBuilder::logprobs_json(const std::vector<TokenLogprob>& lps, size_t offset) const {
  const tok::Tokenizer& tk = *ctx_.tk;
  if (ctx_.endpoint == Endpoint::ChatCompletions) {
    json content = json::array();
    for (const TokenLogprob& lp : lps) {
      const std::string t = piece_text(tk, lp.id);
      json top = json::array();
      for (const auto& [id, l] : lp.top) {
        const std::string tt = piece_text(tk, id);
        top.push_back({{"token", tt},
                       {"logprob", l},
                       {"bytes", bytes_of(std::string(tk.token_to_piece(id)))}});
      }
      content.push_back({{"token", t},
                         {"logprob", lp.logprob},
                         {"bytes", bytes_of(std::string(tk.token_to_piece(lp.id)))},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  if (ctx_.endpoint == Endpoint::Native) {
    json probs = json::array();
    for (const TokenLogprob& lp : lps) {
      json top = json::array();
      for (const auto& [id, l] : lp.top)
        top.push_back({{"id", id}, {"token", piece_text(tk, id)}, {"logprob", l}});
      probs.push_back({{"id", lp.id},
                       {"token", piece_text(tk, lp.id)},
                       {"logprob", lp.logprob},
                       {"top_logprobs", top}});
    }
    return probs;
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offs = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = piece_text(tk, lp.id);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, l] : lp.top) top[piece_text(tk, id)] = l;
    tops.push_back(top);
    offs.push_back(offset);
    offset += t.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offs}};
}

json ResponseBuilder::native_final(const TaskEvent& f, const std::string& content) const {
  json j = {{"content", content},
            {"id_slot", f.slot_id},
            {"stop", true},
            {"model", ctx_.model},
            {"tokens_predicted", f.usage.completion_tokens},
            {"tokens_evaluated", f.usage.prompt_tokens},
            {"tokens_cached", f.usage.cached_tokens},
            {"truncated", false},
            {"stop_type", f.stop_type},
            {"stopping_word", f.stopping_word},
            {"timings", timings_json(f.timings)}};
  return j;
}

// One streamed chunk; `final` adds the finish reason (OpenAI) or the closing fields (native).
json ResponseBuilder::chunk(const std::string& text, const std::vector<TokenLogprob>& lps,
                            const std::vector<int32_t>& toks, const TaskEvent* final) const {
  const GenParams& g = ctx_.gen;
  if (ctx_.endpoint == Endpoint::Native) {
    json j = final ? native_final(*final, text)
                   : json{{"content", text}, {"stop", false}, {"id_slot", -1}};
    if (g.return_tokens) j["tokens"] = toks;
    if (g.logprobs && !lps.empty()) j["completion_probabilities"] = logprobs_json(lps, 0);
    return j;
  }
  json choice = {{"index", 0},
                 {"finish_reason", final ? json(final->finish_reason) : json(nullptr)}};
  json lp = g.logprobs && !lps.empty() ? logprobs_json(lps, text_.size()) : json(nullptr);
  const bool chat = ctx_.endpoint == Endpoint::ChatCompletions;
  if (chat) {
    choice["delta"] = text.empty() ? json::object() : json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = lp;
  return {{"id", ctx_.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", ctx_.created},
          {"model", ctx_.model},
          {"system_fingerprint", "minfer"},
          {"choices", json::array({choice})}};
}

std::string ResponseBuilder::sse(const std::vector<TaskEvent>& events) {
  std::string out;
  const bool chat = ctx_.endpoint == Endpoint::ChatCompletions;
  if (!started_ && chat) {
    json first = chunk("", {}, {}, nullptr);
    first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
    out += sse_data(dump(first));
  }
  started_ = true;
  for (const TaskEvent& ev : events) {
    if (done_) break;
    if (ev.error) {
      error_ = ev.error;
      done_ = true;
      out += sse_data(ev.error->to_json().dump());
      break;
    }
    if (!ev.final && (tools_ || think_ || harmony_)) {
      out += delta_chunks(text_deltas(ev.text, false), ev.logprobs);
      text_ += ev.text;
      continue;
    }
    if (!ev.final) {
      if (ev.text.empty() && ev.logprobs.empty() && !ctx_.gen.return_tokens) continue;
      out += sse_data(dump(chunk(ev.text, ev.logprobs, ev.tokens, nullptr)));
      text_ += ev.text;
      continue;
    }
    done_ = true;
    if (ctx_.endpoint == Endpoint::Native) {
      out += sse_data(dump(chunk(ev.text, ev.logprobs, ev.tokens, &ev)));
      break;
    }
    json last = chunk("", {}, {}, &ev);
    if (tools_ || think_ || harmony_) {
      out += delta_chunks(text_deltas(ev.text, true), ev.logprobs);
      if (tools_)
        last["choices"][0]["finish_reason"] =
            finish_reason(ev.finish_reason, !tools_->calls().empty() && !tools_->broken());
      if (harmony_)
        last["choices"][0]["finish_reason"] =
            finish_reason(ev.finish_reason, !harmony_->calls().empty() && !harmony_->broken());
    } else if (!ev.text.empty() || !ev.logprobs.empty()) {
      out += sse_data(dump(chunk(ev.text, ev.logprobs, ev.tokens, nullptr)));
    }
    out += sse_data(dump(last));
    if (ctx_.gen.include_usage) {
      json u = chunk("", {}, {}, nullptr);
      u["choices"] = json::array();
      u["usage"] = usage_json(ev.usage);
      out += sse_data(dump(u));
    }
    out += sse_data("[DONE]");
  }
  return out;
}

void ResponseBuilder::add(const TaskEvent& ev) {
  if (done_) return;
  if (ev.error) {
    error_ = ev.error;
    done_ = true;
    return;
  }
  text_ += ev.text;
  tokens_.insert(tokens_.end(), ev.tokens.begin(), ev.tokens.end());
  lps_.insert(lps_.end(), ev.logprobs.begin(), ev.logprobs.end());
  if (ev.final) {
    final_ = ev;
    done_ = true;
  }
}

json ResponseBuilder::body() const {
  const GenParams& g = ctx_.gen;
  if (ctx_.endpoint == Endpoint::Native) {
    json j = native_final(final_, text_);
    if (g.return_tokens) j["tokens"] = tokens_;
    if (g.logprobs) j["completion_probabilities"] = logprobs_json(lps_, 0);
    return j;
  }
  const bool chat = ctx_.endpoint == Endpoint::ChatCompletions;
  json choice = {{"index", 0}, {"finish_reason", final_.finish_reason}};
  if (chat) {
    json message = {{"role", "assistant"}, {"content", text_}};
    std::string content = text_;
    if (ctx_.harmony) {
      ParsedHarmony p = parse_harmony(*ctx_.harmony, ctx_.tool_format == ToolCallFormat::Harmony,
                                      ctx_.parallel_tool_calls, text_);
      const bool calls = !p.calls.empty();
      message["content"] = calls && p.content.empty() ? json(nullptr) : json(p.content);
      if (!p.reasoning.empty()) message["reasoning_content"] = std::move(p.reasoning);
      if (calls) {
        message["tool_calls"] = tool_calls_json(p.calls);
        choice["finish_reason"] = finish_reason(final_.finish_reason, true);
      }
    } else if (!ctx_.reasoning.empty()) {  // the thinking first: calls are read in the rest only
      ReasoningPiece split =
          split_reasoning(ctx_.reasoning, ctx_.reasoning_open, text_, ctx_.reasoning_keep_text);
      message["content"] = split.content;
      if (!split.reasoning.empty()) message["reasoning_content"] = std::move(split.reasoning);
      content = std::move(split.content);
    }
    if (ctx_.tool_format != ToolCallFormat::None && !ctx_.harmony) {
      const ParsedToolCalls p =
          parse_tool_calls(ctx_.tool_format, content, ctx_.parallel_tool_calls, ctx_.tool_types);
      if (!p.calls.empty() && !p.broken) {  // malformed calls: the text as it came
        message["content"] = p.content.empty() ? json(nullptr) : json(p.content);
        message["tool_calls"] = tool_calls_json(p.calls);
        choice["finish_reason"] = finish_reason(final_.finish_reason, true);
      }
    }
    choice["message"] = std::move(message);
  } else {
    choice["text"] = text_;
  }
  choice["logprobs"] = g.logprobs ? logprobs_json(lps_, 0) : json(nullptr);
  return {{"id", ctx_.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", ctx_.created},
          {"model", ctx_.model},
          {"system_fingerprint", "minfer"},
          {"choices", json::array({choice})},
          {"usage", usage_json(final_.usage)}};
}

}  // namespace minfer::server
