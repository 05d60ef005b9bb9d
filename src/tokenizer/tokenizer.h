// Text <-> token ids for GGUF vocabularies: SentencePiece (`llama`), byte-level BPE (`gpt2`,
// with the pre-tokenizers of vocab.h's PreTokenizer) and Gemma 4's BPE (`gemma4`), matching
// llama.cpp's ids (docs/TOKENIZER.md lists the pre-tokenizers and their test vectors).
//
//   auto tk = minfer::tok::Tokenizer::from_gguf(file);
//   std::vector<TokenId> ids = tk.tokenize("Hello", {.add_special = true, .parse_special = false});
//   std::string text = tk.detokenize(ids);
//
// Ownership: a Tokenizer owns its Vocab and lookup tables (a few MB for 150k tokens); it is
// movable, and copies share the immutable state.
// Thread safety: immutable after construction; every const method may be called from many
// threads at once (regex match state lives on the caller's stack). StreamDecoder is per stream
// and not thread-safe.
// Failure modes: construction throws minfer::Error for an inconsistent vocabulary or an
// unsupported model/pre-tokenizer. tokenize never throws for any input bytes: invalid UTF-8
// becomes U+FFFD, one per bad byte. Out-of-range ids passed to decoding throw
// Error(InvalidArgument).
// Cost: tokenize is O(n log n) in the text length (priority-queue merges per word);
// token_to_piece is O(1) (pieces are precomputed).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace minfer::tok {

struct TokenizeOptions {
  // Add BOS / EOS as the vocabulary's add_bos / add_eos flags say.
  bool add_special = true;
  // Recognise the text of control tokens ("<|im_start|>", "<s>") and emit their ids. When false
  // that text is tokenized as ordinary text. User-defined tokens are always recognised (as in
  // llama.cpp). Matching is leftmost, longest first.
  bool parse_special = false;
};

struct DetokenizeOptions {
  // Render control tokens as their text; otherwise they produce no text.
  bool render_special = false;
  // SPM with add_space_prefix: drop the one space the tokenizer put in front of the text, so
  // detokenize(tokenize(x)) == x.
  bool remove_space_prefix = true;
};

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  static Tokenizer from_gguf(const gguf::File& file);

  std::vector<TokenId> tokenize(std::string_view text, const TokenizeOptions& opts = {}) const;
  // Appends to `out` (callers reusing a buffer avoid an allocation per call).
  void tokenize_into(std::string_view text, const TokenizeOptions& opts,
                     std::vector<TokenId>& out) const;

  // The bytes one token stands for (SPM "▁" -> " ", byte tokens -> that byte, byte-level BPE
  // decoded). May be an incomplete UTF-8 sequence. Control tokens give "" unless render_special.
  std::string_view token_to_piece(TokenId id, bool render_special = false) const;
  // The token's stored text (what the vocabulary calls it), for display.
  const std::string& token_text(TokenId id) const;

  // Concatenated pieces; the result may contain invalid UTF-8 if the ids split a character.
  std::string detokenize(std::span<const TokenId> ids, const DetokenizeOptions& opts = {}) const;

  // Exact lookup of a token's stored text; kNoToken when absent.
  TokenId find_token(std::string_view text) const;

  // End-of-generation ids, sorted: EOS, EOT, EOM, FIM pad/rep/sep and the tokens llama.cpp
  // stops on by name (<|im_end|>, <|endoftext|>, <|eot_id|>, <|end|>, </s>, <end_of_turn>, ...;
  // Vocab::llama_cpp_eog_ids).
  const std::vector<TokenId>& eog_ids() const;
  bool is_eog(TokenId id) const;

  const Vocab& vocab() const;
  int32_t n_tokens() const { return vocab().size(); }
  TokenId bos() const { return vocab().bos; }
  TokenId eos() const { return vocab().eos; }

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// Incremental detokenizer for streamed generation: returns text only up to the last complete
// UTF-8 character and holds back a started but unfinished sequence (e.g. an emoji spread over
// byte-fallback tokens) until its remaining bytes arrive. Bytes that can never become valid are
// emitted as U+FFFD, one per byte, so the output is always valid UTF-8.
// Not thread-safe; keeps a reference to the Tokenizer, which must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false);
  // Text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  // Same, written to `out` (cleared first). Allocation-free once `out` and the internal buffer
  // have grown to their working size: this is the per-token path of `minfer run` / `chat`.
  void push(TokenId id, std::string& out);
  // Same, for raw piece bytes (lets tests drive the hold-back logic directly).
  std::string push_bytes(std::string_view bytes);
  // Whatever is still held back, with U+FFFD for each byte of an unfinished sequence.
  std::string flush();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace minfer::tok
