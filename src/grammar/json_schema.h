// JSON grammars: the built-in grammar of one JSON object (OpenAI's response_format
// {"type": "json_object"}) and the conversion of a JSON schema's common subset to GBNF
// (response_format {"type": "json_schema"}, llama.cpp's `json_schema`, `--json-schema`).
//
// Supported schema keywords: type (a name or a list), properties, required,
// additionalProperties (false, or a schema / true for an object without properties: a map),
// items, minItems, maxItems, minLength, maxLength, enum, const, anyOf, oneOf (as anyOf),
// nullable, $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed), $defs /
// definitions; annotations (title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly) are ignored. Any other keyword is an error naming it and
// where it is, never silently dropped. An object's properties come in the schema's order,
// each optional one maybe absent; numbers have at most 16 integer digits, and whitespace is
// one space or a newline with up to 16 spaces / tabs (a model cannot stall in it forever).
//
// Ownership: returns GBNF text (compile it with parse_gbnf). Thread safety: pure functions.
// Failure: Error(InvalidArgument) "json_schema: ... at <path>". Cost: linear in the schema,
// except objects whose leading properties are optional (quadratic in their count).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace minfer::grammar {

// root ::= one JSON object (surrounding whitespace allowed).
std::string json_object_gbnf();
// root ::= any JSON value.
std::string json_value_gbnf();
// root ::= an instance of `schema`.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// An instance of `schema` as a part of a larger grammar (tool calls: one schema per tool):
// `expr` is a GBNF expression, `rules` the rules it uses, all named `prefix` + "s<n>" /
// "ref<n>" so that schemas converted with distinct prefixes never clash. Both refer to the
// JSON primitives' rules (value, object, array, string, char, number, integer, boolean, null,
// ws), which the caller appends once: json_primitive_rules(). The prefix must be a valid GBNF
// name start ([a-zA-Z0-9-]) that is none of those names'. Failure: as json_schema_to_gbnf.
struct SchemaRules {
  std::string expr;
  std::string rules;
};
SchemaRules json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix);
std::string json_primitive_rules();

}  // namespace minfer::grammar
