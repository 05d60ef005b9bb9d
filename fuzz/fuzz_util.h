// Shared by the libFuzzer targets in fuzz/: seed corpora written at run time.
//
// scripts/fuzz.sh sets MINFER_FUZZ_SEED_DIR to a target's corpus folder; the target's
// LLVMFuzzerInitialize then writes its seeds there (made from ../shared and the project's GGUF
// writer, so nothing large is committed) before fuzzing starts. Without the variable nothing is
// written (reproducing a crash: `fuzz_x crash-file`).
// Ownership: plain functions. Thread safety: call from LLVMFuzzerInitialize only. Failure: an
// unwritable folder is reported on stderr and skipped (fuzzing still runs from what exists).
// Cost: one file write per seed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace minfer::fuzz {

// The folder to write seeds into, or empty.
inline std::string seed_dir() {
  const char* d = std::getenv("MINFER_FUZZ_SEED_DIR");
  return d == nullptr ? std::string() : std::string(d);
}

inline void write_seed(const std::string& dir, const std::string& name, std::string_view bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(std::filesystem::path(dir) / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::fprintf(stderr, "fuzz: cannot write seed %s/%s\n", dir.c_str(), name.c_str());
}

inline void write_seed(const std::string& dir, const std::string& name,
                       const std::vector<uint8_t>& bytes) {
  write_seed(dir, name,
             std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::filesystem::path shared_dir() {
  return std::filesystem::path(MINFER_SHARED_DIR);
}

}  // namespace minfer::fuzz
