// The routes that do not generate: health, models, props, slots, metrics, tokenize,
// detokenize, apply-template. (Generation: generate.cpp.)
#include <chrono>

#include <fmt/format.h>

#include "server/http_impl.h"

namespace minfer::server {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<int32_t> HttpServer::Impl::prompt_tokens(GenRequest& r) const {
  const tok::Tokenizer& tk = *model.tokenizer;
  std::vector<int32_t> biased;
  for (const auto& [id, bias] : r.gen.logit_bias) biased.push_back(id);
  check_token_ids(biased, tk.n_tokens(), "logit_bias");
  if (r.prompt_is_tokens) {
    check_token_ids(r.prompt_tokens, tk.n_tokens(), "prompt");
    return r.prompt_tokens;
  }
  if (r.endpoint == Endpoint::ChatCompletions) {
    r.prompt_text = chat->format(r.messages, r.chat_options);
    // Templates often write bos_token themselves; the tokenizer adds BOS per the vocabulary.
    return tk.tokenize(tok::without_leading_bos(r.prompt_text, tk.vocab()),
                       {.add_special = true, .parse_special = true});
  }
  // As llama-server: BOS per the vocabulary, control-token text recognised.
  return tk.tokenize(r.prompt_text, {.add_special = true, .parse_special = true});
}

void HttpServer::Impl::apply_chat_defaults(GenRequest& r) const {
  if (!p.chat_template_kwargs.is_object()) return;
  json merged = p.chat_template_kwargs;
  if (r.chat_options.kwargs.is_object())  // the request's keys win, one by one
    for (const auto& [k, v] : r.chat_options.kwargs.items()) merged[k] = v;
  r.chat_options.kwargs = std::move(merged);
}

void HttpServer::Impl::install_routes() {
  install_info_routes();
  install_text_routes();
  install_generate_routes();
  install_embedding_routes();
}

void HttpServer::Impl::install_info_routes() {
  auto health = [this](const httplib::Request&, httplib::Response& res) {
    if (!ready.load()) return send_error(res, unavailable("Loading model"));
    // Draining (SIGTERM): a load balancer's health check takes the replica out while its
    // in-flight streams finish.
    if (stopping.load()) return send_error(res, unavailable("the server is shutting down"));
    send_json(res, {{"status", "ok"}});
  };
  svr.Get("/health", health);
  svr.Get("/v1/health", health);

  auto models = [this](const httplib::Request&, httplib::Response& res) {
    const SeqEngine& e = *model.engine;
    json meta = {{"n_vocab", e.n_vocab()},
                 {"n_ctx_train", model.n_ctx_train},
                 {"n_params", model.n_params},
                 {"size", model.size_bytes}};
    send_json(res, {{"object", "list"},
                    {"data", json::array({{{"id", model.id},
                                           {"object", "model"},
                                           {"created", unix_now()},
                                           {"owned_by", "minfer"},
                                           {"meta", meta}}})}});
  };
  svr.Get("/v1/models", models);
  svr.Get("/models", models);

  svr.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    json settings = {{"n_ctx", sched->n_ctx_seq()},
                     {"n_predict", p.sched.n_predict},
                     {"temperature", defaults.sampling.temperature},
                     {"top_k", defaults.sampling.top_k},
                     {"top_p", defaults.sampling.top_p},
                     {"min_p", defaults.sampling.min_p},
                     {"repeat_penalty", defaults.sampling.repeat_penalty},
                     {"repeat_last_n", defaults.sampling.repeat_last_n}};
    send_json(res, {{"default_generation_settings", settings},
                    {"total_slots", sched->n_slots()},
                    {"n_ctx", sched->n_ctx()},
                    {"model_path", model.path},
                    {"model_alias", model.id},
                    {"chat_template", chat->name()},
                    {"tool_call_format", tool_call_format_name(chat->tool_call_format())},
                    {"reasoning_syntax", std::string(chat->reasoning_syntax().name)},
                    {"reasoning_format", reasoning_format_name(p.reasoning_format)},
                    {"build_info", "minfer"}});
  });

  svr.Get("/slots", [this](const httplib::Request&, httplib::Response& res) {
    if (!p.slots)
      return send_error(res, ApiError(501, "not_supported_error",
                                      "this server's slots endpoint is disabled (--no-slots)"));
    const SchedulerSnapshot snap = sched->snapshot();
    json arr = json::array();
    for (const SlotInfo& s : snap.slots)
      arr.push_back({{"id", s.id},
                     {"n_ctx", sched->n_ctx_seq()},
                     {"is_processing", s.busy},
                     {"state", s.state},
                     {"id_task", s.busy ? json(s.task_id) : json(-1)},
                     {"n_cache", s.n_cache},
                     {"n_prompt_tokens", s.n_prompt},
                     {"n_decoded", s.n_generated}});
    send_json(res, arr);
  });

  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (!p.metrics)
      return send_error(res, ApiError(501, "not_supported_error",
                                      "this server's metrics endpoint is disabled (--metrics)"));
    const SchedulerSnapshot snap = sched->snapshot();
    Metrics::Gauges g;
    g.queue_length = snap.queue_length;
    g.slots_total = int64_t(snap.slots.size());
    for (const SlotInfo& s : snap.slots) g.slots_busy += s.busy ? 1 : 0;
    g.kv = snap.kv;
    res.set_content(metrics.render(g), "text/plain; version=0.0.4");
  });
}

