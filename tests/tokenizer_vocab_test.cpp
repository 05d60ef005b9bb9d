// minfer-test-libs: minfer_tokenizer minfer_gguf minfer_common
//
// llama.cpp's own vocabulary files (its models/ggml-vocab-*.gguf) with their test vectors
// (.gguf.inp / .gguf.out, made by llama.cpp from each model's Hugging Face tokenizer): every
// BPE and SPM pre-tokenizer they use must give the same ids. One test instance per vocabulary,
// so each ctest process loads one file.
//
// Where the files come from (first found wins), and why:
//  1. $MINFER_LLAMACPP_VOCAB_DIR, else $MINFER_LLAMACPP_CACHE/src/models, else
//     ~/.cache/minfer/llamacpp/src/models: the llama.cpp source that bench/llamacpp-fetch.sh
//     clones. All 17 files (about 75 MB) are there; too big to commit.
//  2. ../shared/vocab (MINFER_SHARED_DIR): llama-bpe, llama-spm, qwen2.
//  3. tests/data/vocab/ggml-vocab-NAME.gguf.xz with the vectors beside it: xz copies of the
//     small files (3.8 MB in all), so CI checks them without the network. Fetching the npm
//     package in CI instead would need the network and a 35 MB download per run.
//  4. Derived: qwen35's file is qwen2's with only tokenizer.ggml.pre changed, and gpt-neox's
//     tokenizer is mpt's without a pre key (checked byte for byte against llama.cpp's files),
//     so those two are the shared/committed file with the pre-tokenizer replaced.
// command-r (2.5 MB as xz), gemma-4 (3.1 MB) and aquila (1 MB) would take the committed data
// past 5 MB: they run only where the llama.cpp source is, and skip with a message elsewhere.
// bert-bge (WordPiece) and nomic-bert-moe (Unigram) must be refused with a message naming the
// tokenizer kind.
//
// Decompression runs `xz -dc` (xz-utils, scripts/deps.sh) into memory; the command-line check
// writes the bytes to a temporary file that it deletes.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "cli_test_util.h"
#include "common/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace minfer::tok {
namespace {

namespace fs = std::filesystem;

enum class Expect { Vectors, LoadsOnly, Refused };

struct VocabSpec {
  const char* name;  // ggml-vocab-NAME.gguf
  Expect expect;
  const char* derive_from = nullptr;  // another NAME whose file serves, with `pre` replaced
  const char* pre = nullptr;          // tokenizer.ggml.pre for the derived vocabulary
};

constexpr VocabSpec kVocabs[] = {
    {"aquila", Expect::LoadsOnly},
    {"baichuan", Expect::LoadsOnly},
    {"bert-bge", Expect::Refused},
    {"command-r", Expect::Vectors},
    {"deepseek-coder", Expect::Vectors},
    {"deepseek-llm", Expect::Vectors},
    {"falcon", Expect::Vectors},
    {"gemma-4", Expect::Vectors},
    {"gpt-2", Expect::Vectors},
    {"gpt-neox", Expect::LoadsOnly, "mpt", "default"},
    {"llama-bpe", Expect::Vectors},
    {"llama-spm", Expect::Vectors},
    {"mpt", Expect::Vectors},
    {"nomic-bert-moe", Expect::Refused},
    {"phi-3", Expect::Vectors},
    {"qwen2", Expect::Vectors},
    {"qwen35", Expect::Vectors, "qwen2", "qwen35"},
    {"refact", Expect::Vectors},
    {"starcoder", Expect::Vectors},
};

// gtest prints the parameter in test names and ctest's list: the name, not the bytes.
void PrintTo(const VocabSpec& spec, std::ostream* os) {
  *os << spec.name;
}

fs::path llamacpp_models_dir() {
  if (const char* d = std::getenv("MINFER_LLAMACPP_VOCAB_DIR")) return d;
  if (const char* c = std::getenv("MINFER_LLAMACPP_CACHE")) return fs::path(c) / "src" / "models";
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "/nonexistent") / ".cache/minfer/llamacpp/src/models";
}

fs::path committed_dir() {
  return fs::path(MINFER_TEST_DATA_DIR) / "vocab";
}

std::string file_name(std::string_view name) {
  return "ggml-vocab-" + std::string(name) + ".gguf";
}

