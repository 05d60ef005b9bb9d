// The tool-call grammars (server/constrain.h) of the formats in tool_call_formats_more.cpp.
#include <fmt/format.h>

#include "grammar/json_schema.h"
#include "server/constrain.h"
#include "server/tool_call_scan.h"

namespace minfer::server::detail {

namespace {

std::string lit(std::string_view s) {
  std::string r = "\"";
  r += grammar::gbnf_escape(s);
  r += '"';
  return r;
}

constexpr std::string_view kNs = "]<]minimax[>[";

// The schema's property names as alternatives (empty when it names none).
std::string property_names(const json& params, std::string_view before = {},
                           std::string_view after = {}) {
  std::string keys;
  if (params.is_object() && params.contains("properties") && params["properties"].is_object())
    for (const auto& [k, v] : params["properties"].items())
      keys += (keys.empty() ? "" : " | ") + lit(std::string(before) + k + std::string(after));
  return keys;
}

// root over `call` for the JSON formats: opener, prefix, a list (or GigaChat's one object per
// block) and the closing marker.
std::string json_calls_root(const JsonCalls& j, bool parallel, bool one_block) {
  // The prefix is optional, as for the parser: GigaChat's <|role_sep|> is a control token,
  // which the grammar masks (a model must spell it, or leave it out).
  const std::string prefix = j.prefix.empty() ? "" : fmt::format(" ( {} ws )?", lit(j.prefix));
  if (!j.list) {
    const std::string block = lit(j.opener) + " ws" + prefix + " call";
    return parallel && !one_block ? fmt::format("root ::= {} ( ws {} )*\n", block, block)
                                  : fmt::format("root ::= {}\n", block);
  }
  return fmt::format("root ::= {} ws{} \"[\" ws call {}ws \"]\"{}\n", lit(j.opener), prefix,
                     parallel ? "( ws \",\" ws call )* " : "",
                     j.close.empty() ? "" : fmt::format(" ws {}", lit(j.close)));
}

}  // namespace

bool json_arguments(ToolCallFormat f) {
  return f != ToolCallFormat::MiniMaxXml && f != ToolCallFormat::Gemma4 &&
         f != ToolCallFormat::Pythonic;
}

std::string more_root(ToolCallFormat f, bool parallel, bool one_block) {
  if (const JsonCalls* j = json_calls_spec(f)) return json_calls_root(*j, parallel, one_block);
  const std::string more = parallel ? "( ws call )* " : "";
  switch (f) {
    case ToolCallFormat::MiniMaxXml:
      return fmt::format("root ::= {} \"\\n\" call {}{}\nmm-val ::= [^\\]]*\n",
                         lit(std::string(kNs) + "<tool_call>"), parallel ? "call* " : "",
                         lit(std::string(kNs) + "</tool_call>"));
    case ToolCallFormat::Gemma4:
      return fmt::format(
          "root ::= call {}\n"
          "g4-val ::= g4-str | number | \"true\" | \"false\" | \"null\" | \"[\" ( g4-val ( "
          "\",\" g4-val )* )? \"]\" | \"{{\" ( g4-key \":\" g4-val ( \",\" g4-key \":\" g4-val "
          ")* )? \"}}\"\n"
          "g4-str ::= \"<|\\\"|>\" ( [^<] | \"<\" [^|] )* \"<|\\\"|>\"\n"
          "g4-key ::= [a-zA-Z_] [a-zA-Z0-9_]*\n",
          parallel && !one_block ? more : "");
    case ToolCallFormat::Pythonic:
      return fmt::format(
          "root ::= \"<|tool_call_start|>[\" call {}\"]<|tool_call_end|>\"\n"
          "py-val ::= \"'\" [^'\\\\]* \"'\" | number | \"True\" | \"False\" | \"None\" | array | "
          "object\n",
          parallel ? "( \", \" call )* " : "");
    case ToolCallFormat::Atem:
      return fmt::format(
          "root ::= \"to=\" [a-zA-Z0-9_.-]+ \"<|message|>\" \"<atem:function_calls>\" ws call "
          "{}ws \"</atem:function_calls>\"\n",
          more);
    default:
      return {};
  }
}

std::string more_call(ToolCallFormat f, size_t i, const std::string& name, const json& params,
                      std::string& rules) {
  std::string keys;
  switch (f) {
    case ToolCallFormat::MiniMaxXml:
      // Each key closes its own element; any key when the schema names none.
      if (params.is_object() && params.contains("properties") && params["properties"].is_object())
        for (const auto& [k, v] : params["properties"].items())
          keys += (keys.empty() ? "" : " | ") + lit(std::string(kNs) + "<" + k + ">") + " mm-val " +
                  lit(std::string(kNs) + "</" + k + ">");
      if (keys.empty())
        keys = lit(std::string(kNs) + "<") + " [a-zA-Z0-9_]+ \">\" mm-val " +
               lit(std::string(kNs) + "</") + " [a-zA-Z0-9_]+ \">\"";
      rules += fmt::format("t{}-param ::= {}\n", i, keys);
      return fmt::format("{} t{}-param* {} \"\\n\"",
                         lit(std::string(kNs) + "<invoke name=\"" + name + "\">"), i,
                         lit(std::string(kNs) + "</invoke>"));
    case ToolCallFormat::Gemma4:
      keys = property_names(params);
      rules += fmt::format("t{}-kv ::= ( {} ) \":\" g4-val\n", i, keys.empty() ? "g4-key" : keys);
      return fmt::format("{} ( t{}-kv ( \",\" t{}-kv )* )? \"}}<tool_call|>\"",
                         lit("<|tool_call>call:" + name + "{"), i, i);
    case ToolCallFormat::Pythonic:
      keys = property_names(params);
      rules += fmt::format("t{}-kv ::= ( {} ) \"=\" py-val\n", i,
                           keys.empty() ? "[a-zA-Z_] [a-zA-Z0-9_]*" : keys);
      return fmt::format("{} ( t{}-kv ( \", \" t{}-kv )* )? \")\"", lit(name + "("), i, i);
    default:
      return {};
  }
}

}  // namespace minfer::server::detail
