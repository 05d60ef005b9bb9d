#include "tokenizer/vocab.h"

#include <cctype>
#include <initializer_list>

#include <cmath>

#include "common/error.h"
#include "gguf/gguf.h"

namespace minfer::tok {

VocabType vocab_type_from_name(std::string_view name) {
  if (name == "llama") return VocabType::Spm;
  if (name == "gpt2" || name == "gemma4") return VocabType::Bpe;
  // Name the kind of tokenizer so the user knows what is missing, not just that it is.
  std::string_view kind = "unknown kind";
  if (name == "bert") kind = "WordPiece";
  if (name == "t5") kind = "Unigram";
  if (name == "rwkv") kind = "RWKV trie";
  if (name == "plamo2") kind = "PLaMo-2";
  fail(ErrorKind::Unsupported,
       "tokenizer.ggml.model = '{}' ({} tokenizer) is not supported (supported: 'llama' "
       "SentencePiece, 'gpt2' byte-level BPE, 'gemma4' BPE)",
       name, kind);
}

namespace {

struct PreName {
  std::string_view name;
  PreTokenizer pre;
};

// Every name accepted for tokenizer.ggml.pre. A name is listed only when llama.cpp gives it
// nothing beyond these regexes that changes token ids (e.g. "dbrx" uses Llama 3's regex
// without ignore_merges, so it is not an alias of llama-bpe and stays refused).
constexpr PreName kPreNames[] = {
    {"default", PreTokenizer::Default},
    {"gpt-2", PreTokenizer::Gpt2},
    {"mpt", PreTokenizer::Gpt2},
    {"phi-2", PreTokenizer::Gpt2},
    {"olmo", PreTokenizer::Gpt2},
    {"llama-bpe", PreTokenizer::Llama3},
    {"llama3", PreTokenizer::Llama3},
    {"llama-v3", PreTokenizer::Llama3},
    {"qwen2", PreTokenizer::Qwen2},
    {"deepseek-r1-qwen", PreTokenizer::Qwen2},
    {"qwen35", PreTokenizer::Qwen35},
    {"deepseek-llm", PreTokenizer::DeepseekLlm},
    {"deepseek-coder", PreTokenizer::DeepseekCoder},
    {"falcon", PreTokenizer::Falcon},
    {"starcoder", PreTokenizer::Starcoder},
    {"refact", PreTokenizer::Starcoder},
    {"command-r", PreTokenizer::Starcoder},
    {"smollm", PreTokenizer::Starcoder},
    {"gemma4", PreTokenizer::Gemma4},
};

}  // namespace

PreTokenizer pre_tokenizer_from_name(std::string_view name) {
  if (name.empty()) return PreTokenizer::Default;
  for (const PreName& p : kPreNames) {
    if (p.name == name) return p.pre;
  }
  std::string known;
  for (const PreName& p : kPreNames) {
    if (!known.empty()) known += ", ";
    known += p.name;
  }
  fail(ErrorKind::Unsupported, "tokenizer.ggml.pre = '{}' is not supported (supported: {})", name,
       known);
}

const char* pre_tokenizer_name(PreTokenizer pre) {
  // The first name listed for a family is its canonical one.
  for (const PreName& p : kPreNames) {
    if (p.pre == pre) return p.name.data();
  }
  return "?";
}

void Vocab::apply_type_defaults() {
  if (type == VocabType::Spm) {
    // SentencePiece (Llama 1/2) conventions, as llama.cpp assumes when keys are absent.
    add_bos = true;
    add_eos = false;
    add_space_prefix = true;
    ignore_merges = false;
    if (bos == kNoToken && size() > 1) bos = 1;
    if (eos == kNoToken && size() > 2) eos = 2;
    if (unk == kNoToken && size() > 0) unk = 0;
  } else {
    add_space_prefix = false;
    add_eos = false;
    // Llama 3 adds <|begin_of_text|> and matches whole pre-tokens before merging; Gemma 4
    // always starts with <bos> (llama.cpp overrides even an explicit false).
    add_bos = pre == PreTokenizer::Llama3 || pre == PreTokenizer::Gemma4;
    ignore_merges = pre == PreTokenizer::Llama3;
    byte_level = pre != PreTokenizer::Gemma4;
  }
}

void Vocab::validate(std::string_view origin, ErrorKind kind) const {
  const size_t n = tokens.size();
  if (n == 0) fail(kind, "{}: tokenizer.ggml.tokens is empty", origin);
  if (!scores.empty() && scores.size() != n) {
    fail(kind, "{}: tokenizer.ggml.scores has {} entries, tokens has {}", origin, scores.size(), n);
  }
  if (!types.empty() && types.size() != n) {
    fail(kind, "{}: tokenizer.ggml.token_type has {} entries, tokens has {}", origin, types.size(),
         n);
  }
  // NaN or infinite scores break the SentencePiece merge order (NaN compares false both ways:
  // the priority queue's ordering is no longer strict-weak).
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!std::isfinite(scores[i]))
      fail(kind, "{}: tokenizer.ggml.scores[{}] = {} is not finite", origin, i, scores[i]);
  }
  // A vocabulary whose tokens all have the same text (all empty, or one string repeated) cannot
  // tokenize anything: every lookup would map to one id or none. Refused by name.
  bool all_same = true;
  for (size_t i = 1; i < n && all_same; ++i) all_same = tokens[i] == tokens[0];
  if (all_same && tokens[0].empty())
    fail(kind, "{}: tokenizer.ggml.tokens: all {} tokens are empty", origin, n);
  if (all_same && n > 1)
    fail(kind, "{}: tokenizer.ggml.tokens: all {} tokens are the same text '{}'", origin, n,
         tokens[0]);
  const std::pair<const char*, TokenId> ids[] = {
      {"bos_token_id", bos},         {"eos_token_id", eos},         {"unknown_token_id", unk},
      {"padding_token_id", pad},     {"eot_token_id", eot},         {"eom_token_id", eom},
      {"fim_pre_token_id", fim_pre}, {"fim_suf_token_id", fim_suf}, {"fim_mid_token_id", fim_mid},
      {"fim_pad_token_id", fim_pad}, {"fim_rep_token_id", fim_rep}, {"fim_sep_token_id", fim_sep}};
  for (const auto& [key, id] : ids) {
    if (id != kNoToken && (id < 0 || static_cast<size_t>(id) >= n)) {
      fail(kind, "{}: tokenizer.ggml.{} = {} is outside the vocabulary (0..{})", origin, key, id,
           n - 1);
    }
  }
}

