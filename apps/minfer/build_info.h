// What `minfer --version` prints: the project version (CMakeLists.txt) and the git commit the
// binary was built from ("unknown" outside a git checkout, "-dirty" with local changes). The
// definitions are generated at build time by cmake/BuildInfo.cmake. Immutable; thread-safe.
#pragma once

namespace minfer::app {

extern const char* const kVersion;
extern const char* const kCommit;

// "minfer 0.1.0 (commit abc123), SIMD avx2, CPU backend": one line, as llama.cpp's --version.
void print_version();

}  // namespace minfer::app
