// Error policy (one per tier, see docs/ARCHITECTURE.md "Errors"):
//  * bad input (files, flags, requests)  -> throw minfer::Error with a kind and context
//                                           naming the file / field / value;
//  * internal invariants                 -> MINFER_ASSERT (always on, aborts with location);
//  * hot loops                           -> MINFER_DASSERT (compiled out in release).
// Ownership: an Error owns a copy of its message. Thread safety: stateless. Failure:
// MINFER_ASSERT prints the expression, file and line to stderr and calls std::abort (no
// unwinding). Cost: nothing on the success path (fail() formats only when it throws).
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace minfer {

enum class ErrorKind {
  InvalidFile,      // a file is malformed, truncated or hostile
  InvalidArgument,  // a flag, request or API argument is wrong
  Unsupported,      // well-formed but not implemented (e.g. unknown architecture)
  OutOfMemory,      // a plan or allocation does not fit
  Io,               // the OS refused (open, mmap, read)
  Internal,         // should not happen; a bug
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace minfer

// Always-on invariant check: a failure is a bug in minfer, never bad user input.
#define MINFER_ASSERT(cond, ...)                                                   \
  do {                                                                             \
    if (!(cond)) ::minfer::assert_fail(#cond, __FILE__, __LINE__, "" __VA_ARGS__); \
  } while (0)

#ifdef NDEBUG
#define MINFER_DASSERT(cond, ...) ((void)0)
#else
#define MINFER_DASSERT(cond, ...) MINFER_ASSERT(cond, __VA_ARGS__)
#endif
