// The typed error of the Jinja interpreter. Every failure of parsing or rendering a template is a
// TemplateError, a minfer::Error, so callers that only know minfer::Error still print it.
//
// kind() (the minfer ErrorKind): Syntax -> InvalidFile (the template text is malformed);
// Limit -> OutOfMemory (a sandbox limit was hit); everything else -> InvalidArgument (the
// template refused this conversation, or used a value the wrong way).
// template_kind() says which: Raised is the template's own raise_exception(msg), and message()
// is then exactly msg, for a server to return to its client.
// Ownership: owns copies of its strings. Thread safety: immutable. Cost: only when thrown.
#pragma once

#include <string>

#include <fmt/format.h>

#include "common/error.h"

namespace minfer::tmpl {

enum class TemplateErrorKind {
  Syntax,       // the template text does not parse (line and column set)
  Raised,       // raise_exception(msg) was called
  Undefined,    // an undefined value was used (attribute of undefined, arithmetic on it, ...)
  Type,         // a Python TypeError / ValueError (len of a number, '<' between str and int)
  Security,     // the sandbox refused (mutating a list in the immutable sandbox, file access)
  Limit,        // a Limits bound was hit (output size, loop iterations, recursion)
  Unsupported,  // well-formed Jinja this interpreter does not implement (unknown filter, tag)
};

const char* template_error_kind_name(TemplateErrorKind kind);

class TemplateError : public Error {
 public:
  // line/column 1-based; 0 when unknown (the evaluator fills them in as the error unwinds).
  TemplateError(TemplateErrorKind kind, std::string message, int line = 0, int column = 0);

  TemplateErrorKind template_kind() const { return tkind_; }
  const std::string& message() const { return message_; }  // without the location
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  TemplateErrorKind tkind_;
  std::string message_;
  int line_;
  int column_;
};

template <typename... Args>
[[noreturn]] void throw_error(TemplateErrorKind kind, fmt::format_string<Args...> f,
                              Args&&... args) {
  throw TemplateError(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace minfer::tmpl