// A vocabulary file's bytes and where its vectors are.
struct Found {
  std::string bytes;
  fs::path vectors_dir;                // holds NAME.gguf.inp / .out (may lack them)
  std::string origin;                  // for messages
  const char* pre_override = nullptr;  // derived: the tokenizer.ggml.pre to use instead
};

std::optional<std::string> xz_decompress(const fs::path& xz) {
  FILE* p = popen(("xz -dc '" + xz.string() + "' 2>/dev/null").c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[1 << 16];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (pclose(p) != 0) return std::nullopt;
  return out;
}

std::optional<Found> find_file(std::string_view name) {
  const std::string fname = file_name(name);
  for (const fs::path& dir : {llamacpp_models_dir(), fs::path(MINFER_SHARED_DIR) / "vocab"}) {
    if (fs::exists(dir / fname)) return Found{read_all(dir / fname), dir, (dir / fname).string()};
  }
  const fs::path xz = committed_dir() / (fname + ".xz");
  if (fs::exists(xz)) {
    auto bytes = xz_decompress(xz);
    if (!bytes) ADD_FAILURE() << "xz -dc " << xz << " failed (is xz-utils installed?)";
    if (bytes) return Found{std::move(*bytes), committed_dir(), xz.string()};
  }
  return std::nullopt;
}

// The spec's vocabulary: its own file, or the file it derives from with `pre` replaced. The
// vectors always come from the spec's own name.
std::optional<Found> find_vocab(const VocabSpec& spec) {
  if (auto f = find_file(spec.name)) return f;
  if (!spec.derive_from) return std::nullopt;
  auto f = find_file(spec.derive_from);
  if (!f) return std::nullopt;
  f->origin += std::string(" with tokenizer.ggml.pre = '") + spec.pre + "'";
  f->pre_override = spec.pre;
  if (!fs::exists(f->vectors_dir / (file_name(spec.name) + ".inp"))) {
    f->vectors_dir = committed_dir();
  }
  return f;
}

Tokenizer load(const Found& f) {
  auto file = gguf::File::from_memory(reinterpret_cast<const uint8_t*>(f.bytes.data()),
                                      f.bytes.size(), f.origin);
  Vocab v = Vocab::from_gguf(file);
  // Only the pre-tokenizer differs in the derived files (see the top of this file), and
  // neither mpt -> default nor qwen2 -> qwen35 changes a flag that depends on it.
  if (f.pre_override) v.pre = pre_tokenizer_from_name(f.pre_override);
  return Tokenizer(std::move(v));
}

std::string skip_message(const VocabSpec& spec) {
  return file_name(spec.name) + " not found in " + llamacpp_models_dir().string() + ", " +
         MINFER_SHARED_DIR + "/vocab or " + committed_dir().string() +
         " (bench/llamacpp-fetch.sh brings llama.cpp's models/; see docs/TOKENIZER.md)";
}

const TokenizeOptions kRaw{.add_special = false, .parse_special = false};

class LlamaCppVocab : public ::testing::TestWithParam<VocabSpec> {};

TEST_P(LlamaCppVocab, PassesEveryVectorOrIsRefusedByName) {
  const VocabSpec& spec = GetParam();
  const auto found = find_vocab(spec);
  if (!found) GTEST_SKIP() << skip_message(spec);

  if (spec.expect == Expect::Refused) {
    try {
      load(*found);
      ADD_FAILURE() << spec.name << " loaded; expected a refusal naming tokenizer.ggml.model";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos) << e.what();
    }
    return;
  }
  const Tokenizer tk = load(*found);
  if (spec.expect == Expect::LoadsOnly) {
    // No vectors: it must load, tokenize mixed text into known ids and give the text back.
    const std::string text =
        "Hello world!  It's 2024: 12345 apples,\n\n\tcafé naïve — 你好世界 🦙 🙂 "
        "x+y<=z";
    const auto ids = tk.tokenize(text, kRaw);
    ASSERT_FALSE(ids.empty());
    for (TokenId id : ids) ASSERT_TRUE(id >= 0 && id < tk.n_tokens()) << id;
    EXPECT_LT(ids.size(), text.size());
    EXPECT_EQ(tk.detokenize(ids), text) << found->origin;
    std::printf("[ %s ] loads and round-trips (%zu ids) from %s\n", spec.name, ids.size(),
                found->origin.c_str());
    return;
  }

  const std::string stem = file_name(spec.name);
  const auto cases =
      read_cases(found->vectors_dir / (stem + ".inp"), found->vectors_dir / (stem + ".out"));
  ASSERT_FALSE(cases.empty()) << "no vectors for " << stem << " in " << found->vectors_dir;
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto got = tk.tokenize(cases[i].text, kRaw);
    EXPECT_EQ(got, cases[i].expected)
        << stem << " case " << i << " text '" << cases[i].text
        << "'\n  expected:" << ids_str(cases[i].expected) << "\n  actual:  " << ids_str(got);
    passed += got == cases[i].expected;
  }
  // The count docs/TOKENIZER.md records.
  const char* kind =
      tk.vocab().type == VocabType::Spm ? "SentencePiece" : pre_tokenizer_name(tk.vocab().pre);
  std::printf("[ %s ] %zu/%zu vectors pass (%s) from %s\n", spec.name, passed, cases.size(), kind,
              found->origin.c_str());
}

