// minfer chat: an interactive conversation on stdin with the model's chat template, llama-cli's
// conversation mode. The template is the GGUF's tokenizer.chat_template, rendered by minfer's
// Jinja interpreter (src/template); --chat-template-file F overrides it and --chat-template NAME
// picks a built-in text (chatml, llama2, llama3) for a model that has none;
// --chat-template-kwargs JSON gives it extra variables (e.g. Qwen3's enable_thinking).
//
// Input: one message per line (a trailing '\' continues it on the next line), from a terminal
// or piped stdin alike. /exit, /clear (new conversation) and /help are commands; Ctrl-D (end of
// input) exits. Ctrl-C stops the reply being written; a second Ctrl-C, or one at the prompt,
// exits (status 130).
//
// The KV cache is kept across turns: the conversation is re-rendered with the template and only
// the tokens beyond what the model has already seen are prefilled (the template guarantees the
// previous render is a prefix; if a tokenization boundary moves, the common token prefix is kept
// and the rest re-evaluated). The chat never ends because the context is full: before a turn,
// the oldest turns are dropped until the conversation and room for a reply fit (the system
// prompt is always kept); a reply that fills the context shifts it (the system prompt's tokens
// stay, the older half of the rest goes). Both say so on stderr. Replies stream to stdout and
// stop on the vocabulary's end-of-generation tokens, -n tokens or a reverse prompt (-r).
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "grammar_cli.h"
#include "sample/sampler.h"
#include "tokenizer/chat_template.h"

namespace minfer::app {

namespace {

// Ctrl-C: the first one during a reply sets g_stop (the reply ends at the next token); one at
// the prompt, or a second one, exits at once. Only async-signal-safe calls in the handler.
volatile std::sig_atomic_t g_in_reply = 0;
volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_sigint(int) {
  if (g_in_reply && !g_stop) {
    g_stop = 1;
    return;
  }
  const char nl = '\n';
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, &nl, 1);
  ::_exit(130);
}

void install_sigint_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

struct ChatOptions {
  EngineOptions engine;
  SamplerParams sampling;
  TextOptions text;
  std::string template_name;  // empty: the vocabulary's template
  std::string template_file;  // a Jinja file, overrides both
  std::string template_text;  // template_file's text, read (and parsed once) with the flags
  std::string template_kwargs;           // --chat-template-kwargs: JSON text of an object
  nlohmann::ordered_json template_vars;  // ... parsed: extra variables of every render
  std::string system;         // empty: no system message
  std::string first_message;  // -p / -f: sent before reading stdin
  int64_t n_predict = -1;     // most tokens per reply; -1: until end of generation
  bool ignore_eos = false;    // replies end only at -n, -r or Ctrl-C
  GrammarFlags grammar;       // every reply matches it (--grammar, --json-schema, ...)
};

std::optional<int> parse_chat_options(int argc, char** argv, ChatOptions& o) {
  CLI::App app("minfer chat: interactive chat using the model's chat template", "minfer chat");
  app.set_help_flag("-h,--help", "print this help and exit");
  add_engine_options(app, o.engine);
  add_text_options(app, o.text, /*with_keep=*/true);
  auto* name = app.add_option("--chat-template", o.template_name,
                              "built-in template for a model without one: chatml, llama2, llama3");
  app.add_option("--chat-template-file", o.template_file,
                 "Jinja chat template file (overrides the model's)")
      ->excludes(name);
  app.add_option("--chat-template-kwargs", o.template_kwargs,
                 "extra template variables, a JSON object (e.g. '{\"enable_thinking\": false}')");
  app.add_option("--system,--system-prompt", o.system, "system message (also -sys)");
  std::string prompt_file;
  auto* p = app.add_option("-p,--prompt", o.first_message, "first message, sent before stdin");
  auto* f = app.add_option("-f,--file", prompt_file, "first message from a file");
  p->excludes(f);
  bool cnv = false;
  app.add_flag("--conversation,-i,--interactive", cnv,
               "conversation mode (what chat always is; also -cnv). -no-cnv: minfer run");
  add_n_predict_option(app, o.n_predict, "most tokens per reply (default -1: until EOG)");
  app.add_flag("--ignore-eos", o.ignore_eos,
               "keep replying past end-of-generation tokens (until -n, -r or Ctrl-C)");
  add_sampling_options(app, o.sampling);
  add_grammar_options(app, o.grammar);
  if (auto status = parse_command_line(app, argc, argv)) return status;
  if (f->count() > 0) o.first_message = read_prompt_file(prompt_file);
  // A bad template is said before the model loads (llama.cpp checks --chat-template with its
  // flags): a typo must not cost a multi-GB load first.
  if (!o.template_file.empty()) {
    o.template_text = read_text_file(o.template_file, "chat template file");
    tok::ChatTemplate::from_text(o.template_text, o.template_file);  // syntax errors throw
  } else if (!o.template_name.empty()) {
    tok::ChatTemplate::builtin_text(o.template_name);  // throws naming the known names
  }
  if (!o.template_kwargs.empty()) o.template_vars = parse_template_kwargs(o.template_kwargs);
  // One sequence; each turn reuses the cache's common prefix through Engine::eval, so the
  // prefix cache could never hit; its keys would only make a context shift copy blocks.
  o.engine.prefix_cache = false;
  if (o.text.escape) {
    o.system = process_escapes(o.system);
    if (p->count() > 0) o.first_message = process_escapes(o.first_message);
    for (std::string& r : o.text.reverse_prompts) r = process_escapes(r);
  }
  if (o.text.n_keep != 0)
    fmt::print(stderr,
               "minfer: note: --keep {}: chat always keeps the system prompt and whole recent "
               "turns when the context shifts\n",
               o.text.n_keep);
  resolve_sampling_options(o.sampling);
  resolve_grammar_options(o.grammar);
  return std::nullopt;
}

tok::ChatTemplate load_chat_template(const ChatOptions& o, const tok::Vocab& vocab) {
  if (o.template_file.empty()) return tok::ChatTemplate::for_vocab(vocab, o.template_name);
  tok::ChatTemplate t = tok::ChatTemplate::from_text(o.template_text, o.template_file);
  t.use_special_tokens_of(vocab);
  return t;
}

// One conversation: the engine's KV cache holds `seen_`, the tokens evaluated so far.
class Conversation {
 public:
  Conversation(const ChatOptions& o, Engine& eng, const tok::Tokenizer& tk)
      : o_(o),
        eng_(eng),
        tk_(tk),
        tmpl_(load_chat_template(o, tk.vocab())),
        sampler_(o.sampling, static_cast<int32_t>(eng.n_vocab())),
        grammar_(make_grammar_filter(o.grammar, tk, eng.n_vocab())) {
    clear();
  }
  const tok::ChatTemplate& chat_template() const { return tmpl_; }

