// minfer serve: an OpenAI-compatible HTTP server (src/server, docs/SERVER.md).
//
// Flags follow llama-server's names. The model is mapped and checked (RAM guard included)
// before the port opens; then the server listens (GET /health answers 503 "Loading model" until
// the engine is ready) while a loader thread builds the engine; SIGINT /
// SIGTERM stop taking work, let in-flight requests end cleanly and exit 0. Every line on
// stderr; stdout carries only "listening on http://HOST:PORT" (tests read the port from it).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "model/pooling.h"
#include "model/session.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"

namespace minfer::app {

namespace {

struct ServeOptions {
  EngineOptions engine;
  server::ServerParams server;
  int32_t n_parallel = 1;
  std::string api_key_file;
  std::string chat_template;
  std::string chat_template_file;
  std::string chat_template_kwargs;  // JSON text of an object
  std::string reasoning_format = "auto";
  std::string pooling;  // --pooling; empty: the file's pooling_type, else none
};

// llama-server flags that do not apply to a CPU engine: accepted, noted, dropped. The value
// of those that take one is dropped too. -ngl / --n-gpu-layers are kept with --device sim.
std::vector<char*> drop_inapplicable_flags(int argc, char** argv) {
  struct Known {
    const char* name;
    bool takes_value;
    const char* why;
  };
  static const Known kKnown[] = {
      {"-ngl", true, "no GPU offload: minfer runs on the CPU"},
      {"--n-gpu-layers", true, "no GPU offload: minfer runs on the CPU"},
      {"--gpu-layers", true, "no GPU offload: minfer runs on the CPU"},
      {"-fa", false, "attention is always fused here"},
      {"--flash-attn", false, "attention is always fused here"},
      {"-cb", false, "batching is always continuous"},
      {"--cont-batching", false, "batching is always continuous"},
      {"--jinja", false, "chat templates are always rendered as Jinja"},
      {"--no-webui", false, "there is no web UI"},
  };
  std::vector<char*> out{argv[0]};
  // With --device the layer count means something: -ngl and its spellings are kept.
  bool device = false;
  for (int i = 1; i < argc; ++i) device = device || std::string_view(argv[i]) == "--device";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const Known* k = nullptr;
    for (const Known& x : kKnown)
      if (a == x.name && !(device && (a == "-ngl" || a == "--n-gpu-layers"))) k = &x;
    if (!k) {
      out.push_back(argv[i]);
      continue;
    }
    fmt::print(stderr, "minfer serve: note: {} ignored ({})\n", a, k->why);
    const bool optional_value = a == "-fa" || a == "--flash-attn";
    if ((k->takes_value && i + 1 < argc) ||
        (optional_value && i + 1 < argc &&
         (std::string_view(argv[i + 1]) == "on" || std::string_view(argv[i + 1]) == "off" ||
          std::string_view(argv[i + 1]) == "auto")))
      ++i;
  }
  return out;
}

void rewrite_serve_flags(std::vector<char*>& args) {
  static char np[] = "--parallel";
  for (char*& a : args)
    if (std::string_view(a) == "-np") a = np;
}

void add_server_options(CLI::App& app, ServeOptions& o) {
  server::ServerParams& s = o.server;
  app.add_option("--host", s.host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", s.port, "port (default 8080; 0: any free port, printed)");
  app.add_option("--parallel,--kv-slots", o.n_parallel,
                 "slots: requests decoded together (also -np)");
  app.add_option("-n,--n-predict", s.sched.n_predict,
                 "cap on generated tokens per request (-1: none)");
  add_seed_option(app, s.sched.seed,
                  "default seed of requests that give none (default -1: random)");
  app.add_option("--api-key", s.api_key, "require this key (Authorization: Bearer KEY)");
  app.add_option("--api-key-file", o.api_key_file, "read the key from this file (first line)");
  app.add_option("-a,--alias", s.alias, "model id shown to clients (default: the file name)");
  app.add_flag("--metrics", s.metrics, "enable GET /metrics (Prometheus text)");
  app.add_flag("--slots,!--no-slots", s.slots, "enable / disable GET /slots (default on)");
  app.add_option("--chat-template", o.chat_template,
                 "chatml, llama2 or llama3 (default: the GGUF's)");
  app.add_option("--chat-template-file", o.chat_template_file, "a Jinja chat template file");
  app.add_option("--chat-template-kwargs", o.chat_template_kwargs,
                 "extra template variables, a JSON object (e.g. '{\"enable_thinking\": false}')");
  app.add_option("--reasoning-format", o.reasoning_format,
                 "thinking in chat answers: auto (default), deepseek (reasoning_content), "
                 "deepseek-legacy (both), none");
  app.add_flag("--context-shift", s.sched.context_shift,
               "drop old tokens when a slot's context is full");
  app.add_option("--timeout", s.timeout_s, "HTTP read/write timeout in seconds (default 600)");
  app.add_option("--threads-http", s.threads_http,
                 "HTTP worker threads (default: slots + queue, >= 16)");
  app.add_option("--queue-size", s.sched.max_queue,
                 "requests waiting beyond the slots (default 64)");
  app.add_flag("--embeddings,--embedding", s.embeddings,
               "serve /v1/embeddings, /embeddings and /embedding (docs/SERVER.md)");
  app.add_option("--pooling", o.pooling,
                 "embeddings: none | mean | cls | last (default: the file's, else none)");
}

// A template the user named must work before the port opens, as llama-server checks its
// --chat-template at start-up: an unknown name or a file that does not parse used to start a
// server whose every chat request was a 400. (The GGUF's own template is checked by the
// server, which also serves completions without one.)
void check_chat_template(const ServeOptions& o) {
  if (!o.chat_template_file.empty()) {
    // server::ChatFormatter reads text without Jinja tags as a built-in name.
    if (o.chat_template.find("{%") == std::string::npos &&
        o.chat_template.find("{{") == std::string::npos)
      fail(ErrorKind::InvalidArgument,
           "--chat-template-file '{}' holds no Jinja tags ({{{{ }}}} or {{% %}}): not a chat "
           "template",
           o.chat_template_file);
    try {
      tok::ChatTemplate::from_text(o.chat_template, o.chat_template_file);
    } catch (const std::exception& e) {
      fail(ErrorKind::InvalidArgument, "--chat-template-file '{}': {}", o.chat_template_file,
           e.what());
    }
  } else if (!o.chat_template.empty()) {
    tok::ChatTemplate::builtin_text(o.chat_template);  // throws naming the known names
  }
}

std::optional<int> parse_serve_options(int argc, char** argv, ServeOptions& o) {
  std::vector<char*> args = drop_inapplicable_flags(argc, argv);
  rewrite_serve_flags(args);
  CLI::App app("minfer serve: OpenAI-compatible HTTP server", "minfer serve");
  add_engine_options(app, o.engine);
  add_server_options(app, o);
  if (auto st = parse_command_line(app, int(args.size()), args.data())) return st;
  if (o.n_parallel < 1) fail(ErrorKind::InvalidArgument, "-np {} must be >= 1", o.n_parallel);
  if (!o.api_key_file.empty()) {
    std::string k = read_text_file(o.api_key_file, "--api-key-file");
    k = k.substr(0, k.find_first_of("\r\n"));
    if (k.empty()) fail(ErrorKind::InvalidArgument, "--api-key-file '{}' is empty", o.api_key_file);
    o.server.api_key = k;
  }
  if (!o.chat_template.empty() && !o.chat_template_file.empty())
    fail(ErrorKind::InvalidArgument, "--chat-template and --chat-template-file exclude each other");
  if (!o.chat_template_file.empty())
    o.chat_template = read_text_file(o.chat_template_file, "--chat-template-file");
  check_chat_template(o);
  if (!o.chat_template_kwargs.empty())
    o.server.chat_template_kwargs = parse_template_kwargs(o.chat_template_kwargs);
  const auto rf = server::parse_reasoning_format(o.reasoning_format);
  if (!rf)
    fail(ErrorKind::InvalidArgument,
         "--reasoning-format '{}': expected none, deepseek, deepseek-legacy or auto",
         o.reasoning_format);
  o.server.reasoning_format = *rf;
  if (!o.pooling.empty()) parse_pooling(o.pooling, "--pooling");  // before the model loads
  o.engine.n_seq_max = o.n_parallel;
  o.server.sched.n_batch = o.engine.n_batch;
  o.server.sched.n_ubatch = o.engine.n_ubatch;
  o.server.model_path = o.engine.model;
  if (o.server.threads_http == 0) o.server.threads_http = std::max(16, 2 * o.n_parallel + 8);
  o.server.validate();
  return std::nullopt;
}

// What the loader thread builds; lives until the process ends.
struct Loaded {
  LoadedEngine le;
};

// Builds the engine open_engine sized (stderr shows progress) and hands it to the server.
void build_and_serve(const ServeOptions& o, server::HttpServer& srv, Loaded& out) {
  build_engine(out.le);
  auto* seq = dynamic_cast<SeqEngine*>(out.le.engine.get());
  MINFER_ASSERT(seq, "--exec graph builds a SeqEngine");
  const KvReport kv = seq->kv_report();
  fmt::print(stderr, "minfer serve: {} slots | KV pool {} tokens ({} blocks of {}) | {} per slot\n",
             seq->n_seq_max(), seq->kv_capacity(), kv.blocks_total, kv.block_size,
             seq->n_ctx_seq());
  server::ServedModel m;
  m.engine = seq;
  m.tokenizer = out.le.tokenizer.get();
  m.path = o.engine.model;
  m.id = o.server.alias.empty() ? std::filesystem::path(o.engine.model).filename().string()
                                : o.server.alias;
  m.n_ctx_train = out.le.model->hparams().n_ctx_train;
  m.n_params = int64_t(out.le.model->weights().n_params());
  m.size_bytes = out.le.model->weights().total_bytes();
  m.chat_template = o.chat_template;
  const Pooling asked =
      o.pooling.empty() ? Pooling::Unspecified : parse_pooling(o.pooling, "--pooling");
  m.pooling = resolve_pooling(asked, out.le.model->file());
  m.n_embd = out.le.model->hparams().n_embd;
  if (o.server.embeddings)
    fmt::print(stderr, "minfer serve: embeddings on, pooling {}\n", pooling_name(m.pooling));
  srv.set_model(m);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  ServeOptions o;
  if (auto st = parse_serve_options(argc, argv, o)) return *st;
  if (o.engine.exec != "graph")
    fail(ErrorKind::InvalidArgument, "--exec {} cannot serve: use --exec graph", o.engine.exec);
  // Everything that can refuse the model runs before the port opens: the file, the flags
  // against it and the RAM guard (weights + the KV pool at full use + the compute arena,
  // engine_cli.h check_ram_guard; --kv-overcommit goes ahead). A refusal is main's error line
  // and exit status 1, with no port ever bound.
  fmt::print(stderr, "minfer serve: loading {}\n", o.engine.model);
  Loaded loaded;
  loaded.le = open_engine(o.engine, true);

  // Every thread started from here on inherits the blocked signals; main waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a kill

  server::HttpServer srv(o.server);
  const int port = srv.bind();
  srv.start();
  fmt::print(stdout, "minfer serve: listening on http://{}:{}\n", o.server.host, port);
  std::fflush(stdout);
  fmt::print(stderr, "minfer serve: listening on http://{}:{}; building the engine\n",
             o.server.host, port);

  std::atomic<int> status{0};
  std::thread loader([&] {
    try {
      build_and_serve(o, srv, loaded);
      fmt::print(stderr, "minfer serve: model ready\n");
    } catch (const std::exception& e) {
      fmt::print(stderr, "minfer serve: error: {}\n", e.what());
      status = 1;
      ::kill(::getpid(), SIGTERM);  // wake the signal wait below
    }
  });
  int sig = 0;
  sigwait(&sigs, &sig);
  if (status == 0)
    fmt::print(stderr, "minfer serve: {}: finishing in-flight requests\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  loader.join();
  srv.shutdown();
  fmt::print(stderr, "minfer serve: stopped\n");
  return status;
}

}  // namespace minfer::app
