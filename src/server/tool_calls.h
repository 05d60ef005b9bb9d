// Tool calls in a chat model's output: the text a model writes when it calls a function
// (Qwen's `<tool_call>{"name": .., "arguments": ..}</tool_call>`, ...) -> OpenAI's
// `tool_calls` [{id, type: "function", function: {name, arguments}}], whole or as stream deltas.
//
// The format is chosen from the chat template's text (detect_tool_call_format), as llama.cpp's
// common/chat.cpp does, since the template is what taught the model its syntax:
//   Hermes       `<tool_call>` + {"name", "arguments"} (or a list of them) + `</tool_call>`, one
//                block per call (Hermes 2 Pro / 3, Qwen2.5, Qwen3, Granite, MiMo), or
//                `<tool_calls>` + a list or an object per line (Apriel 1.5 / 1.6, MiniMax M1)
//   Llama3       the answer starts with {"name", "parameters"} (optionally after <|python_tag|>),
//                several separated by ';' or whitespace (Llama 3.1 / 3.2 / 3.3), or is a
//                built-in tool's <|python_tag|>NAME.call(key="value", ..)
//   Mistral      `[TOOL_CALLS]` + [{"name", "arguments", "id"?}, ...] (Nemo), or
//                `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}` per call (Devstral, Ministral 3)
//   QwenXml      `<tool_call><function=NAME><parameter=P>\nVALUE\n</parameter>..</function>
//                </tool_call>` (Qwen3-Coder, Qwen3.5, Nemotron 3)
//   Functionary  `<function=NAME>{...}</function>` (functionary v3.1)
//   DeepSeekR1   `<｜tool▁calls▁begin｜>` + per call
//                `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
//                <｜tool▁call▁end｜>` + `<｜tool▁calls▁end｜>` (R1 / V3)
//   DeepSeekDsml `<｜DSML｜tool_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter name="P"
//                string="true|false">VALUE</｜DSML｜parameter>..` (DeepSeek V4)
//   Glm          `<tool_call>NAME<arg_key>P</arg_key><arg_value>VALUE</arg_value>..</tool_call>`
//                (GLM 4.5-4.7, Laguna)
//   KimiK2       `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N
//                <|tool_call_argument_begin|>{...}<|tool_call_end|>..` (Kimi K2; its id is
//                the call's id)
//   Firefunction ` functools[{"name", "arguments"}, ...]` (firefunction v2)
//   Granite      `<|tool_call|>[{"name", "arguments"}, ...]` (Granite 3.3)
//   CommandR     `Action:\n```json\n[{"tool_name", "parameters"}, ...]```` (Command R+)
//   CommandR7b   `<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, ...]
//                <|END_ACTION|>` (Cohere2MoE)
//   GigaChat     `function call<|role_sep|>\n{"name", "arguments"}` (GigaChat 3)
//   MiniMaxXml   `]<]minimax[>[<tool_call>` + per call `]<]minimax[>[<invoke name="NAME">` +
//                elements `]<]minimax[>[<KEY>VALUE]<]minimax[>[</KEY>` (nested: objects, <item>
//                lists) + `]<]minimax[>[</invoke>`, then `]<]minimax[>[</tool_call>` (MiniMax M3)
//   Gemma4       `<|tool_call>call:NAME{key:VALUE,..}<tool_call|>`, strings between <|"|>
//                (Gemma 4)
//   Pythonic     `<|tool_call_start|>[NAME(key=VALUE, ..), ..]<|tool_call_end|>`, Python
//                literals (LFM2, LFM2.5)
//   Atem         `to=NAME<|message|><atem:function_calls>` + invokes as DSML's, ATEM-named +
//                `</atem:function_calls>`, again after `<|eom|><|start|>assistant` (muse)
//   Solar        `<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>
//                {...}<|tool_call:end|>..<|calls|>` (Solar Open; ID is the call's id)
//   KimiK3       `<|open|>tools<|sep|>` + per call `<|open|>call tool="NAME" index="N"<|sep|>`
//                + `<|open|>argument key="P" type="string"<|sep|>VALUE<|close|>argument<|sep|>`..
//                (or `<|open|>json type="object"<|sep|>{..}<|close|>json<|sep|>`) +
//                `<|close|>call<|sep|>`, then `<|close|>tools<|sep|>` (Kimi K3)
//   None         any other template: the text stays content (as without tools)
// MiniMaxXml, Gemma4 and Pythonic values are converted to JSON once the call's closing marker
// is there: such a call starts with its whole arguments; their top-level values are then typed
// by the schema as parameters are (a string parameter's 3 is "3").
// Parameters (QwenXml, DeepSeekDsml, Glm, Atem, KimiK3) become a JSON object's members in
// their order, each value typed by the tool's schema (ParamTypes): a "string" parameter's text
// is that string; a number, integer, boolean, object, array or null parameter's text is parsed
// as JSON (text that is none of its types stays a string, as written); a parameter that may be
// a string or another type is that type when its text parses as one, else the string. A
// parameter the schema does not type (no such tool or property, no "type") is read as before
// the schema was: a value the format marks a string (DSML string="true", Kimi K3
// type="string") is a string, else a value that is a JSON object, array, number, true, false or
// null is that value and any other text a string, as the templates write non-strings with
// tojson and strings bare.
//
// ToolCallParser consumes the text as it is generated and returns deltas: content safe to
// send (text that may still become a call marker, and whitespace before one, is held back),
// the start of a call (id and name) once its name is complete and its arguments have begun as
// an object, then fragments of its `arguments`: the model's JSON text of that object, sent as
// it arrives (a valid JSON prefix), so the fragments concatenate to the final `arguments`
// string; arguments given as a JSON string, null or not at all come whole with the call's end.
// Parameters' arguments come one parameter at a time, as each parameter completes.
// Whitespace around call blocks is dropped; text with no call in it comes out exactly as it
// went in. Call ids are the model's own when known at the call's start (Mistral's [CALL_ID];
// any id when the text is pushed whole), else generated: "call_" + 24 letters/digits, or 9
// letters/digits for Mistral, whose template refuses other lengths when the call comes back.
//
// Malformed call text (not JSON, no name, arguments not an object, or an object nlohmann-json
// refuses) is content. A call already announced whose text then breaks off (the model stops
// mid-call or writes invalid JSON) cannot be taken back in a stream: broken() is set, the
// call's text from its start and everything after it come out as content, and a whole
// (non-streamed) answer returns the entire text as content instead (ResponseBuilder).
//
// Ownership: values. Thread safety: none (one parser per request, on its HTTP thread). Failure:
// none thrown; malformed text is content. Cost: O(bytes) for the text: a call in progress is
// not rescanned, its scans (JSON values, tag searches) resume where the last push left them,
// so a push costs its bytes plus O(calls and parameters in the current block).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace minfer::server {