namespace {

TokenId read_id(const gguf::File& f, const char* key, TokenId fallback) {
  if (!f.has(key)) return fallback;
  const int64_t v = f.get_int(key);
  // llama.cpp writes -1 (or UINT32_MAX) for "none" in some converters.
  if (v < 0 || v == 0xFFFFFFFFll) return kNoToken;
  if (v > INT32_MAX)
    fail(ErrorKind::InvalidFile, "{}: {} = {} is not a token id", f.path(), key, v);
  return static_cast<TokenId>(v);
}

}  // namespace

Vocab Vocab::from_gguf(const gguf::File& f) {
  Vocab v;
  const std::string model = f.get_string("tokenizer.ggml.model");
  v.type = vocab_type_from_name(model);
  // SentencePiece ignores tokenizer.ggml.pre (llama.cpp does too); gemma4 implies its own.
  if (model == "gemma4") {
    v.pre = PreTokenizer::Gemma4;
  } else if (v.type == VocabType::Bpe) {
    v.pre = pre_tokenizer_from_name(f.get_string_or("tokenizer.ggml.pre", "default"));
  }
  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.scores")) {
    const auto& s = f.get_float_array("tokenizer.ggml.scores");
    v.scores.assign(s.begin(), s.end());
  }
  if (f.has("tokenizer.ggml.token_type")) {
    const auto& t = f.get_int_array("tokenizer.ggml.token_type");
    v.types.reserve(t.size());
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] < 0 || t[i] > static_cast<int64_t>(TokenType::Byte)) {
        fail(ErrorKind::InvalidFile, "{}: tokenizer.ggml.token_type[{}] = {} is not a token type",
             f.path(), i, t[i]);
      }
      v.types.push_back(static_cast<TokenType>(t[i]));
    }
  }
  if (v.type == VocabType::Bpe) v.merges = f.get_string_array("tokenizer.ggml.merges");

  v.bos = read_id(f, "tokenizer.ggml.bos_token_id", kNoToken);
  v.eos = read_id(f, "tokenizer.ggml.eos_token_id", kNoToken);
  v.unk = read_id(f, "tokenizer.ggml.unknown_token_id", kNoToken);
  v.pad = read_id(f, "tokenizer.ggml.padding_token_id", kNoToken);
  v.eot = read_id(f, "tokenizer.ggml.eot_token_id", kNoToken);
  v.eom = read_id(f, "tokenizer.ggml.eom_token_id", kNoToken);
  // llama.cpp reads the deprecated prefix/suffix/middle keys after the fim_* ones: they win.
  v.fim_pre = read_id(f, "tokenizer.ggml.prefix_token_id",
                      read_id(f, "tokenizer.ggml.fim_pre_token_id", kNoToken));
  v.fim_suf = read_id(f, "tokenizer.ggml.suffix_token_id",
                      read_id(f, "tokenizer.ggml.fim_suf_token_id", kNoToken));
  v.fim_mid = read_id(f, "tokenizer.ggml.middle_token_id",
                      read_id(f, "tokenizer.ggml.fim_mid_token_id", kNoToken));
  v.fim_pad = read_id(f, "tokenizer.ggml.fim_pad_token_id", kNoToken);
  v.fim_rep = read_id(f, "tokenizer.ggml.fim_rep_token_id", kNoToken);
  v.fim_sep = read_id(f, "tokenizer.ggml.fim_sep_token_id", kNoToken);
  v.apply_type_defaults();
  v.add_bos =
      f.get_bool_or("tokenizer.ggml.add_bos_token", v.add_bos) || v.pre == PreTokenizer::Gemma4;
  v.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", v.add_eos);
  v.add_space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  v.chat_template = f.get_string_or("tokenizer.chat_template", "");
  v.validate(f.path(), ErrorKind::InvalidFile);
  // Type rules first: llama.cpp's strip rules look at the types they leave.
  v.apply_llama_cpp_special_rules();
  v.apply_llama_cpp_strip_rules(f.get_string_or("general.name", ""),
                                f.get_string_or("general.architecture", ""),
                                f.get_string_or("tokenizer.ggml.pre", ""));
  return v;
}

