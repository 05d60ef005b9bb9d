// Jinja2 chat templates, rendered the way Hugging Face transformers' apply_chat_template does:
// an immutable sandboxed Jinja2 environment with trim_blocks, lstrip_blocks, the loopcontrols
// extension (break / continue), a {% generation %} tag that renders its body unchanged, tojson
// as Python's json.dumps (", " / ": " separators, ensure_ascii=False), and the globals
// raise_exception(msg) and strftime_now(fmt). Values follow Python's semantics (value.h).
//
// Use: Template t = Template::parse(text);  std::string s = t.render(context_json);
//      or render_chat_template(text, context_json) for a one-off.
// `context` is a JSON object whose members become the template's variables: for chat templates
// messages, add_generation_prompt, bos_token, eos_token and, where present, tools.
// Prefer nlohmann::ordered_json: tojson prints objects in the context's member order, and
// nlohmann::json sorts its members.
//
// Ownership: a Template owns its parsed tree (shared, immutable); copies are cheap and share
// it. render() returns a new string and keeps nothing of the context.
// Thread safety: a parsed Template is immutable; render() is const and may run concurrently
// on one Template from many threads (each render has its own scopes and values).
// Failure modes: every failure is a TemplateError (template_error.h), a minfer::Error:
//   * parse: Syntax with line and column (unknown tag, unclosed block, bad token), or
//     Unsupported (include/import/extends: no loader in the sandbox);
//   * render: Raised (the template's raise_exception(msg); message() is msg), Undefined
//     (attribute of an undefined value, ...), Type (Python's TypeError/ValueError), Security
//     (the immutable sandbox refuses list.append and friends), Limit (RenderLimits), and
//     Unsupported (a filter or test this interpreter lacks). Runtime errors carry the line and
//     column of the innermost expression or statement that failed.
// Cost: parse is linear in the template's size (one tree, ~one allocation per node); render is
// a tree walk, linear in the work the template does: a 20-turn conversation through the
// Qwen 2.5 template takes tens of microseconds (bench/template_bench.cpp). Memory and time of
// one render are bounded by RenderLimits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "template/template_error.h"
#include "template/value.h"

namespace minfer::tmpl {

// Sandbox bounds of one render; exceeding one is TemplateError(Limit).
struct RenderLimits {
  size_t max_output_bytes = 64u << 20;       // the rendering, and any one string built on the way
  int64_t max_loop_iterations = 10'000'000;  // all loops (and range()) of one render together
  int max_call_depth = 100;                  // nested macro / caller calls
  int max_depth = 1000;  // nested statements + expressions being evaluated (C++ stack depth)
};

struct TemplateOptions {
  bool trim_blocks = true;    // HF: drop the first newline after a block tag
  bool lstrip_blocks = true;  // HF: strip spaces/tabs before a block tag on its line
  // HF renders in jinja2's ImmutableSandboxedEnvironment: list.append, dict.update etc. are
  // SecurityErrors. false allows them (plain Jinja2 behaviour).
  bool immutable = true;
  int max_nesting = 256;  // parse: deepest nesting of blocks / expressions
  RenderLimits limits;
};

struct Program;  // the parsed tree (ast.h), internal

class Template {
 public:
  // Throws TemplateError(Syntax or Unsupported).
  static Template parse(std::string_view source, const TemplateOptions& options = {});

  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;
  // The context as a Value (a dict); the lowest-level entry point.
  std::string render_value(const Value& context) const;

  const TemplateOptions& options() const;

 private:
  std::shared_ptr<const Program> program_;
};

// Parse + render once.
std::string render_chat_template(std::string_view template_src,
                                 const nlohmann::ordered_json& context,
                                 const TemplateOptions& options = {});
std::string render_chat_template(std::string_view template_src, const nlohmann::json& context,
                                 const TemplateOptions& options = {});

}  // namespace minfer::tmpl