// `minfer tokenize --ids --no-bos -f CASE` must print the same ids, for the first case, one
// with newlines and the longest (each run loads the whole vocabulary, so not all of them).
TEST_P(LlamaCppVocab, CommandLineAgrees) {
  const VocabSpec& spec = GetParam();
  if (spec.expect != Expect::Vectors) GTEST_SKIP() << spec.name << " has no vectors";
  if (!fs::exists(MINFER_BINARY)) GTEST_SKIP() << "minfer binary not built: " << MINFER_BINARY;
  // Decided before reading anything: loading a 150k-token file only to skip costs a second.
  const std::string stem = file_name(spec.name);
  if (!fs::exists(llamacpp_models_dir() / stem)) {
    if (fs::exists(fs::path(MINFER_SHARED_DIR) / "vocab" / stem)) {
      GTEST_SKIP() << "TokenizerVectors.CommandLineAgrees (tokenizer_test) covers " << stem;
    }
    if (spec.derive_from && !fs::exists(committed_dir() / (stem + ".xz"))) {
      GTEST_SKIP() << stem << " would be derived from another file: no file to run on";
    }
  }
  const auto found = find_vocab(spec);
  if (!found) GTEST_SKIP() << skip_message(spec);

  const auto cases =
      read_cases(found->vectors_dir / (stem + ".inp"), found->vectors_dir / (stem + ".out"));
  ASSERT_FALSE(cases.empty());
  const fs::path tmp = fs::temp_directory_path() / ("minfer_vocab_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  const fs::path model = tmp / stem;
  { std::ofstream(model, std::ios::binary) << found->bytes; }
  size_t with_newline = 0, longest = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!with_newline && cases[i].text.find('\n') != std::string::npos) with_newline = i;
    if (cases[i].text.size() > cases[longest].text.size()) longest = i;
  }
  for (size_t i : {size_t{0}, with_newline, longest}) {
    const fs::path text_file = tmp / "case.txt";
    { std::ofstream(text_file, std::ios::binary) << cases[i].text; }
    const std::string cmd = std::string(MINFER_BINARY) + " tokenize --ids --no-bos -m '" +
                            model.string() + "' -f '" + text_file.string() + "'";
    const test::CliResult r = test::run_captured(cmd, "vocab");
    EXPECT_EQ(r.status, 0) << cmd << "\n" << r.err;
    std::string want = ids_str(cases[i].expected);
    if (!want.empty()) want.erase(0, 1);  // .out lines have a leading space; --ids does not
    EXPECT_EQ(r.out, want + "\n") << stem << " case " << i << ": " << cmd;
  }
  fs::remove_all(tmp);
}