enum class ToolCallFormat {
  None,
  Hermes,
  Llama3,
  Mistral,
  QwenXml,
  Functionary,
  DeepSeekR1,
  DeepSeekDsml,
  Glm,
  KimiK2,
  // tool_call_formats_more.cpp
  Firefunction,
  Granite,
  CommandR,
  CommandR7b,
  GigaChat,
  MiniMaxXml,
  Gemma4,
  Pythonic,
  Atem,
  Harmony,  // gpt-oss: read by HarmonyParser (harmony.h), not by ToolCallParser
  Solar,
  KimiK3
};

// "none", "hermes", "llama3", "mistral", "qwen_xml", "functionary", "deepseek_r1",
// "deepseek_dsml", "glm", "kimi_k2", "firefunction", "granite", "command_r", "command_r7b",
// "gigachat", "minimax_xml", "gemma4", "pythonic", "atem", "harmony",
// "solar", "kimi_k3" (shown in /props).
const char* tool_call_format_name(ToolCallFormat f);

// The syntax a chat template (its Jinja text) teaches; None when it has no tools section or
// one this parser does not read.
ToolCallFormat detect_tool_call_format(std::string_view template_text);

// The marker texts of a format (e.g. "[TOOL_CALLS]"). In some vocabularies they are control
// tokens, whose text generation drops unless told to keep it (GenParams::keep_special).
std::vector<std::string_view> tool_call_markers(ToolCallFormat f);