void HttpServer::Impl::install_text_routes() {
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const json b = parse_body(req.body);
    if (!b.contains("content") || !b["content"].is_string())
      throw bad_request("'content' must be a string");
    const bool add_special = b.value("add_special", false);
    const bool with_pieces = b.value("with_pieces", false);
    const tok::Tokenizer& tk = *model.tokenizer;
    const auto ids = tk.tokenize(b["content"].get<std::string>(),
                                 {.add_special = add_special, .parse_special = true});
    json toks = json::array();
    for (int32_t id : ids) {
      if (with_pieces)
        toks.push_back({{"id", id}, {"piece", std::string(tk.token_to_piece(id))}});
      else
        toks.push_back(id);
    }
    send_json(res, {{"tokens", toks}});
  });

  svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const json b = parse_body(req.body);
    if (!b.contains("tokens") || !b["tokens"].is_array())
      throw bad_request("'tokens' must be a list of token ids");
    std::vector<int32_t> ids;
    for (const json& t : b["tokens"]) {
      if (!t.is_number_integer()) throw bad_request("'tokens' must be a list of token ids");
      const int64_t v = t.get<int64_t>();
      if (v < 0 || v >= model.tokenizer->n_tokens())
        throw bad_request(fmt::format("'tokens' holds token id {} outside the vocabulary", v));
      ids.push_back(int32_t(v));
    }
    send_json(res, {{"content", model.tokenizer->detokenize(ids)}});
  });

  svr.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    GenRequest r = parse_chat(parse_body(req.body), defaults);
    apply_chat_defaults(r);
    send_json(res, {{"prompt", chat->format(r.messages, r.chat_options)}});
  });
}

void HttpServer::Impl::install_generate_routes() {
  svr.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& s) {
    handle_generate(q, s, Endpoint::Completions);
  });
  svr.Post("/completions", [this](const httplib::Request& q, httplib::Response& s) {
    handle_generate(q, s, Endpoint::Completions);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& s) {
    handle_generate(q, s, Endpoint::ChatCompletions);
  });
  svr.Post("/chat/completions", [this](const httplib::Request& q, httplib::Response& s) {
    handle_generate(q, s, Endpoint::ChatCompletions);
  });
  svr.Post("/completion", [this](const httplib::Request& q, httplib::Response& s) {
    handle_generate(q, s, Endpoint::Native);
  });
}

}  // namespace minfer::server