// llama.cpp's control tokens (count) and end-of-generation ids per file, as its loader leaves
// them after its by-name rules (Vocab::apply_llama_cpp_special_rules): read with a throwaway
// program linked against llama.cpp 80fb11ac (llama_vocab_get_attr / llama_vocab_is_eog on
// each file loaded vocab_only, 2 Dec 2026). Before those rules minfer differed on 7 files:
// aquila and qwen2/qwen35 (a normal-type <|endoftext|> / "</s>" is control and ends
// generation), phi-3 (user-defined </s>), deepseek-coder (FIM markers), gemma-4
// (<|tool_response>) and command-r (<PAD>, found as the FIM pad, ends generation).
struct SpecialExpect {
  const char* name;
  int n_control;
  const char* eog;  // ids_str() of the end-of-generation ids
};
constexpr SpecialExpect kSpecialExpect[] = {
    {"aquila", 9, " 0 100007"},
    {"baichuan", 2, " 2"},
    {"command-r", 9, " 0 255001"},
    {"deepseek-coder", 5, " 32014"},
    {"deepseek-llm", 2, " 100001"},
    {"falcon", 12, " 11"},
    {"gemma-4", 18, " 1 50 106"},
    {"gpt-2", 1, " 50256"},
    {"gpt-neox", 2, " 0"},
    {"llama-bpe", 256, " 128001 128009"},
    {"llama-spm", 2, " 2"},
    {"mpt", 2, " 0"},
    {"phi-3", 14, " 2 32000 32007"},
    {"qwen2", 4, " 128247 151643 151645"},
    {"qwen35", 4, " 128247 151643 151645"},
    {"refact", 19, " 0 4 18"},
    {"starcoder", 38, " 0 4"},
};

TEST_P(LlamaCppVocab, ControlTokensAndEndOfGenerationMatchLlamaCpp) {
  const VocabSpec& spec = GetParam();
  if (spec.expect == Expect::Refused) GTEST_SKIP() << "refused";
  const auto found = find_vocab(spec);
  if (!found) GTEST_SKIP() << skip_message(spec);
  const SpecialExpect* want = nullptr;
  for (const SpecialExpect& e : kSpecialExpect)
    if (std::string_view(e.name) == spec.name) want = &e;
  ASSERT_NE(want, nullptr) << "no expectation for " << spec.name;
  const Tokenizer tk = load(*found);
  int n_control = 0;
  for (TokenId id = 0; id < tk.n_tokens(); ++id)
    n_control += tk.vocab().type_of(id) == TokenType::Control;
  EXPECT_EQ(n_control, want->n_control) << spec.name;
  EXPECT_EQ(ids_str(tk.eog_ids()), want->eog) << spec.name;
}

// Phi-3's </s> (id 2) is user-defined in the file; llama.cpp makes it control and stops on it,
// so without parse_special its text is ordinary text, and <|end|> / <|endoftext|> end
// generation while <|user|> does not. Ids from llama.cpp's llama_tokenize on this file
// (same throwaway program).
TEST(Phi3Vocab, EndMarkersAreControlAndEndGeneration) {
  const auto found = find_vocab({"phi-3", Expect::Vectors});
  if (!found) GTEST_SKIP() << "no ggml-vocab-phi-3.gguf";
  const Tokenizer tk = load(*found);
  const TokenId s_end = tk.find_token("</s>"), end = tk.find_token("<|end|>"),
                user = tk.find_token("<|user|>"), eot = tk.find_token("<|endoftext|>");
  EXPECT_EQ(s_end, 2);
  EXPECT_EQ(tk.vocab().type_of(s_end), TokenType::Control);
  EXPECT_TRUE(tk.is_eog(s_end));
  EXPECT_TRUE(tk.is_eog(end));
  EXPECT_TRUE(tk.is_eog(eot));
  EXPECT_FALSE(tk.is_eog(user));
  const TokenizeOptions special{.add_special = false, .parse_special = true};
  EXPECT_EQ(ids_str(tk.tokenize("a</s>   b", kRaw)), " 263 829 29879 29958 259 289");
  EXPECT_EQ(ids_str(tk.tokenize("a</s>   b", special)), " 263 2 289");
  EXPECT_EQ(ids_str(tk.tokenize("x<|end|>y<|user|>z", kRaw)),
            " 921 29966 29989 355 29989 29958 29891 29966 29989 1792 29989 29958 29920");
  EXPECT_EQ(ids_str(tk.tokenize("x<|end|>y<|user|>z", special)), " 921 32007 343 32010 503");
  // Control tokens render only when asked.
  EXPECT_EQ(tk.detokenize(std::vector<TokenId>{263, s_end}), "a");
  EXPECT_EQ(tk.detokenize(std::vector<TokenId>{263, s_end}, {.render_special = true}), "a</s>");
}

