#include "grammar/json_schema.h"

#include <cstring>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "grammar/grammar.h"

namespace minfer::grammar {

namespace {

using json = nlohmann::ordered_json;

// The JSON primitives every JSON grammar shares.
constexpr const char* kJsonRules = R"(value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
boolean ::= "true" | "false"
null ::= "null"
ws ::= ( " " | "\n" [ \t]{0,16} )?
)";

const std::set<std::string_view> kAnnotations = {
    "title", "description", "default",    "examples", "$schema",
    "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
const std::set<std::string_view> kHandled = {
    "type",       "properties", "required", "additionalProperties",
    "items",      "minItems",   "maxItems", "minLength",
    "maxLength",  "enum",       "const",    "anyOf",
    "oneOf",      "nullable",   "$ref",     "$defs",
    "definitions"};

std::string literal(const json& v) {
  return "\"" + gbnf_escape(v.dump()) + "\"";
}

class Converter {
 public:
  Converter(const json& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  SchemaRules run() {
    SchemaRules out;
    out.expr = visit(root_, "#");
    for (const auto& [name, body] : rules_) out.rules += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] static void error(const std::string& path, const std::string& what) {
    fail(ErrorKind::InvalidArgument, "json_schema: {} at {}", what, path);
  }

  // A rule for `body`; equal bodies share one rule.
  std::string add_rule(const std::string& body) {
    auto it = by_body_.find(body);
    if (it != by_body_.end()) return it->second;
    const std::string name = prefix_ + "s" + std::to_string(rules_.size() + refs_.size());
    rules_.emplace_back(name, body);
    by_body_.emplace(body, name);
    return name;
  }

  std::string visit(const json& s, const std::string& path);
  std::string visit_ref(const std::string& ref, const std::string& path);
  std::string visit_type(const json& s, const std::string& type, const std::string& path);
  std::string visit_object(const json& s, const std::string& path);
  std::string visit_array(const json& s, const std::string& path);
  std::string visit_string(const json& s, const std::string& path);
  static uint64_t count(const json& s, const char* key, const std::string& path) {
    const json& v = s.at(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      error(path + "/" + key, fmt::format("'{}' must be a non-negative integer", key));
    const uint64_t n = v.get<uint64_t>();
    if (n > 10000) error(path + "/" + key, fmt::format("'{}' {} is above 10000", key, n));
    return n;
  }

  const json& root_;
  const std::string prefix_;  // of every rule name, so several schemas can share one grammar
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> by_body_;
  std::map<std::string, std::string> refs_;  // "$ref" -> its rule name
};

std::string Converter::visit(const json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (!s.get<bool>()) error(path, "the schema false matches nothing");
    return "value";
  }
  if (!s.is_object()) error(path, "a schema must be an object or a boolean");
  for (const auto& [key, unused] : s.items())
    if (!kAnnotations.count(key) && !kHandled.count(key))
      error(path, fmt::format("keyword '{}' is not supported", key));
  std::string expr;
  if (s.contains("$ref")) {
    if (!s["$ref"].is_string()) error(path + "/$ref", "'$ref' must be a string");
    expr = visit_ref(s["$ref"].get<std::string>(), path + "/$ref");
  } else if (s.contains("const")) {
    expr = literal(s["const"]);
  } else if (s.contains("enum")) {
    const json& e = s["enum"];
    if (!e.is_array() || e.empty()) error(path + "/enum", "'enum' must be a non-empty list");
    for (const json& v : e) expr += (expr.empty() ? "" : " | ") + literal(v);
    expr = add_rule(expr);
  } else if (s.contains("anyOf") || s.contains("oneOf")) {
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    const json& alts = s[key];
    if (!alts.is_array() || alts.empty())
      error(path + "/" + key, fmt::format("'{}' must be a non-empty list", key));
    for (size_t i = 0; i < alts.size(); ++i)
      expr += (expr.empty() ? "" : " | ") + visit(alts[i], fmt::format("{}/{}/{}", path, key, i));
    expr = add_rule(expr);
  } else if (s.contains("type")) {
    const json& t = s["type"];
    if (t.is_string()) {
      expr = visit_type(s, t.get<std::string>(), path);
    } else if (t.is_array() && !t.empty()) {
      for (const json& one : t) {
        if (!one.is_string()) error(path + "/type", "'type' must name types");
        expr += (expr.empty() ? "" : " | ") + visit_type(s, one.get<std::string>(), path);
      }
      expr = add_rule(expr);
    } else {
      error(path + "/type", "'type' must be a type name or a list of them");
    }
  } else if (s.contains("properties") || s.contains("additionalProperties")) {
    expr = visit_object(s, path);
  } else if (s.contains("items")) {
    expr = visit_array(s, path);
  } else {
    expr = "value";
  }
  if (s.contains("nullable") && s["nullable"] == true) expr = add_rule(expr + " | null");
  return expr;
}

std::string Converter::visit_ref(const std::string& ref, const std::string& path) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  const json* target = nullptr;
  std::string_view rest;
  if (ref == "#") {
    target = &root_;
  } else {
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (ref.rfind(prefix, 0) != 0) continue;
      const std::string_view section = std::string_view(prefix).substr(2, strlen(prefix) - 3);
      rest = std::string_view(ref).substr(strlen(prefix));
      const auto sec = root_.find(std::string(section));
      if (sec != root_.end() && sec->is_object()) {
        const auto def = sec->find(std::string(rest));
        if (def != sec->end()) target = &*def;
      }
    }
  }
  if (!target)
    error(path, fmt::format("'$ref' {} does not name #, #/$defs/<name> or #/definitions/<name> "
                            "of this schema",
                            ref));
  // The name is registered before the body is visited, so a recursive schema refers to it.
  const std::string name = prefix_ + "ref" + std::to_string(refs_.size() + rules_.size());
  refs_.emplace(ref, name);
  const std::string body = visit(*target, ref);
  rules_.emplace_back(name, body);
  return name;
}

std::string Converter::visit_type(const json& s, const std::string& type, const std::string& path) {
  if (type == "object") return visit_object(s, path);
  if (type == "array") return visit_array(s, path);
  if (type == "string") return visit_string(s, path);
  if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
  error(path + "/type", fmt::format("type '{}' is not a JSON schema type", type));
  return {};
}

std::string Converter::visit_object(const json& s, const std::string& path) {
  const json* props = s.contains("properties") ? &s["properties"] : nullptr;
  const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
  if (props && !props->is_object()) error(path + "/properties", "'properties' must be an object");
  if (!props || props->empty()) {
    if (extra && *extra == false) return add_rule("\"{\" ws \"}\"");
    if (!extra || *extra == true) return "object";
    const std::string v = visit(*extra, path + "/additionalProperties");
    const std::string kv = "string ws \":\" ws " + v + " ws";
    return add_rule("\"{\" ws ( " + kv + " ( \",\" ws " + kv + " )* )? \"}\"");
  }
  if (extra && *extra != false)
    error(path + "/additionalProperties",
          "'additionalProperties' other than false next to 'properties' is not supported");
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) error(path + "/required", "'required' must be a list");
    for (const json& r : s["required"]) {
      if (!r.is_string() || !props->contains(r.get<std::string>()))
        error(path + "/required", fmt::format("required {} is not a property", r.dump()));
      required.insert(r.get<std::string>());
    }
  }
  struct Item {
    std::string kv;
    bool required;
  };
  std::vector<Item> items;
  for (const auto& [key, sub] : props->items())
    items.push_back(
        {literal(json(key)) + " ws \":\" ws " + visit(sub, path + "/properties/" + key) + " ws",
         required.count(key) > 0});
  // Properties in the schema's order; the first one present takes no comma. Once one is
  // present the rest is linear; before that, each optional one is "it, or skip to the next".
  auto rest = [&](size_t i) {
    std::string r;
    for (; i < items.size(); ++i)
      r += items[i].required ? " \",\" ws " + items[i].kv : " ( \",\" ws " + items[i].kv + " )?";
    return r;
  };
  std::string first;
  for (size_t i = items.size(); i-- > 0;) {
    const std::string here = items[i].kv + rest(i + 1);
    first = items[i].required ? here : "( " + here + " | " + first + " )";
  }
  return add_rule("\"{\" ws " + first + " \"}\"");
}

