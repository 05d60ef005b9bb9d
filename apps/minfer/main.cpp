// minfer: one binary, many subcommands. Dispatch only; each command owns its flags.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#include "build_info.h"
#include "commands.h"
#include "common/error.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

constexpr Command kCommands[] = {
    {"run", minfer::app::cmd_run, "generate text from a prompt"},
    {"chat", minfer::app::cmd_chat, "interactive chat using the model's chat template"},
    {"bench", minfer::app::cmd_bench, "prompt-processing and generation speed (llama-bench style)"},
    {"batched-bench", minfer::app::cmd_batched_bench,
     "many sequences prefilled and decoded together (llama-batched-bench style)"},
    {"plan", minfer::app::cmd_plan, "show the memory plan: where every byte lives"},
    {"info", minfer::app::cmd_info, "print a GGUF file's metadata and tensor table"},
    {"embed", minfer::app::cmd_embed, "text embeddings, pooled and normalized (llama-embedding)"},
    {"perplexity", minfer::app::cmd_perplexity,
     "perplexity of a text; KL divergence against a base model (llama-perplexity)"},
    {"tokenize", minfer::app::cmd_tokenize, "tokenize text with a model's vocabulary"},
    {"template", minfer::app::cmd_template, "render a chat template (Jinja) for a JSON context"},
    {"serve", minfer::app::cmd_serve, "OpenAI-compatible HTTP server (continuous batching)"},
    {"gen", minfer::app::cmd_gen, "write a random-weight GGUF with a real architecture's shapes"},
};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: minfer <command> [options]   (minfer <command> --help; minfer --version)"
               "\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-13s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version" || name == "version") {
    minfer::app::print_version();
    return 0;
  }
  for (const auto& c : kCommands) {
    if (name == c.name) {
      try {
        return c.fn(argc - 1, argv + 1);
      } catch (const minfer::Error& e) {
        std::fprintf(stderr, "minfer %s: error: %s\n", c.name, e.what());
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "minfer %s: error: %s\n", c.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "minfer: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