void Vocab::apply_llama_cpp_strip_rules(std::string_view model_name, std::string_view arch,
                                        std::string_view pre_name) {
  std::string name(model_name);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto contains_any = [](std::string_view s, std::initializer_list<std::string_view> subs) {
    for (std::string_view sub : subs)
      if (s.find(sub) != std::string_view::npos) return true;
    return false;
  };
  // A linear scan per named token: runs once per load, for at most a handful of names.
  auto set = [&](std::string_view text, uint8_t bit, bool on) {
    for (size_t id = 0; id < tokens.size(); ++id) {
      if (tokens[id] != text) continue;
      if (strip.empty()) strip.assign(tokens.size(), 0);
      strip[id] = on ? (strip[id] | bit) : (strip[id] & ~bit);
      return;
    }
  };
  if (contains_any(pre_name, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", kLstrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (size_t id = 0; id < tokens.size(); ++id) {
      const TokenType t = type_of(static_cast<TokenId>(id));
      if (t != TokenType::Control && t != TokenType::UserDefined && t != TokenType::Unknown)
        continue;
      if (strip.empty()) strip.assign(tokens.size(), 0);
      strip[id] |= kRstrip;
    }
    set("</s>", kRstrip, true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, kRstrip, false);
  } else if (contains_any(name, {"modern-bert"})) {
    set("[MASK]", kLstrip, true);
  }
}

}  // namespace minfer::tok
