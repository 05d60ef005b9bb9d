// Vocabulary: the tokenizer's plain data, as stored in a GGUF file's tokenizer.ggml.* keys.
//
// Vocab is a plain struct so tests can build tiny vocabularies by hand; Vocab::from_gguf fills
// it from a file with llama.cpp's defaults for absent keys. The Tokenizer (tokenizer.h) builds
// its lookup tables from it.
// Ownership: owns its strings. Thread safety: plain data, immutable once built.
// Failure modes: from_gguf throws Error(InvalidFile) naming the file and key for a missing or
// wrong-typed key, inconsistent array lengths or an out-of-range special id, and
// Error(Unsupported) for an unknown tokenizer.ggml.model / .pre.
// Cost: O(vocabulary size) copies.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace minfer::gguf {
class File;
}

namespace minfer::tok {

using TokenId = int32_t;
constexpr TokenId kNoToken = -1;

enum class VocabType {
  Spm,  // tokenizer.ggml.model == "llama": SentencePiece, score-driven merges, byte fallback
  Bpe,  // tokenizer.ggml.model == "gpt2" (byte-level BPE) or "gemma4" (BPE on raw UTF-8 with
        // "▁" for spaces and <0xNN> byte fallback; pre is then Gemma4): rank-driven merges
};

// How text is split into words before BPE merges (tokenizer.ggml.pre). Each value is one
// family of regexes; several names map to one family (pre_tokenizer_from_name lists them).
enum class PreTokenizer {
  Default,        // "default" / absent: llama.cpp's generic sequence of regexes
  Gpt2,           // "gpt-2", "mpt", "phi-2", "olmo"
  Llama3,         // "llama-bpe", "llama3", "llama-v3" (also turns on ignore_merges)
  Qwen2,          // "qwen2", "deepseek-r1-qwen"
  Qwen35,         // "qwen35": Qwen2's with combining marks (\p{M}) kept inside words
  DeepseekLlm,    // "deepseek-llm"
  DeepseekCoder,  // "deepseek-coder"
  Falcon,         // "falcon"
  Starcoder,      // "starcoder", "refact", "command-r", "smollm": GPT-2's, one word per digit
  Gemma4,         // tokenizer.ggml.model "gemma4": words are lines; no byte-level encoding
};

// Values of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : uint8_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct Vocab {
  VocabType type = VocabType::Spm;
  PreTokenizer pre = PreTokenizer::Default;

  std::vector<std::string> tokens;  // id -> text (SPM: "▁" for spaces; BPE: byte-level text)
  std::vector<float> scores;        // SPM merge priority (higher first); may be empty for BPE
  std::vector<TokenType> types;     // empty means all Normal
  std::vector<std::string> merges;  // BPE: "left right", rank = index

  TokenId bos = kNoToken;
  TokenId eos = kNoToken;
  TokenId unk = kNoToken;
  TokenId pad = kNoToken;
  TokenId eot = kNoToken;  // tokenizer.ggml.eot_token_id (end of turn)
  TokenId eom = kNoToken;  // tokenizer.ggml.eom_token_id (end of message)
  // Fill-in-the-middle markers (tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id, or
  // found by name in apply_llama_cpp_special_rules). pad / rep / sep end generation.
  TokenId fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  TokenId fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;

  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: prefix " " to text at the start / after a special
  bool ignore_merges = false;     // BPE: a pre-token that is itself a token is emitted as is
  // BPE: tokens are byte-level text (GPT-2's byte -> character map). False for gemma4, whose
  // tokens are raw UTF-8 with "▁" for spaces and whose bytes fall back to <0xNN> tokens.
  bool byte_level = true;

  std::string chat_template;  // tokenizer.chat_template, empty when absent

  // Whitespace llama.cpp strips around a special token when it splits text at one (its token
  // attributes LSTRIP / RSTRIP): kLstrip drops the whitespace before the token, kRstrip the
  // whitespace after it. GGUF files do not store them; llama.cpp sets them by model name
  // (apply_llama_cpp_strip_rules). Empty means none; otherwise one entry per token.
  static constexpr uint8_t kLstrip = 1, kRstrip = 2;
  std::vector<uint8_t> strip;

