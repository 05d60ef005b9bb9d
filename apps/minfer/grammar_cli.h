// The grammar flags of run and chat (llama.cpp's names): --grammar GBNF, --grammar-file FILE,
// -j/--json-schema SCHEMA, --json-schema-file FILE. At most one; it is compiled right after
// the flags are parsed, so a bad grammar or an unsupported schema keyword is an error (exit 1)
// naming the flag and the problem before any model loads.
//
// Ownership: GrammarFlags holds the flag values and the compiled Grammar (shared, immutable).
// Thread safety: none needed. Failure: Error(InvalidArgument) / Error(Io) for unreadable
// files. Cost: compiling is linear in the grammar; make_grammar_filter builds the vocabulary
// trie (tens of ms for 151,936 tokens, docs/GRAMMAR.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "grammar/token_filter.h"
#include "tokenizer/tokenizer.h"

namespace minfer::app {

struct GrammarFlags {
  std::string grammar, grammar_file, json_schema, json_schema_file;
  std::shared_ptr<const grammar::Grammar> compiled;  // null: unconstrained
};

void add_grammar_options(CLI::App& app, GrammarFlags& g);
// After parsing: reads the file, converts a schema, compiles; throws naming the flag.
void resolve_grammar_options(GrammarFlags& g);
// One generation's filter over `tk`'s vocabulary for logits rows of n_vocab; null without a
// grammar.
std::unique_ptr<grammar::TokenFilter> make_grammar_filter(const GrammarFlags& g,
                                                          const tok::Tokenizer& tk,
                                                          int64_t n_vocab);

}  // namespace minfer::app