// The JSON types each tool's schema allows its parameters, read from OpenAI's tools list
// ([{"type": "function", "function": {"name", "parameters": {"properties": {..}}}}]): a
// property's "type" (a name or a list), the types of its "enum" / "const" values, the union of
// its "anyOf" / "oneOf", null too when "nullable". Malformed entries are skipped (the request
// was validated; a schema is not).
class ParamTypes {
 public:
  static constexpr uint8_t kString = 1, kNumber = 2, kInteger = 4, kBoolean = 8, kObject = 16,
                           kArray = 32, kNull = 64;
  ParamTypes() = default;
  explicit ParamTypes(const nlohmann::ordered_json& tools);
  // The types of `fn`'s parameter `param`; 0: not known (no such tool or property, or its
  // schema says no type, e.g. a $ref).
  uint8_t of(std::string_view fn, std::string_view param) const;
  // The types one property schema allows (0: not known).
  static uint8_t of_schema(const nlohmann::ordered_json& schema);
  // The type of a JSON value (an integer: kInteger | kNumber).
  static uint8_t of_value(const nlohmann::ordered_json& v);

 private:
  std::map<std::string, std::map<std::string, uint8_t, std::less<>>, std::less<>> types_;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ToolCallDelta {
  enum class Kind { Content, Begin, Arguments };
  Kind kind = Kind::Content;
  size_t index = 0;  // Begin / Arguments: the call's position in tool_calls
  std::string text;  // Content: text; Begin: the function name; Arguments: a fragment
  std::string id;    // Begin: the call id
};

namespace detail {
struct ScanMemo;
struct CallScan;
}  // namespace detail

class ToolCallParser {
 public:
  // parallel = false: only the first call is reported; later calls are dropped. `types`: the
  // request's tools' parameter types, for the XML-parameter formats.
  ToolCallParser(ToolCallFormat format, bool parallel, ParamTypes types = {});
  ~ToolCallParser();
  ToolCallParser(ToolCallParser&&) noexcept;
  ToolCallParser& operator=(ToolCallParser&&) noexcept;

  // Appends generated text (complete UTF-8); returns what can be sent now.
  std::vector<ToolCallDelta> push(std::string_view text);
  // End of generation: releases what is held; an unfinished call is malformed.
  std::vector<ToolCallDelta> finish();

  // The message so far (whole after finish()): content, and the calls reported.
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& calls() const { return calls_; }
  bool broken() const { return broken_; }

 private:
  void step(bool at_end, std::vector<ToolCallDelta>& out);
  bool step_content(bool at_end, std::vector<ToolCallDelta>& out);
  bool step_block(bool at_end, std::vector<ToolCallDelta>& out);
  void emit_content(size_t from, size_t to, std::vector<ToolCallDelta>& out);
  std::string new_id();
  std::string param_fragments(const detail::CallScan& c, size_t& sent) const;

  ToolCallFormat format_;
  bool parallel_;
  ParamTypes types_;
  std::string buf_;         // everything pushed
  size_t pos_ = 0;          // text before this is sent or dropped
  size_t search_from_ = 0;  // markers are looked for from here (past a marker that was no call)
  size_t block_at_ = 0;     // in_block_: where the call block starts
  bool in_block_ = false;
  bool closed_ = false;       // no call can start any more: the rest is content
  bool after_block_ = false;  // whitespace right after a call block is dropped
  // The calls of the current block that were begun: index in calls_ (npos: dropped, as
  // parallel_ is false), and how many bytes of the arguments were sent.
  std::vector<size_t> block_index_;
  std::vector<size_t> block_sent_;
  std::unique_ptr<detail::ScanMemo> memo_;  // the current block's scans, resumed per push
  std::string content_;
  std::vector<ToolCall> calls_;
  bool broken_ = false;
  bool finished_ = false;
  std::mt19937_64 rng_;
};

// A whole answer at once (push + finish).
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
  bool broken = false;
};
ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text, bool parallel,
                                 const ParamTypes& types = {});

}  // namespace minfer::server
