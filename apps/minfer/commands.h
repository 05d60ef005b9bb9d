// Subcommands of the `minfer` binary. Each lives in its own cmd_<name>.cpp, parses its own
// flags (CLI11), prints errors as "minfer <cmd>: error: ..." and returns the exit status.
#pragma once

namespace minfer::app {

int cmd_info(int argc, char** argv);      // GGUF metadata + tensor table
int cmd_run(int argc, char** argv);       // generate text
int cmd_bench(int argc, char** argv);     // llama-bench style pp/tg
int cmd_tokenize(int argc, char** argv);  // text -> ids
int cmd_chat(int argc, char** argv);      // interactive chat with the GGUF's template
int cmd_gen(int argc, char** argv);       // write a random-weight model with real shapes
int cmd_plan(int argc, char** argv);      // memory plan: where every byte lives

}  // namespace minfer::app
