// Internal to the tool-call parser (server/tool_calls.h): the scan of one call block in the
// text generated so far, per format. Scans are pure functions of (text, block start) plus a
// ScanMemo that remembers, per position, how far a JSON value, a call or a tag search got, so
// that scanning the same block again after more text arrived resumes instead of restarting:
// a block's text of n bytes arriving in p pieces costs O(n + p x calls in the block).
//
// Ownership: values. Thread safety: none. Failure: none thrown (Scan::Bad).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/json_scan.h"
#include "server/tool_calls.h"

namespace minfer::server::detail {

constexpr size_t npos = std::string_view::npos;

inline bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

inline size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// Whether s[i..] starts with `word` (Done), is a proper prefix of it (More), or neither.
Scan match(std::string_view s, size_t i, std::string_view word);

// One parameter of an XML-style call (<parameter=KEY>VALUE</parameter>, ...): its value's text
// is s[begin, end); as_string: 1 the format marks it a string, 0 JSON, -1 not said.
struct ParamScan {
  std::string key;
  size_t begin = 0, end = 0;
  int as_string = -1;
};

// One call. Whatever is known so far, also while the text ends inside it.
struct CallScan {
  Scan status = Scan::More;
  size_t begin = 0, end = 0;  // its text; end once Done
  bool has_name = false;      // the name is complete
  std::string name, id;
  bool args_seen = false;         // the arguments value has begun
  bool args_done = false;         // ... and is complete
  char args_kind = 0;             // its first character: '{', '"', 'n', ...; 'p': parameters
  size_t args_begin = 0;          // its text: [args_begin, args_end)
  size_t args_end = 0;            // the end of the text while !args_done
  std::string args_string;        // args_kind '"', done: the decoded text
  std::vector<ParamScan> params;  // args_kind 'p': the complete parameters
};

// The calls of one block (a marker and what follows it).
struct BlockScan {
  Scan status = Scan::More;
  size_t end = 0;           // Done: past the block; More with calls_done: past the last call
  bool calls_done = false;  // More: every call is complete, only the block's closing may follow
  std::vector<CallScan> calls;
};

// A Python argument list "(..)": where it closes, quotes ('..', "..", \ escapes) and brackets
// counted, resumed per push.
struct ParenScan {
  size_t i = 0;  // the next byte to read
  int depth = 0;
  char quote = 0;
  bool escape = false;
  Scan status = Scan::More;
};

// Scans resumed by position in the text (which only grows, so what was read stays true).
struct ScanMemo {
  std::unordered_map<size_t, JsonScanner> values;  // JSON values by their first byte
  // A call object's scan by its '{': where its next key starts, and the call so far.
  struct CallResume {
    size_t i = 0;
    bool first = true;
    CallScan c;
  };
  std::unordered_map<size_t, CallResume> calls;
  std::unordered_map<size_t, size_t> finds;      // a search from a position: where to go on
  std::unordered_map<size_t, ParenScan> parens;  // argument lists by their '('
  // The request's tools' parameter types (borrowed from the parser), for the formats that
  // convert a call's values to JSON once it is complete (MiniMaxXml, Gemma4, Pythonic).
  const ParamTypes* types = nullptr;

