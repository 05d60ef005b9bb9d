#include "server/constrain.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "grammar/json_schema.h"
#include "server/tool_call_scan.h"

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
    g.grammar_gbnf = g.grammar != nullptr;
  }
  if (auto it = b.find("json_schema"); it != b.end() && !it->is_null())
    take("json_schema", from_schema(*it, "json_schema"));
  if (auto it = b.find("response_format"); it != b.end() && !it->is_null())
    take("response_format", from_response_format(*it));
}

namespace {

std::string lit(std::string_view s) {
  return "\"" + grammar::gbnf_escape(s) + "\"";
}

// One parameter's value of an XML-style format (docs/SERVER.md "Tools"), by its schema: a
// string is any text up to the closing tag (a string enum: its values, bare), another type the
// JSON grammar of its schema; a parameter the schema does not type, or may be a string or
// another type, or whose schema the converter refuses, any text (which the parser types).
// `as_string`: DSML's attribute, 1 "true", 0 "false", -1 either.
std::string param_value(const json& schema, const std::string& prefix, const std::string& text,
                        std::string& rules, int& as_string) {
  as_string = -1;
  const uint8_t types = ParamTypes::of_schema(schema);
  if (types == ParamTypes::kString) {
    as_string = 1;
    const auto e = schema.find("enum");
    if (e == schema.end() || !e->is_array() || e->empty()) return text;
    std::string values;
    for (const auto& v : *e) values += (values.empty() ? "" : " | ") + lit(v.get<std::string>());
    return "( " + values + " )";
  }
  if (types == 0 || (types & ParamTypes::kString) != 0) return text;
  try {
    grammar::SchemaRules sr = grammar::json_schema_rules(schema, prefix);
    rules += sr.rules;
    as_string = 0;
    return sr.expr;
  } catch (const Error&) {
    return text;  // not supported: any text, as for a tool without a schema
  }
}

// Kimi K3's type attribute of a value of `types` (0: any): the names its template writes.
std::string k3_type_names(uint8_t types) {
  if (types == 0) types = 0xff;
  std::string names;
  auto add = [&](uint8_t bits, const char* name) {
    if ((types & bits) != 0) names += (names.empty() ? "" : " | ") + lit(name);
  };
  add(ParamTypes::kString, "string");
  add(ParamTypes::kNumber | ParamTypes::kInteger, "number");
  add(ParamTypes::kBoolean, "boolean");
  add(ParamTypes::kObject, "object");
  add(ParamTypes::kArray, "array");
  add(ParamTypes::kNull, "null");
  return "( " + names + " )";
}

// Kimi K3 escapes attribute values.
std::string escape_attr(const std::string& v) {
  std::string out;
  for (char c : v) out += c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}

// The parameters of tool `i` in a tagged format: one rule per property of its schema, in the
// schema's order, each at most once and the required ones present (detail::ordered_members;
// any name, any text, any number of times, when it lists none).
std::string tagged_params(const detail::Tagged& t, size_t i, const json& params,
                          std::string& rules) {
  const bool dsml = t.value_open == ">";
  const bool k3 = !t.head_close.empty();
  const std::string nl = t.trim_newline ? " \"\\n\"" : "";
  const std::string text = fmt::format("t{}-text", i);
  rules += grammar::gbnf_excluding(text, t.value_close);
  auto param = [&](const std::string& key, const std::string& value, int as_string, uint8_t types) {
    std::string attr;
    if (dsml)
      attr = fmt::format(" \" string=\\\"\" {} \"\\\"\"", as_string == 1 ? "\"true\""
                                                          : as_string == 0
                                                              ? "\"false\""
                                                              : "( \"true\" | \"false\" )");
    if (k3)
      attr = fmt::format(" \" type=\\\"\" {} \"\\\"\"",
                         k3_type_names(as_string == 1   ? ParamTypes::kString
                                       : as_string == 0 ? types & ~ParamTypes::kString
                                                        : types));
    return fmt::format("{} {} {}{} {}{} {}{} {}", lit(t.param_open), key, lit(t.key_close), attr,
                       t.value_open.empty() ? "" : "ws " + lit(t.value_open), nl, value, nl,
                       lit(t.value_close));
  };
  std::vector<std::pair<std::string, bool>> items;
  if (params.is_object() && params.contains("properties") && params["properties"].is_object()) {
    const json& props = params["properties"];
    std::set<std::string> required;
    if (const auto r = params.find("required"); r != params.end() && r->is_array())
      for (const json& name : *r)
        if (name.is_string()) required.insert(name.get<std::string>());
    size_t j = 0;
    for (const auto& [k, v] : props.items()) {
      int as_string = -1;
      const std::string prefix = fmt::format("t{}-p{}-", i, j);
      const std::string value = param_value(v, prefix, text, rules, as_string);
      rules += fmt::format(
          "t{}-p{} ::= {}\n", i, j,
          param(lit(k3 ? escape_attr(k) : k), value, as_string, ParamTypes::of_schema(v)));
      items.emplace_back(fmt::format("ws t{}-p{}", i, j++), required.count(k) > 0);
    }
  }
  if (items.empty()) {
    rules += fmt::format("t{}-any ::= {}\n", i, param("[^<>\"\\n]+", text, -1, 0));
    return fmt::format("( ws t{}-any )*", i);
  }
  return detail::ordered_members(i, items, "", rules);
}

// A tagged format's call of tool `i` named `name`: JSON arguments `args` (a rule expression),
// or parameters (tagged_params).
std::string tagged_call(const detail::Tagged& t, size_t i, const std::string& name,
                        const json& params, const std::string& args, std::string& rules) {
  std::string call = lit(t.call_open) + " " +
                     (t.id_close.empty() ? "" : "[a-z0-9]+ " + lit(t.id_close) + " ") +
                     (t.indexed_id ? lit("functions." + name + ":") + " [0-9]+" : lit(name)) + " " +
                     lit(t.name_close);
  if (!t.head_close.empty()) call += " " + std::string(t.head_gbnf) + " " + lit(t.head_close);
  if (t.param_open.empty()) {
    if (!t.args_open.empty()) call += " \"\\n\" " + lit(t.args_open) + " \"\\n\"";
    call += " " + args;
    if (!t.args_close.empty()) call += " \"\\n\" " + lit(t.args_close);
    return call + " " + lit(t.call_close);
  }
  const std::string members = tagged_params(t, i, params, rules);
  return call + " " + members + " ws " + lit(t.call_close);
}

// The root rule of format `f` over `call`: all the calls (one_block: the first block).
std::string tool_call_root(ToolCallFormat f, bool parallel, bool one_block) {
  std::string root = detail::more_root(f, parallel, one_block);
  if (!root.empty()) return root;
  switch (f) {
    case ToolCallFormat::Hermes:
      root = parallel && !one_block ? "root ::= block ( ws block )*\n" : "root ::= block\n";
      return root + "block ::= \"<tool_call>\" ws call ws \"</tool_call>\"\n";
    case ToolCallFormat::Llama3:
      return parallel ? "root ::= call ( ws \";\" ws call )*\n" : "root ::= call\n";
    case ToolCallFormat::Mistral:
      return parallel ? "root ::= \"[TOOL_CALLS]\" \"[\" call ( \",\" ws call )* \"]\"\n"
                      : "root ::= \"[TOOL_CALLS]\" \"[\" call \"]\"\n";
    case ToolCallFormat::Harmony:
      // One message to functions.NAME (its <|call|> ends the generation), either header order;
      // "required" lets the model think in the analysis channel first (no '<' inside), the lazy
      // grammar starts at its trigger, the recipient.
      root = one_block ? "root ::= \"to=functions.\" call\n"
                       : "root ::= ( \"<|channel|>analysis<|message|>\" [^<]* \"<|end|>\" "
                         "\"<|start|>assistant\" )? ( \" to=functions.\" | "
                         "\"<|channel|>commentary to=functions.\" ) call\n";
      return root + "harmony-head ::= \"<|channel|>commentary\"? ( \" \"? \"<|constrain|>json\" | "
                    "\" json\" )? \"<|message|>\"\n";
    default:
      break;
  }
  const detail::Tagged* t = detail::tagged_spec(f);
  if (t == nullptr)
    fail(ErrorKind::InvalidArgument, "tool_call_gbnf: format none has no call syntax");
  if (t->section_open.empty())
    return parallel && !one_block ? "root ::= call ( ws call )*\n" : "root ::= call\n";
  // Kimi K3 writes its (empty) response message before the calls; the prompt may have opened
  // it. The lazy grammar starts at the section itself.
  const std::string lead = f == ToolCallFormat::KimiK3 && !one_block
                               ? "( \"<|open|>response<|sep|>\"? \"<|close|>response<|sep|>\" )? "
                               : "";
  return fmt::format("root ::= {}{} ws call {}ws {}\n", lead, lit(t->section_open),
                     parallel ? "( ws call )* " : "", lit(t->section_close));
}

}  // namespace

