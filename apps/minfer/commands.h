// Subcommands of the `minfer` binary. Each lives in its own cmd_<name>.cpp, parses its own
// flags (CLI11) and returns the exit status.
// Ownership: argv is borrowed (llama.cpp-style flags may be rewritten in place, see
// engine_cli.h). Thread safety: one command per process, called from main().
// Failure: bad input throws minfer::Error; main() prints "minfer <cmd>: error: ..." and exits 1.
// Cost: whatever the command does (loading a model maps the file; nothing runs at startup).
#pragma once

namespace minfer::app {

int cmd_info(int argc, char** argv);           // GGUF metadata + tensor table
int cmd_run(int argc, char** argv);            // generate text
int cmd_bench(int argc, char** argv);          // llama-bench style pp/tg
int cmd_batched_bench(int argc, char** argv);  // llama-batched-bench: many sequences
int cmd_tokenize(int argc, char** argv);       // text -> ids
int cmd_chat(int argc, char** argv);           // interactive chat with the GGUF's template
int cmd_template(int argc, char** argv);       // render a chat template for a JSON context
int cmd_gen(int argc, char** argv);            // write a random-weight model with real shapes
int cmd_plan(int argc, char** argv);           // memory plan: where every byte lives
int cmd_serve(int argc, char** argv);          // OpenAI-compatible HTTP server
int cmd_embed(int argc, char** argv);          // text embeddings (llama-embedding)
int cmd_perplexity(int argc, char** argv);     // perplexity, KL divergence (llama-perplexity)

}  // namespace minfer::app