  void clear() {
    values.clear();
    calls.clear();
    finds.clear();
    parens.clear();
  }
  // The argument list at s[i] == '(', resumed; Done: *end is past its ')'.
  Scan paren(std::string_view s, size_t i, size_t* end);
  // A JSON value at s[i] (not whitespace), resumed.
  Scan value(std::string_view s, size_t i, size_t* end);
  // The first `word` in s from `from` on, or npos; resumed where the last search stopped.
  size_t find(std::string_view s, size_t from, std::string_view word);
};

// A tagged format: markers around a name and JSON arguments or XML-style parameters.
struct Tagged {
  std::string_view section_open, section_close;  // empty: a block is one call
  std::string_view call_open;
  std::string_view name_close;  // after the name (and whitespace); empty: the name just ends
  // JSON arguments (param_open empty): an object, between optional markers.
  std::string_view args_open, args_close;
  // Or parameters: param_open KEY key_close [attributes] value_open VALUE value_close.
  std::string_view param_open, key_close, value_open, value_close;
  bool trim_newline = false;  // a value's first and last newline are the format's
  std::string_view call_close;
  bool indexed_id = false;  // the name is written functions.NAME:INDEX, also the call's id
  std::string_view id_close = {};  // non-empty: call_open ID id_close NAME (the call's id)
  // Kimi K3: after name_close, attributes (no tag) up to head_close; head_gbnf is what the
  // grammar writes there. Attribute values (keys) escape '&' and '"' as &amp; &quot;.
  std::string_view head_close = {}, head_gbnf = {};
  // Kimi K3: arguments may instead be JSON text: json_open [attributes] head_close {..}
  // json_close.
  std::string_view json_open = {}, json_close = {};
};

// The syntax of a tagged format (QwenXml, Functionary, DeepSeekR1, DeepSeekDsml, Glm, KimiK2,
// Solar);
// null for the others.
const Tagged* tagged_spec(ToolCallFormat f);

// The text of a scanned JSON string; false for escapes nlohmann refuses (lone surrogates).
bool decode_string(std::string_view quoted, std::string* out);

// Whether a complete call is one: a name, and arguments that are an object, a string holding a
// JSON object, null, or (unless `need_args`) absent.
bool valid_call(const CallScan& c, bool need_args, std::string_view s);

// Sets b's status; returns b.
BlockScan& block_stop(BlockScan& b, Scan st);

// One call object ({"name" (or `name_key`), "arguments" | "parameters", "id"?}), or a list of
// them, at s[i]; `i` moves past it. False when they are not complete (b's status: More / Bad).
bool scan_objects(std::string_view s, size_t& i, bool need_args, BlockScan& b, ScanMemo& memo,
                  std::string_view name_key = "name");

// Skips whitespace, then `word` (empty: nothing); More / Bad when it is not there yet / not.
Scan expect(std::string_view s, size_t& i, std::string_view word);

// section_open? call (whitespace call)* section_close? at s[k] -- without a section, one call.
BlockScan scan_tagged(const Tagged& t, std::string_view s, size_t k, ScanMemo& memo);

// A format whose calls are JSON objects after an opener (firefunction, granite, command_r,
// command_r7b, gigachat): opener, an optional prefix, the calls (a list, or one object), an
// optional closing marker. Null for the others.
struct JsonCalls {
  std::string_view opener = {}, prefix = {}, close = {};
  bool list = true;  // the grammar writes a list (the parser reads a list or one object)
  std::string_view name_key = "name", args_key = "arguments";
  std::string_view id_key = {};  // a member the template writes first (not the call's id)
};
const JsonCalls* json_calls_spec(ToolCallFormat f);
// The tagged syntax inside a format of tool_call_formats_more.cpp (muse's ATEM block), or null.
const Tagged* tagged_spec_more(ToolCallFormat f);

// Llama 3.1's built-in tool call after <|python_tag|> at s[i]: NAME.call(key="value", ..),
// appended to b (status Done, More or Bad).
void scan_llama_builtin(std::string_view s, size_t i, BlockScan& b, ScanMemo& memo);

// tool_call_formats_more.cpp: the formats after KimiK2 in ToolCallFormat (their scan, opener,
// markers, name; detect_more: None when the template is none of them).
BlockScan scan_block_more(ToolCallFormat f, std::string_view s, size_t k, ScanMemo& memo);
std::string_view block_opener_more(ToolCallFormat f);
std::vector<std::string_view> markers_more(ToolCallFormat f);
const char* format_name_more(ToolCallFormat f);
ToolCallFormat detect_more(std::string_view template_text);

// The block of format `f` whose marker is at s[k].
BlockScan scan_block(ToolCallFormat f, std::string_view s, size_t k, ScanMemo& memo);

// The text that opens a block of format `f` (the parser looks for it in content); empty for
// Llama3, whose calls are the whole answer, and None.
std::string_view block_opener(ToolCallFormat f);

// A parameter's value as JSON text: `types` the schema's (ParamTypes; 0: not known, then the
// text and the format's attribute decide). server/tool_calls.h says how values are typed.
std::string param_json(const ParamScan& p, std::string_view s, uint8_t types = 0);

// A value converted from a format's own syntax (MiniMaxXml's leaf text, Gemma 4's and Python's
// literals), typed by the schema's `types` (0: kept): a value of an allowed type stays; a
// string that parses as JSON of an allowed type becomes that value; another value becomes the
// string of its text `raw` when strings are allowed; else it is kept as the model wrote it.
nlohmann::ordered_json typed_value(nlohmann::ordered_json v, std::string_view raw, uint8_t types);

}  // namespace minfer::server::detail
