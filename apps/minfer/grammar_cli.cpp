#include "grammar_cli.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine_cli.h"
#include "grammar/json_schema.h"
#include "server/constrain.h"

namespace minfer::app {

void add_grammar_options(CLI::App& app, GrammarFlags& g) {
  app.add_option("--grammar", g.grammar, "GBNF grammar the output must match (docs/GRAMMAR.md)");
  app.add_option("--grammar-file", g.grammar_file, "GBNF grammar from a file");
  app.add_option("-j,--json-schema", g.json_schema,
                 "JSON schema the output must match ('{}': any JSON value)");
  app.add_option("--json-schema-file", g.json_schema_file, "JSON schema from a file");
}

void resolve_grammar_options(GrammarFlags& g) {
  const int given = int(!g.grammar.empty()) + int(!g.grammar_file.empty()) +
                    int(!g.json_schema.empty()) + int(!g.json_schema_file.empty());
  if (given == 0) return;
  if (given > 1)
    fail(ErrorKind::InvalidArgument,
         "--grammar, --grammar-file, --json-schema and --json-schema-file exclude each other");
  std::string gbnf = g.grammar;
  const char* flag = "--grammar";
  if (!g.grammar_file.empty()) {
    gbnf = read_text_file(g.grammar_file, "grammar file");
    flag = "--grammar-file";
  }
  if (!g.json_schema.empty() || !g.json_schema_file.empty()) {
    flag = g.json_schema.empty() ? "--json-schema-file" : "--json-schema";
    const std::string text = g.json_schema.empty()
                                 ? read_text_file(g.json_schema_file, "JSON schema file")
                                 : g.json_schema;
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      // e.byte is 1-based: the user sees where the schema stops being JSON.
      fail(ErrorKind::InvalidArgument, "{}: not valid JSON (at byte {} of {})", flag, e.byte,
           text.size());
    }
    try {
      gbnf = grammar::json_schema_to_gbnf(schema);
    } catch (const Error& e) {
      fail(ErrorKind::InvalidArgument, "{}: {}", flag, e.what());
    }
  }
  try {
    g.compiled = std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf));
  } catch (const Error& e) {
    fail(ErrorKind::InvalidArgument, "{}: {}", flag, e.what());
  }
}

std::unique_ptr<grammar::TokenFilter> make_grammar_filter(const GrammarFlags& g,
                                                          const tok::Tokenizer& tk,
                                                          int64_t n_vocab) {
  if (!g.compiled) return nullptr;
  return std::make_unique<grammar::TokenFilter>(
      g.compiled, server::make_grammar_vocab(tk, static_cast<int32_t>(n_vocab)));
}

}  // namespace minfer::app
