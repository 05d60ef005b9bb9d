// Test helper: run a shell command line (a `minfer ...` invocation the test builds) and capture
// its stdout and stderr apart, for the CLI tests. Header-only, POSIX (popen).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace minfer::test {

struct CliResult {
  int status = -1;  // exit status; -1 when the command did not exit normally
  std::string out, err;
};

// Runs `cmd` through sh with stderr sent to a temporary file (named by `tag` and the pid).
inline CliResult run_captured(const std::string& cmd, const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path err_file =
      fs::temp_directory_path() / ("minfer_" + tag + "_err_" + std::to_string(::getpid()));
  CliResult r;
  FILE* p = ::popen((cmd + " 2>" + err_file.string()).c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  fs::remove(err_file);
  return r;
}

}  // namespace minfer::test
