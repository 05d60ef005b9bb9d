// The generation routes: /v1/completions, /v1/chat/completions, /completion. Parse and
// validate, tokenize, submit to the Scheduler, then either wait for the final event or stream
// the events as Server-Sent Events; a client that goes away cancels its task.
#include <chrono>

#include <fmt/format.h>

#include "server/conn_watch.h"
#include "server/constrain.h"
#include "server/http_impl.h"
#include "server/responses.h"

namespace minfer::server {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);

struct StreamState {
  std::shared_ptr<Task> task;
  ResponseBuilder builder;
  int fd = -1;
  std::vector<TaskEvent> first;  // read before the headers went out, not yet sent
};

// The tool-call syntax to read from the answer: the template's, when a chat request gives
// tools and does not say tool_choice "none".
ToolCallFormat tool_format_of(const GenRequest& r, const ChatFormatter& chat) {
  const auto& tools = r.chat_options.tools;
  if (r.endpoint != Endpoint::ChatCompletions || !tools.is_array() || tools.empty())
    return ToolCallFormat::None;
  if (r.chat_options.tool_choice == "none") return ToolCallFormat::None;
  return chat.tool_call_format();
}

// The thinking markers to split a chat answer with (none: the text stays content).
ReasoningSyntax reasoning_of(const GenRequest& r, const ChatFormatter& chat, ReasoningFormat def) {
  if (r.endpoint != Endpoint::ChatCompletions) return detect_reasoning_syntax("");
  return choose_reasoning_syntax(r.reasoning_format.value_or(def), chat.reasoning_syntax());
}

// How a harmony template's answer is read (none when the template is another's): the
// reasoning_format decides where the analysis channel goes.
std::optional<HarmonyReasoning> harmony_of(const GenRequest& r, const ChatFormatter& chat,
                                           ReasoningFormat def) {
  if (r.endpoint != Endpoint::ChatCompletions || chat.reasoning_syntax().name != "harmony")
    return std::nullopt;
  switch (r.reasoning_format.value_or(def)) {
    case ReasoningFormat::None:
      return HarmonyReasoning::Inline;
    case ReasoningFormat::DeepSeekLegacy:
      return HarmonyReasoning::Both;
    default:
      return HarmonyReasoning::Split;
  }
}

// The control tokens of the markers in this vocabulary (Mistral's [TOOL_CALLS] and [THINK],
// Llama's <|python_tag|>, the <|channel> of Gemma 4's "<|channel>thought", gpt-oss's
// harmony): generation drops their text, which the parsers must see.
std::vector<int32_t> control_markers(const tok::Tokenizer& tk, ToolCallFormat f,
                                     const ReasoningSyntax& think, bool harmony) {
  std::vector<std::string_view> markers = tool_call_markers(f);
  const std::vector<std::string_view> more = harmony ? harmony_markers() : reasoning_markers(think);
  markers.insert(markers.end(), more.begin(), more.end());
  std::vector<int32_t> ids;
  for (std::string_view m : markers) {
    for (int32_t id : tk.tokenize(m, {.add_special = false, .parse_special = true}))
      if (tk.token_to_piece(id).empty() && !tk.token_to_piece(id, true).empty()) ids.push_back(id);
  }
  return ids;
}

}  // namespace

