// minfer-fuzz-libs: minfer_tokenizer
// libFuzzer target: every vocabulary in ../shared/vocab (SPM, Llama 3 BPE, Qwen2 BPE) over
// arbitrary bytes, plus the Qwen2 vocabulary under every other pre-tokenizer family and the
// SPM vocabulary recast as a gemma4-style BPE (character merges, byte fallback), so each
// regex and the non-byte-level BPE path see arbitrary input too. The first input byte picks the
// vocabulary and the options (with and without special-token parsing, with and without BOS); the
// rest is the text. Checks: every id is inside the vocabulary; detokenize and the streaming decoder
// take every id; nothing crashes (tokenize never throws for any bytes, per tokenizer.h).
//
// Seeds (MINFER_FUZZ_SEED_DIR): the llama.cpp test texts (*.inp) of ../shared/vocab, one seed
// per text and option byte, plus control-token strings of each vocabulary.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using namespace minfer;

std::vector<std::unique_ptr<tok::Tokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<tok::Tokenizer>> t;
  return t;
}

// Two-character SPM tokens whose characters are tokens become merges, by score.
std::vector<std::string> spm_pair_merges(const tok::Vocab& v) {
  std::vector<std::pair<float, std::string>> m;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& t = v.tokens[id];
    if (v.type_of(static_cast<tok::TokenId>(id)) != tok::TokenType::Normal || t.empty()) continue;
    const size_t n = tok::utf8_len_from_lead(static_cast<uint8_t>(t[0]));
    if (n >= t.size()) continue;
    const std::string_view a(t.data(), n), b(t.data() + n, t.size() - n);
    if (tok::utf8_len_from_lead(static_cast<uint8_t>(b[0])) != b.size()) continue;
    m.push_back({v.scores.empty() ? 0.0f : v.scores[id], std::string(a) + " " + std::string(b)});
  }
  std::stable_sort(m.begin(), m.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<std::string> out;
  for (auto& e : m) out.push_back(std::move(e.second));
  return out;
}

void add_recast_vocabularies() {
  const size_t n = tokenizers().size();
  for (size_t i = 0; i < n; ++i) {
    const tok::Vocab& v = tokenizers()[i]->vocab();
    if (v.type == tok::VocabType::Bpe && v.pre == tok::PreTokenizer::Qwen2) {
      for (tok::PreTokenizer pre :
           {tok::PreTokenizer::Default, tok::PreTokenizer::Gpt2, tok::PreTokenizer::Qwen35,
            tok::PreTokenizer::DeepseekLlm, tok::PreTokenizer::DeepseekCoder,
            tok::PreTokenizer::Falcon, tok::PreTokenizer::Starcoder}) {
        tok::Vocab w = v;
        w.pre = pre;
        tokenizers().push_back(std::make_unique<tok::Tokenizer>(std::move(w)));
      }
    } else if (v.type == tok::VocabType::Spm) {
      tok::Vocab w = v;
      w.type = tok::VocabType::Bpe;
      w.pre = tok::PreTokenizer::Gemma4;
      w.merges = spm_pair_merges(v);
      w.apply_type_defaults();
      tokenizers().push_back(std::make_unique<tok::Tokenizer>(std::move(w)));
    }
  }
}

void load() {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fuzz::shared_dir() / "vocab", ec))
    if (e.path().extension() == ".gguf") files.push_back(e.path());
  std::sort(files.begin(), files.end());  // a stable vocabulary index per option byte
  for (const auto& p : files) {
    const gguf::File f = gguf::File::open(p.string());
    tokenizers().push_back(std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_gguf(f)));
  }
  add_recast_vocabularies();
  if (tokenizers().empty()) {
    std::fprintf(stderr, "tokenizer_fuzz: no vocabularies under %s/vocab\n", MINFER_SHARED_DIR);
    std::abort();
  }
}

void write_seeds(const std::string& dir) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::error_code ec;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(fuzz::shared_dir() / "vocab", ec)) {
    if (e.path().extension() != ".inp") continue;
    const std::string all = fuzz::read_file(e.path());
    size_t pos = 0;
    while (pos <= all.size()) {
      size_t next = all.find(sep, pos);
      const std::string text = all.substr(pos, next == std::string::npos ? next : next - pos);
      for (char opt = 0; opt < 4; ++opt)
        fuzz::write_seed(dir, "text-" + std::to_string(n++), std::string(1, opt) + text);
      if (next == std::string::npos) break;
      pos = next + sep.size();
    }
  }
  for (const char* s : {"<|im_start|>user\nhi<|im_end|>", "<|begin_of_text|>hi<|eot_id|>",
                        "<s> [INST] hi [/INST]</s>", "\xff\xfe\xc3(\xe2\x82", "   \t\n\n  x"})
    for (char opt = 0; opt < 8; ++opt)
      fuzz::write_seed(dir, "special-" + std::to_string(n++), std::string(1, opt) + s);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) write_seeds(dir);
  load();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& all = tokenizers();
  const uint8_t opt = data[0];
  const tok::Tokenizer& tk = *all[(opt >> 2) % all.size()];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const tok::TokenizeOptions o{.add_special = (opt & 1) != 0, .parse_special = (opt & 2) != 0};
  const std::vector<tok::TokenId> ids = tk.tokenize(text, o);
  for (tok::TokenId id : ids)
    if (id < 0 || id >= tk.n_tokens()) std::abort();
  (void)tk.detokenize(ids);
  tok::StreamDecoder dec(tk);
  std::string piece;
  for (tok::TokenId id : ids) dec.push(id, piece);
  (void)dec.flush();
  return 0;
}
