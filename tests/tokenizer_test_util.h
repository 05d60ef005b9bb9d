// Test helper: llama.cpp's tokenizer test vectors (X.gguf.inp / X.gguf.out), shared by
// tokenizer_test.cpp and tokenizer_vocab_test.cpp. Header-only; gtest failures are reported
// through ADD_FAILURE.
//
// Format: the .inp file is the cases, each followed by "\n__ggml_vocab_test__\n" (a case may be
// empty or hold newlines); the .out file has one line per case, each id preceded by a space.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace minfer::tok {

struct VocabCase {
  std::string text;
  std::vector<TokenId> expected;
};

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<VocabCase> read_cases(const std::filesystem::path& inp,
                                         const std::filesystem::path& outp) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  const std::string in = read_all(inp);
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < in.size();) {
    size_t end = in.find(sep, pos);
    if (end == std::string::npos) break;  // everything after the last separator is not a case
    texts.push_back(in.substr(pos, end - pos));
    pos = end + sep.size();
  }
  std::istringstream out(read_all(outp));
  std::vector<VocabCase> cases;
  std::string line;
  for (const std::string& t : texts) {
    if (!std::getline(out, line)) ADD_FAILURE() << outp << " has fewer lines than cases";
    VocabCase c{t, {}};
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) c.expected.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

// " 1 2 3", as in the .out files.
inline std::string ids_str(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

}  // namespace minfer::tok
