#include "template/template_error.h"

namespace minfer::tmpl {

namespace {

ErrorKind base_kind(TemplateErrorKind k) {
  switch (k) {
    case TemplateErrorKind::Syntax:
      return ErrorKind::InvalidFile;
    case TemplateErrorKind::Limit:
      return ErrorKind::OutOfMemory;
    case TemplateErrorKind::Unsupported:
      return ErrorKind::Unsupported;
    default:
      return ErrorKind::InvalidArgument;
  }
}

std::string located(TemplateErrorKind k, const std::string& msg, int line, int col) {
  std::string where = line > 0 ? fmt::format(" at line {}, column {}", line, col) : "";
  return fmt::format("template {}{}: {}", template_error_kind_name(k), where, msg);
}

}  // namespace

const char* template_error_kind_name(TemplateErrorKind kind) {
  switch (kind) {
    case TemplateErrorKind::Syntax:
      return "syntax error";
    case TemplateErrorKind::Raised:
      return "raised an exception";
    case TemplateErrorKind::Undefined:
      return "undefined value";
    case TemplateErrorKind::Type:
      return "type error";
    case TemplateErrorKind::Security:
      return "security error";
    case TemplateErrorKind::Limit:
      return "limit exceeded";
    case TemplateErrorKind::Unsupported:
      return "unsupported";
  }
  return "error";
}

TemplateError::TemplateError(TemplateErrorKind kind, std::string message, int line, int column)
    : Error(base_kind(kind), located(kind, message, line, column)),
      tkind_(kind),
      message_(std::move(message)),
      line_(line),
      column_(column) {}

}  // namespace minfer::tmpl