  // /clear: a new conversation (the system prompt stays; its cached tokens are reused).
  void clear() {
    messages_.clear();
    if (!o_.system.empty()) messages_.push_back({"system", o_.system});
  }

  // Adds the user's message, prefills what the cache lacks, streams the reply to stdout.
  void turn(const std::string& line) {
    messages_.push_back({"user", line});
    g_stop = 0;
    g_in_reply = 1;
    const std::span<const float> logits = prefill_conversation();
    if (logits.empty()) {  // did not fit, or Ctrl-C during the prefill: nothing was said
      messages_.pop_back();
      g_in_reply = 0;
      return;
    }
    const std::string reply = generate_reply(logits);
    g_in_reply = 0;
    // The end-of-turn token the template expects is part of the next render; the cache holds
    // the reply's tokens, so the next turn prefills only from the first differing token.
    messages_.push_back({"assistant", reply});
  }

 private:
  std::vector<int32_t> tokenize_render(std::span<const tok::ChatMessage> msgs, bool gen) const {
    tok::ChatRenderOptions opt;
    opt.add_generation_prompt = gen;
    opt.kwargs = o_.template_vars;
    const std::string prompt = tmpl_.render(msgs, opt);
    // The template may write bos_token itself; the tokenizer adds BOS as the vocabulary says.
    return tk_.tokenize(tok::without_leading_bos(prompt, tk_.vocab()),
                        {.add_special = true, .parse_special = true});
  }

  size_t first_turn() const { return !messages_.empty() && messages_[0].role == "system" ? 1 : 0; }

