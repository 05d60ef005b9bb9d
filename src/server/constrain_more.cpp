// The tool-call grammars (server/constrain.h) of the formats in tool_call_formats_more.cpp.
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

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

// A value of format `f` (MiniMax M3's element text, Gemma 4's and Python's literals) for a
// property's schema: a string its format's string (a string enum: its values so written), a
// number / integer the JSON grammar of its schema (numbers are written alike), a boolean or
// null the format's words; objects, arrays, unions, untyped or refused schemas the format's
// any value (`any`), which the parser types.
std::string more_value(ToolCallFormat f, const json& schema, const std::string& prefix,
                       const std::string& any, std::string& rules) {
  const bool mm = f == ToolCallFormat::MiniMaxXml, py = f == ToolCallFormat::Pythonic;
  const uint8_t types = ParamTypes::of_schema(schema);
  if (types == ParamTypes::kString) {
    const auto e = schema.find("enum");
    std::string values;
    if (e != schema.end() && e->is_array())
      for (const auto& v : *e) {
        const std::string t = v.is_string() ? v.get<std::string>() : "";
        // A value the format cannot write bare (MiniMax's ']', a quote in Python's '..'): the
        // format's string instead.
        if (!v.is_string() || (mm && t.find(']') != std::string::npos) ||
            (py && t.find_first_of("'\\") != std::string::npos))
          return mm ? "mm-val" : py ? "py-str" : "g4-str";
        values += (values.empty() ? "" : " | ") + lit(mm   ? t
                                                      : py ? "'" + t + "'"
                                                           : "<|\"|>" + t + "<|\"|>");
      }
    if (!values.empty()) return "( " + values + " )";
    return mm ? "mm-val" : py ? "py-str" : "g4-str";
  }
  if (types == ParamTypes::kBoolean)
    return py ? "( \"True\" | \"False\" )" : "( \"true\" | \"false\" )";
  if (types == ParamTypes::kNull) return py ? "\"None\"" : "\"null\"";
  if (types != 0 && (types & ~(ParamTypes::kNumber | ParamTypes::kInteger)) == 0) {
    try {
      grammar::SchemaRules sr = grammar::json_schema_rules(schema, prefix);
      rules += sr.rules;
      return sr.expr;
    } catch (const Error&) {
    }
  }
  return any;
}

// Tool i's members in format f: property j's rule t<i>-p<j> is `item(key, value)`, in the
// schema's order (ordered_members); `any_member` when the schema names none.
template <class Item>
std::string more_members(ToolCallFormat f, size_t i, const json& params, const std::string& any,
                         const std::string& sep, const std::string& any_member, Item item,
                         std::string& rules) {
  std::vector<std::pair<std::string, bool>> items;
  if (params.is_object() && params.contains("properties") && params["properties"].is_object()) {
    std::set<std::string> required;
    if (const auto r = params.find("required"); r != params.end() && r->is_array())
      for (const json& name : *r)
        if (name.is_string()) required.insert(name.get<std::string>());
    size_t j = 0;
    for (const auto& [k, v] : params["properties"].items()) {
      const std::string value = more_value(f, v, fmt::format("t{}-p{}-", i, j), any, rules);
      rules += fmt::format("t{}-p{} ::= {}\n", i, j, item(k, value));
      items.emplace_back(fmt::format("t{}-p{}", i, j++), required.count(k) > 0);
    }
  }
  return items.empty() ? any_member : ordered_members(i, items, sep, rules);
}

}  // namespace

std::string ordered_members(size_t i, const std::vector<std::pair<std::string, bool>>& items,
                            const std::string& sep, std::string& rules) {
  const size_t n = items.size();
  auto rest = [&](size_t j) { return j < n ? fmt::format(" t{}-next{}", i, j) : std::string(); };
  for (size_t j = 0; j < n; ++j) {
    const auto& [item, required] = items[j];
    const std::string here = item + rest(j + 1);
    const std::string first = required    ? here
                              : j + 1 < n ? fmt::format("{} | t{}-first{}", here, i, j + 1)
                                          : "( " + here + " )?";
    const std::string after = sep.empty() ? item : sep + " " + item;
    const std::string next = required ? after + rest(j + 1) : "( " + after + " )?" + rest(j + 1);
    rules += fmt::format("t{}-first{} ::= {}\nt{}-next{} ::= {}\n", i, j, first, i, j, next);
  }
  return n == 0 ? std::string() : fmt::format("t{}-first0", i);
}

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
          "py-val ::= py-str | number | \"True\" | \"False\" | \"None\" | array | object\n"
          "py-str ::= \"'\" [^'\\\\]* \"'\"\n"
          "py-key ::= [a-zA-Z_] [a-zA-Z0-9_]*\n",
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
  std::string members;
  switch (f) {
    case ToolCallFormat::MiniMaxXml: {
      // Each key closes its own element; any keys when the schema names none.
      const std::string any = lit(std::string(kNs) + "<") + " [a-zA-Z0-9_]+ \">\" mm-val " +
                              lit(std::string(kNs) + "</") + " [a-zA-Z0-9_]+ \">\"";
      members = more_members(
          f, i, params, "mm-val", "", "( " + any + " )*",
          [](const std::string& k, const std::string& v) {
            return lit(std::string(kNs) + "<" + k + ">") + " " + v + " " +
                   lit(std::string(kNs) + "</" + k + ">");
          },
          rules);
      return fmt::format("{} {} {} \"\\n\"",
                         lit(std::string(kNs) + "<invoke name=\"" + name + "\">"), members,
                         lit(std::string(kNs) + "</invoke>"));
    }
    case ToolCallFormat::Gemma4:
      members = more_members(
          f, i, params, "g4-val", "\",\"",
          "( g4-key \":\" g4-val ( \",\" g4-key \":\" g4-val )* )?",
          [](const std::string& k, const std::string& v) { return lit(k) + " \":\" " + v; }, rules);
      return fmt::format("{} {} \"}}<tool_call|>\"", lit("<|tool_call>call:" + name + "{"),
                         members);
    case ToolCallFormat::Pythonic:
      members = more_members(
          f, i, params, "py-val", "\", \"",
          "( py-key \"=\" py-val ( \", \" py-key \"=\" py-val )* )?",
          [](const std::string& k, const std::string& v) { return lit(k) + " \"=\" " + v; }, rules);
      return fmt::format("{} {} \")\"", lit(name + "("), members);
    default:
      return {};
  }
}

}  // namespace minfer::server::detail
