// minfer template (--template-file T.jinja | -m FILE.gguf | --chat-template NAME)
//                 --context C.json
//
// Renders a chat template with minfer's Jinja interpreter and prints the result to stdout,
// byte for byte (no newline added). C.json is a JSON object of the template's variables, as
// each `context` of shared/chat-templates/cases.json: messages, add_generation_prompt,
// bos_token, eos_token and, where present, tools. With -m the template is the GGUF's
// tokenizer.chat_template and bos_token / eos_token default to the vocabulary's text.
// A template that refuses the conversation (raise_exception) or fails is an error: main()
// prints it on stderr and exits 1.
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"

namespace minfer::app {

namespace {

nlohmann::ordered_json read_context(const std::string& path) {
  const std::string text = read_text_file(path, "context file");
  nlohmann::ordered_json ctx;
  try {
    ctx = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::InvalidFile, "context file '{}' is not JSON: {}", path, e.what());
  }
  if (!ctx.is_object())
    fail(ErrorKind::InvalidFile, "context file '{}' is not a JSON object", path);
  return ctx;
}

}  // namespace

int cmd_template(int argc, char** argv) {
  CLI::App app{"Render a chat template (Jinja) for a JSON context", "minfer template"};
  std::string template_file, model_path, builtin, context_file;
  auto* t = app.add_option("--template-file", template_file, "Jinja template file");
  auto* m = app.add_option("-m,--model", model_path, "take the GGUF's tokenizer.chat_template");
  auto* b = app.add_option("--chat-template", builtin, "built-in template: chatml, llama2, llama3");
  t->excludes(m)->excludes(b);
  m->excludes(b);
  app.add_option("--context", context_file, "JSON object of the template's variables")->required();
  if (auto status = parse_command_line(app, argc, argv)) return *status;
  if (!t->count() && !m->count() && !b->count()) {
    fail(ErrorKind::InvalidArgument,
         "give --template-file T.jinja, -m FILE or --chat-template NAME");
  }
  const nlohmann::ordered_json ctx = read_context(context_file);

  tok::ChatTemplate chat;
  if (t->count()) {
    chat =
        tok::ChatTemplate::from_text(read_text_file(template_file, "template file"), template_file);
  } else if (b->count()) {
    chat = tok::ChatTemplate::from_name(builtin);
  } else {
    const gguf::File file = gguf::File::open(model_path);
    chat = tok::ChatTemplate::for_vocab(tok::Vocab::from_gguf(file));
  }
  const std::string out = chat.render(ctx);
  std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
  std::cout.flush();
  return 0;
}

}  // namespace minfer::app