std::string Converter::visit_array(const json& s, const std::string& path) {
  const std::string item = s.contains("items") ? visit(s["items"], path + "/items") : "value";
  const uint64_t lo = s.contains("minItems") ? count(s, "minItems", path) : 0;
  const bool bounded = s.contains("maxItems");
  const uint64_t hi = bounded ? count(s, "maxItems", path) : 0;
  if (bounded && hi < lo) error(path + "/maxItems", "'maxItems' < 'minItems'");
  if (bounded && hi == 0) return add_rule("\"[\" ws \"]\"");
  const std::string more = "( \",\" ws " + item + " ws )";
  std::string reps;
  const uint64_t more_lo = lo > 0 ? lo - 1 : 0;
  if (bounded)
    reps = fmt::format("{}{{{},{}}}", more, more_lo, hi - 1);
  else
    reps = fmt::format("{}{{{},}}", more, more_lo);
  const std::string list = item + " ws " + reps;
  return add_rule("\"[\" ws " + (lo > 0 ? list : "( " + list + " )?") + " \"]\"");
}

std::string Converter::visit_string(const json& s, const std::string& path) {
  if (!s.contains("minLength") && !s.contains("maxLength")) return "string";
  const uint64_t lo = s.contains("minLength") ? count(s, "minLength", path) : 0;
  if (!s.contains("maxLength")) return add_rule(fmt::format("\"\\\"\" char{{{},}} \"\\\"\"", lo));
  const uint64_t hi = count(s, "maxLength", path);
  if (hi < lo) error(path + "/maxLength", "'maxLength' < 'minLength'");
  return add_rule(fmt::format("\"\\\"\" char{{{},{}}} \"\\\"\"", lo, hi));
}

}  // namespace

std::string json_object_gbnf() {
  return std::string("root ::= ws object ws\n") + kJsonRules;
}

std::string json_value_gbnf() {
  return std::string("root ::= ws value ws\n") + kJsonRules;
}

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  const SchemaRules r = Converter(schema, "").run();
  return "root ::= ws " + r.expr + " ws\n" + r.rules + kJsonRules;
}

SchemaRules json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix) {
  return Converter(schema, prefix).run();
}

std::string json_primitive_rules() {
  return kJsonRules;
}

}  // namespace minfer::grammar