// Phi-3: llama.cpp gives every special token of a model named "phi3" / "phi-3" (general.name,
// "Phi3" in this file) the RSTRIP attribute except <unk>, <s> and <|endoftext|>: the
// whitespace after such a token is dropped before the text after it is tokenized (a chat
// template's "<|user|>\n" newline never becomes a token). Expected ids checked against
// llama.cpp's llama_tokenize on this file (docs/TOKENIZER.md).
TEST(Phi3Vocab, SpecialTokensStripTheWhitespaceAfterThem) {
  const auto found = find_vocab({"phi-3", Expect::Vectors});
  if (!found) GTEST_SKIP() << "no ggml-vocab-phi-3.gguf";
  const Tokenizer tk = load(*found);
  const Vocab& v = tk.vocab();
  const TokenId user = tk.find_token("<|user|>"), end = tk.find_token("<|end|>"),
                assistant = tk.find_token("<|assistant|>"), eot = tk.find_token("<|endoftext|>"),
                eos2 = tk.find_token("</s>");
  ASSERT_TRUE(user >= 0 && end >= 0 && assistant >= 0 && eot >= 0 && eos2 >= 0);
  EXPECT_EQ(v.strip_of(user), Vocab::kRstrip);
  EXPECT_EQ(v.strip_of(eos2), Vocab::kRstrip);
  EXPECT_EQ(v.strip_of(eot), 0);
  EXPECT_EQ(v.strip_of(tk.find_token("<s>")), 0);
  EXPECT_EQ(v.strip_of(tk.find_token("<unk>")), 0);
  EXPECT_EQ(v.strip_of(tk.find_token("\xe2\x96\x81Hello")), 0);  // ordinary tokens: none

  const TokenizeOptions special{.add_special = false, .parse_special = true};
  const std::string chat = "<|user|>\n  Hello<|end|>\n<|assistant|>\t\n";
  auto hello = tk.tokenize("Hello", kRaw);  // SPM: "▁Hello" after a special token, as at the start
  std::vector<TokenId> want = {user};
  want.insert(want.end(), hello.begin(), hello.end());
  want.insert(want.end(), {end, assistant});
  const auto got = tk.tokenize(chat, special);
  EXPECT_EQ(got, want) << ids_str(got);
  // llama.cpp's ids for the same call (its llama_tokenize, parse_special, no BOS; checked with
  // a throwaway program linked against llama.cpp 80fb11ac, 1 Dec 2026).
  EXPECT_EQ(ids_str(got), " 32010 15043 32007 32001");
  // <|endoftext|> keeps the whitespace after it.
  const auto kept = tk.tokenize("<|endoftext|>\nHi", special);
  ASSERT_GE(kept.size(), 2u);
  EXPECT_EQ(kept[0], eot);
  EXPECT_NE(kept, (std::vector<TokenId>{eot, tk.tokenize("Hi", kRaw)[0]}));
  // </s> strips too (llama.cpp: "a</s>   b" -> 263 2 289 with parse_special).
  EXPECT_EQ(ids_str(tk.tokenize("a</s>   b", special)), " 263 2 289");
  // The control: the same vocabulary without the attributes keeps the whitespace as tokens.
  Vocab plain = v;
  plain.strip.clear();
  const Tokenizer tk_plain(std::move(plain));
  EXPECT_NE(tk_plain.tokenize(chat, special), want);
  // The rule follows general.name: another name sets nothing.
  Vocab other = v;
  other.strip.clear();
  other.apply_llama_cpp_strip_rules("Llama-2-7b", "llama", "default");
  EXPECT_TRUE(other.strip.empty());
  other.apply_llama_cpp_strip_rules("Phi-3-mini-4k-instruct", "phi3", "default");
  EXPECT_EQ(other.strip_of(user), Vocab::kRstrip);
}

INSTANTIATE_TEST_SUITE_P(Files, LlamaCppVocab, ::testing::ValuesIn(kVocabs),
                         [](const ::testing::TestParamInfo<VocabSpec>& info) {
                           std::string n = info.param.name;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace minfer::tok
