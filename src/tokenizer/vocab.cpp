#include "tokenizer/vocab.h"

#include <cmath>

#include "common/error.h"
#include "gguf/gguf.h"

namespace minfer::tok {

VocabType vocab_type_from_name(std::string_view name) {
  if (name == "llama") return VocabType::Spm;
  if (name == "gpt2") return VocabType::Bpe;
  fail(ErrorKind::Unsupported,
       "tokenizer.ggml.model = '{}' is not supported (supported: 'llama', 'gpt2')", name);
}

PreTokenizer pre_tokenizer_from_name(std::string_view name) {
  if (name.empty() || name == "default") return PreTokenizer::Default;
  if (name == "gpt-2") return PreTokenizer::Gpt2;
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizer::Llama3;
  if (name == "qwen2") return PreTokenizer::Qwen2;
  fail(ErrorKind::Unsupported,
       "tokenizer.ggml.pre = '{}' is not supported (supported: default, gpt-2, llama-bpe, qwen2)",
       name);
}

const char* pre_tokenizer_name(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::Default:
      return "default";
    case PreTokenizer::Gpt2:
      return "gpt-2";
    case PreTokenizer::Llama3:
      return "llama-bpe";
    case PreTokenizer::Qwen2:
      return "qwen2";
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
    // Llama 3 adds <|begin_of_text|> and matches whole pre-tokens before merging.
    add_bos = pre == PreTokenizer::Llama3;
    ignore_merges = pre == PreTokenizer::Llama3;
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
      {"bos_token_id", bos},     {"eos_token_id", eos}, {"unknown_token_id", unk},
      {"padding_token_id", pad}, {"eot_token_id", eot}, {"eom_token_id", eom}};
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
  v.type = vocab_type_from_name(f.get_string("tokenizer.ggml.model"));
  if (v.type == VocabType::Bpe) {
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
  v.apply_type_defaults();
  v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", v.add_bos);
  v.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", v.add_eos);
  v.add_space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  v.chat_template = f.get_string_or("tokenizer.chat_template", "");
  v.validate(f.path(), ErrorKind::InvalidFile);
  return v;
}

}  // namespace minfer::tok
