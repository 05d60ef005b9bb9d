#include "common/error.h"

#include <cstdio>
#include <cstdlib>

namespace minfer {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidFile:
      return "invalid file";
    case ErrorKind::InvalidArgument:
      return "invalid argument";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::OutOfMemory:
      return "out of memory";
    case ErrorKind::Io:
      return "i/o error";
    case ErrorKind::Internal:
      return "internal error";
  }
  return "error";
}

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "minfer: internal invariant failed: %s at %s:%d%s%s\n", expr, file, line,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace minfer
