// minfer chat: an interactive conversation on stdin with the model's chat template.
// The template is the GGUF's tokenizer.chat_template, rendered by minfer's Jinja interpreter
// (src/template); --chat-template-file F overrides it and --chat-template NAME picks a built-in
// text (chatml, llama2, llama3) for a model that has none. Each user line is a turn. The KV cache
// is kept across turns: the conversation is re-rendered with the template and only the tokens
// beyond what the model has already seen are prefilled (the template guarantees the previous render
// is a prefix; if a tokenization boundary moves, the common token prefix is kept and the rest
// re-evaluated). Replies stream to stdout and stop on the vocabulary's end-of-generation tokens.
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "sample/sampler.h"
#include "tokenizer/chat_template.h"

namespace minfer::app {

namespace {

struct ChatOptions {
  EngineOptions engine;
  SamplerParams sampling;
  std::string template_name;  // empty: the vocabulary's template
  std::string template_file;  // a Jinja file, overrides both
  std::string system;         // empty: no system message
  int64_t n_predict = -1;     // most tokens per reply; -1: until end of generation
};

std::optional<int> parse_chat_options(int argc, char** argv, ChatOptions& o) {
  CLI::App app("minfer chat: interactive chat using the model's chat template", "minfer chat");
  add_engine_options(app, o.engine);
  auto* name = app.add_option("--chat-template", o.template_name,
                              "built-in template for a model without one: chatml, llama2, llama3");
  app.add_option("--chat-template-file", o.template_file,
                 "Jinja chat template file (overrides "
                 "the model's)")
      ->excludes(name);
  app.add_option("--system", o.system, "system message");
  add_n_predict_option(app, o.n_predict, "most tokens per reply (default -1: until EOG)");
  add_sampling_options(app, o.sampling);
  if (auto status = parse_command_line(app, argc, argv)) return status;
  resolve_sampling_options(o.sampling);
  return std::nullopt;
}

tok::ChatTemplate load_chat_template(const ChatOptions& o, const tok::Vocab& vocab) {
  if (o.template_file.empty()) return tok::ChatTemplate::for_vocab(vocab, o.template_name);
  std::ifstream in(o.template_file, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "cannot open chat template file '{}'", o.template_file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  tok::ChatTemplate t = tok::ChatTemplate::from_text(text, o.template_file);
  t.use_special_tokens_of(vocab);
  return t;
}

// One conversation: the engine's KV cache holds `seen_`, the tokens of every turn so far.
class Conversation {
 public:
  Conversation(const ChatOptions& o, Engine& eng, const tok::Tokenizer& tk)
      : o_(o),
        eng_(eng),
        tk_(tk),
        tmpl_(load_chat_template(o, tk.vocab())),
        sampler_(o.sampling, static_cast<int32_t>(eng.n_vocab())) {
    if (!o.system.empty()) messages_.push_back({"system", o.system});
  }
  const tok::ChatTemplate& chat_template() const { return tmpl_; }

  // Adds the user's line, prefills what the cache lacks, streams the reply to stdout.
  void turn(const std::string& line) {
    messages_.push_back({"user", line});
    const std::span<const float> logits = prefill_conversation();
    const std::string reply = generate_reply(logits);
    // The end-of-turn token the template expects is part of the next render; the cache holds
    // the reply's tokens, so the next turn prefills only from the first differing token.
    messages_.push_back({"assistant", reply});
  }

 private:
  // Renders the conversation and evaluates the tokens beyond the common prefix with `seen_`.
  std::span<const float> prefill_conversation() {
    const std::string prompt = tmpl_.render(messages_, /*add_generation_prompt=*/true);
    // The template may write bos_token itself; the tokenizer adds BOS as the vocabulary says.
    const std::vector<int32_t> toks = tk_.tokenize(tok::without_leading_bos(prompt, tk_.vocab()),
                                                   {.add_special = true, .parse_special = true});
    size_t common = 0;
    while (common < seen_.size() && common < toks.size() && seen_[common] == toks[common]) ++common;
    if (common == toks.size()) --common;  // always evaluate at least the last token
    if (static_cast<int64_t>(toks.size()) >= eng_.n_ctx())
      fail(ErrorKind::InvalidArgument, "the conversation ({} tokens) no longer fits the context {}",
           toks.size(), eng_.n_ctx());
    const std::span<const int32_t> fresh(toks.data() + common, toks.size() - common);
    const std::span<const float> logits =
        prefill(eng_, fresh, static_cast<int64_t>(common), o_.engine.n_batch);
    seen_.assign(toks.begin(), toks.end());
    sampler_.reset();
    for (int32_t t : toks) sampler_.accept(t);
    return logits;
  }

  // Samples until an end-of-generation token, -n tokens or a full context; returns the text.
  std::string generate_reply(std::span<const float> logits) {
    tok::StreamDecoder dec(tk_);
    std::string text;
    for (int64_t n = 0; o_.n_predict < 0 || n < o_.n_predict; ++n) {
      const int32_t next = sampler_.sample(logits);
      if (tk_.is_eog(next)) break;
      sampler_.accept(next);
      const std::string piece = dec.push(next);
      text += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      if (static_cast<int64_t>(seen_.size()) >= eng_.n_ctx()) {
        fmt::print(stderr, "\nminfer: context full\n");
        break;
      }
      logits =
          eng_.eval_last(std::span<const int32_t>(&next, 1), static_cast<int64_t>(seen_.size()));
      seen_.push_back(next);
    }
    text += dec.flush();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    return text;
  }

  const ChatOptions& o_;
  Engine& eng_;
  const tok::Tokenizer& tk_;
  const tok::ChatTemplate tmpl_;
  Sampler sampler_;
  std::vector<tok::ChatMessage> messages_;
  std::vector<int32_t> seen_;  // tokens whose K/V are in the cache, positions 0..size-1
};

}  // namespace

int cmd_chat(int argc, char** argv) {
  ChatOptions o;
  if (auto status = parse_chat_options(argc, argv, o)) return *status;
  LoadedEngine le = load_engine(o.engine, true);
  clamp_to_context(o.sampling, le.engine->n_ctx());
  Conversation chat(o, *le.engine, *le.tokenizer);
  fmt::print(stderr, "minfer: chat template {}; type a message, end with Ctrl-D\n",
             chat.chat_template().name());
  std::string line;
  while (true) {
    fmt::print(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    chat.turn(line);
  }
  return 0;
}

}  // namespace minfer::app
