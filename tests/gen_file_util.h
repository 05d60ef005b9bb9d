// A `minfer gen` preset written to a temp file for one test, removed at scope exit.
// Weights are drawn with std 0.1 (the tiny presets' logits stay well-conditioned); the file
// name carries the preset, the type and the pid, so parallel ctest processes never share one.
// Cost: one generate() call (a few ms for the tiny presets). Not thread-safe to share.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gen/gen.h"

namespace minfer::test {

struct GenFile {
  // `vocab`: a GGUF whose tokenizer the model gets (gen::GenOptions::vocab_path); its file
  // name's stem joins the temp file's name.
  explicit GenFile(const std::string& preset, const std::string& type = "f32",
                   const std::string& vocab = "") {
    const std::string tag = vocab.empty() ? "" : "_" + std::filesystem::path(vocab).stem().string();
    path =
        (std::filesystem::temp_directory_path() / ("minfer_genfile_" + preset + "_" + type + tag +
                                                   "_" + std::to_string(::getpid()) + ".gguf"))
            .string();
    gen::GenOptions o;
    o.preset = preset;
    o.type = type;
    o.vocab_path = vocab;
    o.out_path = path;
    o.n_threads = 2;
    o.weight_std = 0.1f;
    gen::generate(o);
  }
  ~GenFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  GenFile(const GenFile&) = delete;
  GenFile& operator=(const GenFile&) = delete;
  std::string path;
};

}  // namespace minfer::test