  // Reads tokenizer.ggml.* and tokenizer.chat_template; absent flags take llama.cpp's defaults
  // for the model type (SPM: BOS on, space prefix on; BPE: BOS only for llama-bpe).
  static Vocab from_gguf(const gguf::File& file);

  // Applies the per-type defaults (add_bos, add_space_prefix, ignore_merges, SPM special ids)
  // for a hand-built vocabulary; from_gguf calls it before reading the explicit flags.
  void apply_type_defaults();

  // Throws Error(kind) when array lengths disagree or a special id is out of range. `origin`
  // names the source in the message (a file path, "hand-built vocab").
  void validate(std::string_view origin, ErrorKind kind = ErrorKind::InvalidArgument) const;

  // llama.cpp's per-model token attributes (llama_vocab::impl::load, "Handle per token
  // attributes"), from general.name (case-insensitive), general.architecture and
  // tokenizer.ggml.pre: a name containing "phi-3" or "phi3" gives every special token
  // (control, user-defined, unknown) and "</s>" kRstrip, then takes it from "<unk>", "<s>" and
  // "<|endoftext|>"; jina-v2 pre-tokenizers and nomic-bert-moe / jina-bert-v3 give "<mask>"
  // kLstrip, a name containing "modern-bert" "[MASK]". A named token that is absent is skipped.
  void apply_llama_cpp_strip_rules(std::string_view model_name, std::string_view arch,
                                   std::string_view pre_name);
  // llama.cpp's load-time token rules (llama_vocab::impl::load, "auto-detect special tokens by
  // text" and the end-of-generation list after it), which GGUF files do not store: a token
  // whose text is an end-of-generation marker (</s>, <|end|>, <|endoftext|>, <|im_end|>,
  // <|eot_id|>, <end_of_turn>, <EOT>, ... kEogNames in vocab_special.cpp) or, where the file
  // names none, a fill-in-the-middle marker (<|fim_prefix|>, <PRE>, ...) becomes Control
  // whatever the file says (so it is cut out of text only with parse_special and renders only
  // with render_special); absent FIM ids are filled in. Then llama.cpp's exceptions:
  // <|channel|>, <|message|>, <|start|>, <|constrain|> become UserDefined (gpt-oss); <|end|>
  // becomes UserDefined where <|return|> + <|call|> or <|calls|> + <|flush|> exist
  // (o200k_harmony, solar-open); </s> becomes Normal where <|tool_response> exists (gemma4).
  // from_gguf calls it; a hand-built vocabulary is taken as given. Cost: one pass over the
  // tokens with a hash lookup each.
  void apply_llama_cpp_special_rules();
  // The ids llama.cpp ends generation on: the named end-of-generation tokens above, the FIM
  // pad / rep / sep ids (given or found by name), EOS, EOT and EOM, less the two exceptions
  // (<|end|> for o200k_harmony / solar-open, </s> for gemma4). Sorted, no duplicates.
  std::vector<TokenId> llama_cpp_eog_ids() const;

  uint8_t strip_of(TokenId id) const { return strip.empty() ? 0 : strip[static_cast<size_t>(id)]; }

  TokenType type_of(TokenId id) const {
    return types.empty() ? TokenType::Normal : types[static_cast<size_t>(id)];
  }
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

// "llama" -> Spm, "gpt2" and "gemma4" -> Bpe; throws Error(Unsupported) otherwise, naming
// the kind of tokenizer refused ("bert" is WordPiece, "t5" is Unigram).
VocabType vocab_type_from_name(std::string_view name);
// Throws Error(Unsupported) for a pre-tokenizer name this tokenizer does not implement.
PreTokenizer pre_tokenizer_from_name(std::string_view name);
const char* pre_tokenizer_name(PreTokenizer pre);

}  // namespace minfer::tok
