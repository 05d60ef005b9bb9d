#include "server/constrain.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"
#include "grammar/json_schema.h"

namespace minfer::server {

namespace {

std::shared_ptr<const grammar::Grammar> compile(const std::string& gbnf, const char* field) {
  try {
    return std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf));
  } catch (const Error& e) {
    throw bad_request(fmt::format("'{}' is invalid: {}", field, e.what()));
  }
}

std::shared_ptr<const grammar::Grammar> from_schema(const json& schema, const char* field) {
  if (!schema.is_object() && !schema.is_boolean())
    throw bad_request(fmt::format("'{}' must be a JSON schema object", field));
  std::string gbnf;
  try {
    gbnf = grammar::json_schema_to_gbnf(schema);
  } catch (const Error& e) {
    throw bad_request(fmt::format("'{}' is not supported: {}", field, e.what()));
  }
  return compile(gbnf, field);
}

std::shared_ptr<const grammar::Grammar> from_response_format(const json& rf) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw bad_request("'response_format' must be an object with a string 'type'");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") {
    // llama-server's extension: a schema next to json_object constrains it further.
    if (rf.contains("schema") && !rf["schema"].is_null())
      return from_schema(rf["schema"], "response_format.schema");
    return compile(grammar::json_object_gbnf(), "response_format");
  }
  if (type == "json_schema") {
    const auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object() || !js->contains("schema"))
      throw bad_request(
          "'response_format' of type json_schema needs 'json_schema': {\"schema\": {...}}");
    return from_schema((*js)["schema"], "response_format.json_schema.schema");
  }
  throw bad_request(fmt::format(
      "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"",
      type));
}

}  // namespace

void parse_grammar_fields(const json& b, GenParams& g) {
  const char* set_by = nullptr;
  auto take = [&](const char* field, std::shared_ptr<const grammar::Grammar> gr) {
    if (!gr) return;
    if (set_by)
      throw bad_request(
          fmt::format("'{}' and '{}' both constrain the output: send one", set_by, field));
    set_by = field;
    g.grammar = std::move(gr);
  };
  if (auto it = b.find("grammar"); it != b.end() && !it->is_null()) {
    if (!it->is_string()) throw bad_request("'grammar' must be a string (GBNF)");
    if (!it->get<std::string>().empty())
      take("grammar", compile(it->get<std::string>(), "grammar"));
  }
  if (auto it = b.find("json_schema"); it != b.end() && !it->is_null())
    take("json_schema", from_schema(*it, "json_schema"));
  if (auto it = b.find("response_format"); it != b.end() && !it->is_null())
    take("response_format", from_response_format(*it));
}

std::string tool_call_gbnf(ToolCallFormat f, const json& tools, const std::string& only,
                           bool parallel) {
  const char* args_key = f == ToolCallFormat::Llama3 ? "parameters" : "arguments";
  std::string calls, rules;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    std::string args = "object";
    // Only an object schema is converted: anything else (none, {}, true) could let the model
    // write arguments that are not an object, which the call parser reads as content.
    const auto p = fn.find("parameters");
    if (p != fn.end() && p->is_object() && p->contains("type") && (*p)["type"] == "object") {
      try {  // rule names t<i>-s<n>: tools never share one, nor the JSON primitives'
        grammar::SchemaRules sr = grammar::json_schema_rules(*p, fmt::format("t{}-", i));
        args = std::move(sr.expr);
        rules += sr.rules;
      } catch (const Error&) {
        // Not supported (or not a schema): any object, as documented.
      }
    }
    const std::string head = "\"{\" ws \"\\\"name\\\"\" ws \":\" ws \"" +
                             grammar::gbnf_escape(json(name).dump()) + "\" ws \",\" ws \"\\\"" +
                             args_key + "\\\"\" ws \":\" ws ";
    calls += (calls.empty() ? "" : " | ") + fmt::format("t{}-call", i);
    rules += fmt::format("t{}-call ::= {}{} ws \"}}\"\n", i, head, args);
  }
  std::string root;
  switch (f) {
    case ToolCallFormat::Hermes:
      root = parallel ? "root ::= block ( ws block )*\n" : "root ::= block\n";
      root += "block ::= \"<tool_call>\" ws call ws \"</tool_call>\"\n";
      break;
    case ToolCallFormat::Llama3:
      root = parallel ? "root ::= call ( ws \";\" ws call )*\n" : "root ::= call\n";
      break;
    case ToolCallFormat::Mistral:
      root = parallel ? "root ::= \"[TOOL_CALLS]\" \"[\" call ( \",\" ws call )* \"]\"\n"
                      : "root ::= \"[TOOL_CALLS]\" \"[\" call \"]\"\n";
      break;
    default:
      fail(ErrorKind::InvalidArgument, "tool_call_gbnf: format none has no call syntax");
  }
  return root + "call ::= " + calls + "\n" + rules + grammar::json_primitive_rules();
}

void constrain_tool_choice(GenRequest& r, ToolCallFormat f) {
  const json& tools = r.chat_options.tools;
  const json& choice = r.chat_options.tool_choice;
  if (f == ToolCallFormat::None || !tools.is_array() || tools.empty()) return;
  const bool named = choice.is_object();
  if (!named && choice != "required") return;
  if (r.gen.grammar)
    throw bad_request(
        "'tool_choice' constrains the output to a tool call, and so does 'grammar' / "
        "'json_schema' / 'response_format': send one");
  const std::string only = named ? choice["function"]["name"].get<std::string>() : "";
  r.gen.grammar = compile(tool_call_gbnf(f, tools, only, r.parallel_tool_calls), "tools");
}

std::shared_ptr<const grammar::VocabIndex> make_grammar_vocab(const tok::Tokenizer& tk,
                                                              int32_t n_vocab) {
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
  for (int32_t id = 0; id < std::min(n_vocab, tk.n_tokens()); ++id)
    pieces[size_t(id)] = tk.token_to_piece(id);
  return std::make_shared<const grammar::VocabIndex>(std::move(pieces), tk.eog_ids());
}

}  // namespace minfer::server