std::string tool_call_gbnf(ToolCallFormat f, const json& tools, const std::string& only,
                           bool parallel, bool one_block) {
  const detail::JsonCalls* json_calls = detail::json_calls_spec(f);
  const std::string_view name_key = json_calls ? json_calls->name_key : "name";
  const std::string_view args_key = json_calls                    ? json_calls->args_key
                                    : f == ToolCallFormat::Llama3 ? "parameters"
                                                                  : "arguments";
  const detail::Tagged* tagged =
      detail::tagged_spec(f) ? detail::tagged_spec(f) : detail::tagged_spec_more(f);
  std::string root = tool_call_root(f, parallel, one_block);
  std::string calls, rules;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    std::string args = "object";
    // Only an object schema is converted: anything else (none, {}, true) could let the model
    // write arguments that are not an object, which the call parser reads as content.
    const auto p = fn.find("parameters");
    if (p != fn.end() && p->is_object() && p->contains("type") && (*p)["type"] == "object" &&
        (tagged == nullptr || tagged->param_open.empty()) && detail::json_arguments(f)) {
      try {  // rule names t<i>-s<n>: tools never share one, nor the JSON primitives'
        grammar::SchemaRules sr = grammar::json_schema_rules(*p, fmt::format("t{}-", i));
        args = std::move(sr.expr);
        rules += sr.rules;
      } catch (const Error&) {
        // Not supported (or not a schema): any object, as documented.
      }
    }
    calls += (calls.empty() ? "" : " | ") + fmt::format("t{}-call", i);
    if (f == ToolCallFormat::Harmony) {
      rules += fmt::format("t{}-call ::= {} harmony-head {}\n", i, lit(name), args);
      continue;
    }
    if (const std::string call = detail::more_call(f, i, name, p != fn.end() ? *p : json(), rules);
        !call.empty()) {
      rules += fmt::format("t{}-call ::= {}\n", i, call);
      continue;
    }
    if (tagged != nullptr) {
      const std::string call =
          tagged_call(*tagged, i, name, p != fn.end() ? *p : json(), args, rules);
      rules += fmt::format("t{}-call ::= {}\n", i, call);
      continue;
    }
    // Command R7B's template writes "tool_call_id" first: allowed, not required.
    const std::string id =
        json_calls && !json_calls->id_key.empty()
            ? fmt::format("( \"\\\"{}\\\"\" ws \":\" ws string ws \",\" ws )? ", json_calls->id_key)
            : "";
    const std::string head = fmt::format(
        "\"{{\" ws {}\"\\\"{}\\\"\" ws \":\" ws \"{}\" ws \",\" ws \"\\\"{}\\\"\" ws \":\" ws ", id,
        name_key, grammar::gbnf_escape(json(name).dump()), args_key);
    rules += fmt::format("t{}-call ::= {}{} ws \"}}\"\n", i, head, args);
  }
  return root + "call ::= " + calls + "\n" + rules + grammar::json_primitive_rules();
}