void HttpServer::Impl::handle_generate(const httplib::Request& req, httplib::Response& res,
                                       Endpoint ep) {
  GenRequest r;
  std::shared_ptr<Task> task;
  ToolCallFormat tool_format = ToolCallFormat::None;
  ReasoningSyntax think;
  bool think_open = false;
  std::optional<HarmonyReasoning> harmony;
  try {
    const json body = parse_body(req.body);
    r = ep == Endpoint::Completions       ? parse_completions(body, defaults)
        : ep == Endpoint::ChatCompletions ? parse_chat(body, defaults)
                                          : parse_native(body, defaults);
    apply_chat_defaults(r);
    tool_format = tool_format_of(r, *chat);
    constrain_tool_choice(r, tool_format);
    think = reasoning_of(r, *chat, p.reasoning_format);
    harmony = harmony_of(r, *chat, p.reasoning_format);
    if (harmony) think = detect_reasoning_syntax("");  // the harmony parser reads it all
    r.gen.keep_special = control_markers(*model.tokenizer, tool_format, think, harmony.has_value());
    const std::vector<int32_t> tokens = prompt_tokens(r);
    // A prompt that opened the thinking leaves the answer inside it, unless a grammar
    // constrains the answer from its first token (the request's own GBNF, or thinking turned
    // off): no thinking then. A tool or schema grammar waits for the thinking to end.
    const bool opens = prompt_opens_reasoning(think, r.prompt_text);
    const bool gated = gate_grammar_on_thinking(r, think, opens);
    think_open = opens && (!r.gen.grammar || gated);
    task = sched->submit(tokens, r.gen);
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  ResponseContext ctx;
  ctx.endpoint = ep;
  const uint64_t n = next_id.fetch_add(1);
  ctx.id = fmt::format("{}-{}", ep == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl", n);
  ctx.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  ctx.model = model.id;
  ctx.gen = r.gen;
  ctx.tk = model.tokenizer;
  ctx.tool_format = tool_format;
  if (tool_format != ToolCallFormat::None) ctx.tool_types = ParamTypes(r.chat_options.tools);
  ctx.parallel_tool_calls = r.parallel_tool_calls;
  ctx.reasoning = think;
  ctx.reasoning_open = think_open;
  ctx.reasoning_keep_text =
      r.reasoning_format.value_or(p.reasoning_format) == ReasoningFormat::DeepSeekLegacy;
  ctx.harmony = harmony;
  const int fd = find_connection_socket(req.local_port, req.remote_port);
  in_flight++;

  if (!r.gen.stream) {
    ResponseBuilder b(std::move(ctx));
    std::vector<TaskEvent> evs;
    while (!b.done()) {
      evs.clear();
      task->wait(evs, kPoll);
      if (peer_closed(fd)) {  // nobody to answer: free the slot (one recv() per wake-up)
        task->cancel();
        in_flight--;
        return;
      }
      for (const TaskEvent& ev : evs) b.add(ev);
    }
    if (b.error())
      send_error(res, *b.error());
    else
      send_json(res, b.body());
    in_flight--;
    return;
  }

  // The status line waits for the first event (the first token, after prefill): a request that
  // fails before producing anything (dropped from the queue by a shutdown, out of KV blocks in
  // prefill) answers with its HTTP status, 503, and no body begun, so a proxy in front may
  // retry it on another replica (deploy/nginx/minfer.conf: proxy_next_upstream http_503). Once
  // a 200 and a chunk are out, nobody can. Time to first token is unchanged: the first chunk
  // went out with the first token before too.
  std::vector<TaskEvent> first;
  while (first.empty()) {
    task->wait(first, kPoll);
    if (peer_closed(fd)) {
      task->cancel();
      in_flight--;
      return;
    }
  }
  if (first.front().final && first.front().error) {
    send_error(res, *first.front().error);
    in_flight--;
    return;
  }
  auto st = std::make_shared<StreamState>(
      StreamState{task, ResponseBuilder(std::move(ctx)), fd, std::move(first)});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        std::vector<TaskEvent> evs;
        evs.swap(st->first);  // the events that came before the status line, once
        const bool got = !evs.empty() || st->task->wait(evs, kPoll);
        if (peer_closed(st->fd)) {  // also while the text is held back and nothing is written
          st->task->cancel();
          return false;
        }
        if (!got) return true;
        const std::string out = st->builder.sse(evs);
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          st->task->cancel();
          return false;
        }
        if (st->builder.done()) sink.done();
        return true;
      },
      [st, this](bool) {
        if (!st->builder.done()) st->task->cancel();
        in_flight--;
      });
}

}  // namespace minfer::server