  // Drops the oldest turn (a user message and the replies up to the next user message); false
  // when only the last user message is left.
  bool drop_oldest_turn() {
    const size_t b = first_turn();
    size_t e = b + 1;
    while (e < messages_.size() && messages_[e].role != "user") ++e;
    if (e >= messages_.size()) return false;
    messages_.erase(messages_.begin() + static_cast<ptrdiff_t>(b),
                    messages_.begin() + static_cast<ptrdiff_t>(e));
    return true;
  }

  // Room a reply should find after the conversation before a turn starts.
  int64_t reply_room() const {
    const int64_t quarter = std::max<int64_t>(1, eng_.n_ctx() / 4);
    return o_.n_predict > 0 ? std::min(o_.n_predict, quarter) : quarter;
  }

  // Renders the conversation, dropping the oldest turns until it and reply_room() fit, and
  // evaluates the tokens beyond the common prefix with `seen_`. An empty span: nothing to say
  // (the message alone does not fit, or Ctrl-C).
  std::span<const float> prefill_conversation() {
    std::vector<int32_t> toks = tokenize_render(messages_, true);
    const auto n_ctx = eng_.n_ctx();
    // The turns dropped to make room come back when the message is not sent after all: a
    // refused message must not cost the conversation its history.
    std::vector<tok::ChatMessage> before_drop;
    int dropped = 0;
    while (static_cast<int64_t>(toks.size()) + reply_room() > n_ctx) {
      if (dropped == 0) before_drop = messages_;
      if (!drop_oldest_turn()) break;
      ++dropped;
      toks = tokenize_render(messages_, true);
    }
    if (static_cast<int64_t>(toks.size()) >= n_ctx) {
      fmt::print(stderr,
                 "minfer: this message needs {} tokens with the template{} but the context holds "
                 "{}; not sent (raise -c or shorten it)\n",
                 toks.size(), first_turn() ? " and the system prompt" : "", n_ctx);
      if (dropped > 0) messages_ = std::move(before_drop);
      return {};
    }
    if (dropped > 0)
      fmt::print(stderr,
                 "minfer: context full: dropped the {} oldest turn(s){}; {} tokens of {} in use\n",
                 dropped, first_turn() ? ", kept the system prompt" : "", toks.size(), n_ctx);
    size_t common = 0;
    while (common < seen_.size() && common < toks.size() && seen_[common] == toks[common]) ++common;
    if (common == toks.size()) --common;  // always evaluate at least the last token
    const std::span<const int32_t> fresh(toks.data() + common, toks.size() - common);
    const std::span<const float> logits =
        prefill(eng_, fresh, static_cast<int64_t>(common), o_.engine.n_batch, &g_stop);
    if (logits.empty()) {  // Ctrl-C: positions past `common` hold part of this prompt
      seen_.resize(common);
      if (dropped > 0) messages_ = std::move(before_drop);
      fmt::print(stderr, "\nminfer: interrupted\n");
      return {};
    }
    seen_.assign(toks.begin(), toks.end());
    sampler_.reset();
    for (int32_t t : toks) sampler_.accept(t);
    return logits;
  }

  // The tokens a context shift keeps: the system prompt's (the common prefix of its own render
  // and the cache), else the first token (BOS).
  int64_t keep_tokens() const {
    size_t keep = 1;
    if (first_turn() == 1) {
      try {
        const std::vector<int32_t> sys =
            tokenize_render(std::span(messages_.data(), 1), /*gen=*/false);
        size_t c = 0;
        while (c < sys.size() && c < seen_.size() && sys[c] == seen_[c]) ++c;
        keep = std::max<size_t>(keep, c);
      } catch (const Error&) {
        // A template that refuses a lone system message: keep the first token only.
      }
    }
    return static_cast<int64_t>(std::min(keep, seen_.size() / 2));
  }

  // The reply filled the context: drop the older half after the kept prefix (the system
  // prompt) so that the reply can go on.
  void shift() {
    const int64_t n_keep = keep_tokens();
    const auto n = static_cast<int64_t>(seen_.size());
    const int64_t n_discard = std::max<int64_t>(1, (n - n_keep) / 2);
    fmt::print(stderr,
               "\nminfer: context full ({} tokens): shifted, kept the first {} ({}) and the last "
               "{}; the reply goes on\n",
               eng_.n_ctx(), n_keep, first_turn() ? "the system prompt" : "BOS",
               n - n_keep - n_discard);
    shift_context(eng_, seen_, n_keep, n_discard, o_.engine.n_batch);
  }

