// minfer chat: an interactive conversation on stdin with the model's chat template.
// Each user line is a turn. The KV cache is kept across turns: the conversation is re-rendered
// with the template and only the tokens beyond what the model has already seen are prefilled
// (the template guarantees the previous render is a prefix; if a tokenization boundary moves,
// the common token prefix is kept and the rest re-evaluated). Replies stream to stdout and stop
// on the vocabulary's end-of-generation tokens.
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "sample/sampler.h"
#include "tokenizer/chat_template.h"

namespace minfer::app {

int cmd_chat(int argc, char** argv) {
  CLI::App app("minfer chat: interactive chat using the model's chat template", "minfer chat");
  EngineOptions eo;
  add_engine_options(app, eo);
  std::string template_name, system;
  int64_t n_predict = -1;
  SamplerParams sp;
  app.add_option("--chat-template", template_name, "chatml, llama2 or llama3 (default: detect)");
  app.add_option("--system", system, "system message");
  app.add_option("-n,--n-predict", n_predict, "most tokens per reply (default: until EOG)");
  app.add_option("--temp", sp.temperature, "temperature (default 0.8)");
  app.add_option("--top-k", sp.top_k, "top-k (default 40)");
  app.add_option("--top-p", sp.top_p, "top-p (default 0.95)");
  app.add_option("--min-p", sp.min_p, "min-p (default 0.05)");
  app.add_option("--repeat-penalty", sp.repeat_penalty, "repetition penalty (default 1.0)");
  app.add_option("--seed", sp.seed, "RNG seed (default: random, printed)");
  rewrite_llama_style_flags(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  sp.validate();
  if (sp.seed == kRandomSeed) {
    sp.seed = resolve_seed(sp.seed);
    fmt::print(stderr, "minfer: seed = {}\n", sp.seed);
  }
  LoadedEngine le = load_engine(eo, true);
  Engine& eng = *le.engine;
  const tok::Tokenizer& tk = *le.tokenizer;
  const tok::ChatTemplate tmpl = tok::ChatTemplate::for_vocab(tk.vocab(), template_name);
  fmt::print(stderr, "minfer: chat template {}; type a message, end with Ctrl-D\n", tmpl.name());

  std::vector<tok::ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  std::vector<int32_t> seen;  // tokens whose K/V are in the cache, positions 0..seen.size()-1
  Sampler sampler(sp, static_cast<int32_t>(eng.n_vocab()));
  std::string line;
  while (true) {
    fmt::print(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    const std::string prompt = tmpl.render(messages, /*add_generation_prompt=*/true);
    const std::vector<int32_t> toks =
        tk.tokenize(prompt, {.add_special = true, .parse_special = true});
    size_t common = 0;
    while (common < seen.size() && common < toks.size() && seen[common] == toks[common]) ++common;
    if (common == toks.size()) --common;  // always evaluate at least the last token
    if (static_cast<int64_t>(toks.size()) >= eng.n_ctx())
      fail(ErrorKind::InvalidArgument, "the conversation ({} tokens) no longer fits the context {}",
           toks.size(), eng.n_ctx());
    std::span<const int32_t> fresh(toks.data() + common, toks.size() - common);
    auto logits = eng.eval_last(fresh, static_cast<int64_t>(common));
    seen.assign(toks.begin(), toks.end());
    sampler.reset();
    for (int32_t t : toks) sampler.accept(t);

    tok::StreamDecoder dec(tk);
    std::vector<int32_t> reply;
    std::string reply_text;
    while (n_predict < 0 || static_cast<int64_t>(reply.size()) < n_predict) {
      const int32_t next = sampler.sample(logits);
      if (tk.is_eog(next)) break;
      sampler.accept(next);
      reply.push_back(next);
      const std::string piece = dec.push(next);
      reply_text += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      if (static_cast<int64_t>(seen.size()) >= eng.n_ctx()) {
        fmt::print(stderr, "\nminfer: context full\n");
        break;
      }
      logits = eng.eval_last(std::span<const int32_t>(&next, 1), static_cast<int64_t>(seen.size()));
      seen.push_back(next);
    }
    reply_text += dec.flush();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    // The end-of-turn token the template expects is part of the next render; the cache holds
    // the reply's tokens, so the next turn prefills only from the first differing token.
    messages.push_back({"assistant", reply_text});
  }
  return 0;
}

}  // namespace minfer::app
