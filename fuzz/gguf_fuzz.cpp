// minfer-fuzz-libs: minfer_tokenizer minfer_graph
// minfer-fuzz-sources: src/model/hparams.cpp src/model/weights.cpp src/model/support.cpp src/model/hparams_gemma.cpp
// libFuzzer target: the GGUF reader, then what a model load does with a file that parsed:
// hyperparameters, every weight located and shape-checked, the tokenizer built from the
// vocabulary. Every byte of every tensor is read once (a tensor that passed validation must lie
// inside the image). Any minfer::Error is a clean rejection; a crash, a sanitizer report, a
// leak or an allocation past -rss_limit_mb is a finding.
//
// Seeds (MINFER_FUZZ_SEED_DIR, see fuzz_util.h): tiny llama / qwen2 / qwen3 models (f32, q8_0,
// f16; tied and untied) from the project's writer, and vocabulary-only files cut from
// ../shared/vocab (SPM and BPE, first tokens and merges).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/weights.h"
#include "tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace minfer;

// A vocabulary-only GGUF holding the first `n` tokens (and merges) of a shared vocab file.
std::vector<uint8_t> cut_vocab(const gguf::File& f, size_t n) {
  gguf::Writer w;
  for (const auto& [key, v] : f.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0 || key == "tokenizer.chat_template") continue;
    gguf::Value c = v;
    if (c.type == gguf::ValueType::Array) {
      if (c.strings.size() > n) c.strings.resize(n);
      if (c.floats.size() > n) c.floats.resize(n);
      if (c.ints.size() > n) c.ints.resize(n);
    }
    if (key.find("_token_id") != std::string::npos) continue;  // may point past the cut
    w.set(key, c);
  }
  return w.to_bytes();
}

void write_seeds(const std::string& dir) {
  int i = 0;
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    for (GgmlType t : {GgmlType::F32, GgmlType::Q8_0, GgmlType::F16}) {
      testing::TinySpec s;
      s.arch = arch;
      s.n_embd = 32;
      s.n_layer = 1;
      s.n_head = 2;
      s.n_head_kv = 1;
      s.n_ff = 32;
      s.n_vocab = 8;
      s.wtype = t;
      s.tied = (i % 2) == 1;
      fuzz::write_seed(dir, "tiny-" + std::to_string(i++) + ".gguf", testing::make_tiny_model(s));
    }
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fuzz::shared_dir() / "vocab", ec)) {
    if (e.path().extension() != ".gguf") continue;
    try {
      const gguf::File f = gguf::File::open(e.path().string());
      fuzz::write_seed(dir, "vocab-" + e.path().stem().string() + ".gguf", cut_vocab(f, 64));
    } catch (const Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A fresh heap copy: new[] is 16-byte aligned, as the reader requires of in-memory images.
  std::vector<uint8_t> bytes(data, data + size);
  try {
    const gguf::File f = gguf::File::from_memory(bytes.data(), bytes.size(), "fuzz.gguf");
    volatile uint8_t sink = 0;
    for (const gguf::TensorInfo& t : f.tensors()) {
      uint8_t x = 0;
      for (uint64_t k = 0; k < t.n_bytes; ++k) x ^= t.data[k];
      sink = sink ^ x;
    }
    try {
      const tok::Tokenizer tk = tok::Tokenizer::from_gguf(f);
      const auto ids =
          tk.tokenize("Hello world <|im_start|> 123", {.add_special = true, .parse_special = true});
      (void)tk.detokenize(ids);
    } catch (const Error&) {
    }
    const HParams hp = HParams::from_gguf(f);
    (void)hp.describe();
    const ModelWeights w = ModelWeights::load(f, hp);
    (void)w.total_bytes();
    (void)w.n_params();
  } catch (const Error&) {
    // A clean rejection.
  }
  return 0;
}