  // Samples until an end-of-generation token, -n tokens, a reverse prompt or Ctrl-C; a full
  // context shifts. Returns the text.
  std::string generate_reply(std::span<const float> logits) {
    tok::StreamDecoder dec(tk_);
    std::string text;
    if (grammar_) grammar_->reset();  // each reply is one sentence of the grammar
    for (int64_t n = 0; o_.n_predict < 0 || n < o_.n_predict; ++n) {
      if (g_stop) break;
      if (o_.ignore_eos) {  // as run: the end-of-generation tokens masked in a copy
        work_.assign(logits.begin(), logits.end());
        for (int32_t id : tk_.eog_ids()) work_[static_cast<size_t>(id)] = -INFINITY;
        logits = work_;
      }
      const int32_t next = grammar_ ? sampler_.sample(logits, *grammar_) : sampler_.sample(logits);
      if (next == kNoTokenAllowed || tk_.is_eog(next)) break;
      if (grammar_) grammar_->accept(next);
      sampler_.accept(next);
      const std::string piece = dec.push(next);
      text += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      if (ends_with_reverse_prompt(text, o_.text) != nullptr) break;
      if (static_cast<int64_t>(seen_.size()) >= eng_.n_ctx()) shift();
      logits =
          eng_.eval_last(std::span<const int32_t>(&next, 1), static_cast<int64_t>(seen_.size()));
      seen_.push_back(next);
    }
    text += dec.flush();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (g_stop) fmt::print(stderr, "minfer: reply stopped (Ctrl-C again to exit)\n");
    return text;
  }

  const ChatOptions& o_;
  Engine& eng_;
  const tok::Tokenizer& tk_;
  const tok::ChatTemplate tmpl_;
  Sampler sampler_;
  std::unique_ptr<grammar::TokenFilter> grammar_;  // null without a grammar flag
  std::vector<tok::ChatMessage> messages_;
  std::vector<int32_t> seen_;  // tokens whose K/V are in the cache, positions 0..size-1
  std::vector<float> work_;    // --ignore-eos: the logits with the EOG tokens masked
};

constexpr const char* kHelp =
    "minfer chat commands:\n"
    "  /exit, /quit   end the chat (also Ctrl-D at the prompt, or Ctrl-C twice)\n"
    "  /clear         start a new conversation (the system prompt stays)\n"
    "  /help          this text\n"
    "  a line ending in '\\' continues on the next line; Ctrl-C stops a reply\n";

// Reads one message: lines joined while they end in '\'. false at end of input.
bool read_message(std::string& msg) {
  msg.clear();
  std::string line;
  const bool tty = isatty(STDIN_FILENO);
  if (tty) fmt::print(stderr, "\n> ");
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF input
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      msg += line;
      msg += '\n';
      if (tty) fmt::print(stderr, "... ");
      continue;
    }
    msg += line;
    return true;
  }
  return !msg.empty();  // a last continued line without its end: still a message
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  // llama-cli's -no-cnv: plain completion, which is minfer run.
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "-no-cnv" || a == "--no-conversation") return cmd_run(argc, argv);
  }
  ChatOptions o;
  if (auto status = parse_chat_options(argc, argv, o)) return *status;
  LoadedEngine le = load_engine(o.engine, true);
  print_seed(o.sampling);
  clamp_to_context(o.sampling, le.engine->n_ctx());
  Conversation chat(o, *le.engine, *le.tokenizer);
  install_sigint_handler();
  fmt::print(stderr,
             "minfer: chat template {}; type a message (/help for commands), end with Ctrl-D\n",
             chat.chat_template().name());
  if (!o.first_message.empty()) chat.turn(o.first_message);
  std::string msg;
  while (read_message(msg)) {
    if (msg.empty()) continue;
    if (msg == "/exit" || msg == "/quit") break;
    if (msg == "/help") {
      fmt::print(stderr, "{}", kHelp);
      continue;
    }
    if (msg == "/clear") {
      chat.clear();
      fmt::print(stderr, "minfer: new conversation\n");
      continue;
    }
    chat.turn(msg);
  }
  return 0;
}

}  // namespace minfer::app
