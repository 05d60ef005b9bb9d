// minfer tokenize -m FILE (-p TEXT | -f FILE) [--ids] [--no-bos] [--special]
//
// Prints the token ids of a text under a GGUF file's vocabulary. Works on vocabulary-only files
// (no tensors): only tokenizer.* metadata is read.
//   --ids      one line, ids separated by single spaces
//   (default)  one line per token: id<TAB>'piece' (control tokens shown by their text)
//   --no-bos   add neither BOS nor EOS (default: as the file's add_bos_token / add_eos_token)
//   --special  recognise control-token text such as <|im_start|> in the input
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace minfer::app {

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenize text with a GGUF file's vocabulary", "minfer tokenize"};
  std::string model_path, prompt, prompt_file;
  bool ids_only = false, no_bos = false, special = false;
  app.add_option("-m,--model", model_path, "GGUF file (a vocabulary-only file is enough)")
      ->required();
  auto* p = app.add_option("-p,--prompt", prompt, "text to tokenize");
  auto* f = app.add_option("-f,--file", prompt_file, "read the text from this file (verbatim)");
  p->excludes(f);
  app.add_flag("--ids", ids_only, "print only the ids, space-separated on one line");
  app.add_flag("--no-bos", no_bos, "do not add BOS/EOS");
  app.add_flag("--special", special, "parse control-token text (e.g. <|im_start|>) as tokens");
  if (auto status = parse_command_line(app, argc, argv)) return *status;
  if (p->count() == 0 && f->count() == 0) {
    fail(ErrorKind::InvalidArgument, "give the text with -p TEXT or -f FILE");
  }
  const std::string text = f->count() ? read_prompt_file(prompt_file) : prompt;

  const gguf::File file = gguf::File::open(model_path);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_gguf(file);
  const std::vector<tok::TokenId> ids =
      tokenizer.tokenize(text, {.add_special = !no_bos, .parse_special = special});

  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids_only) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
    } else {
      out += std::to_string(ids[i]) + "\t'";
      out += tokenizer.token_to_piece(ids[i], /*render_special=*/true);
      out += "'\n";
    }
  }
  if (ids_only) out += '\n';
  std::cout << out << std::flush;
  return 0;
}

}  // namespace minfer::app