void constrain_tool_choice(GenRequest& r, ToolCallFormat f) {
  const json& tools = r.chat_options.tools;
  const json& choice = r.chat_options.tool_choice;
  if (f == ToolCallFormat::None || !tools.is_array() || tools.empty()) return;
  const bool named = choice.is_object();
  if (!named && choice != "required") {
    // "auto" (or none given): lazily, from the format's call opener on, unless the request
    // brings its own grammar. Llama 3's calls have no opener (they are the whole answer).
    const std::string_view opener = lazy_trigger(f);
    if (r.gen.grammar || opener.empty() || (!choice.is_null() && choice != "auto")) return;
    r.gen.grammar = compile(tool_call_gbnf(f, tools, "", r.parallel_tool_calls, true), "tools");
    r.gen.grammar_trigger = std::string(opener);
    return;
  }
  if (r.gen.grammar)
    throw bad_request(
        "'tool_choice' constrains the output to a tool call, and so does 'grammar' / "
        "'json_schema' / 'response_format': send one");
  const std::string only = named ? choice["function"]["name"].get<std::string>() : "";
  r.gen.grammar = compile(tool_call_gbnf(f, tools, only, r.parallel_tool_calls), "tools");
}

bool gate_grammar_on_thinking(GenRequest& r, const ReasoningSyntax& think, bool think_open) {
  GenParams& g = r.gen;
  if (!g.grammar || g.grammar_gbnf || think.empty()) return false;
  const json& kw = r.chat_options.kwargs;
  if (kw.is_object() && kw.contains("enable_thinking") && kw["enable_thinking"] == false)
    return false;
  if (!think_open && prompt_closes_reasoning(think, r.prompt_text)) return false;
  g.think = think;
  g.think_open = think_open;
  if (!g.grammar_trigger.empty()) return true;  // lazy: the slot watches the answer only
  // The model may write whitespace after the close marker (Qwen: "</think>\n\n"), and, when the
  // prompt did not open the thinking, the open marker first (and what its token holds after
  // it: the slot turns the grammar off there) or the answer at once.
  constexpr std::string_view kWs = "[ \\t\\r\\n]*";
  if (!think_open)
    g.think_start_grammar = std::make_shared<const grammar::Grammar>(grammar::splice_gbnf(
        fmt::format("root ::= {} ( {} .* | hole )\nhole ::= \"x\"\n", kWs, lit(think.open)), "hole",
        *g.grammar));
  g.grammar = std::make_shared<const grammar::Grammar>(grammar::splice_gbnf(
      fmt::format("root ::= {} hole\nhole ::= \"x\"\n", kWs), "hole", *g.grammar));
  return true;
}

std::string_view lazy_trigger(ToolCallFormat f) {
  if (f == ToolCallFormat::Hermes) return "<tool_call>";
  if (f == ToolCallFormat::Harmony) return "to=functions.";
  if (f == ToolCallFormat::Llama3) return {};
  return detail::block_opener(f);
}

std::shared_ptr<const grammar::VocabIndex> make_grammar_vocab(const tok::Tokenizer& tk,
                                                              int32_t n_vocab) {
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
  for (int32_t id = 0; id < std::min(n_vocab, tk.n_tokens()); ++id)
    pieces[size_t(id)] = tk.token_to_piece(id);
  return std::make_shared<const grammar::VocabIndex>(std::move(pieces), tk.eog_ids());
}

}  // namespace minfer::server
