// Internal state of a Tokenizer, shared by tokenizer.cpp, spm.cpp and bpe.cpp. Not a public
// header: include tokenizer.h instead.
// Ownership: Impl owns the vocabulary, the derived tables and the pre-tokenizer; Fragments
// borrow the caller's text. Thread safety: immutable after construction (Tokenizer's contract);
// MergeTable and TextIndex are read-only after build(). Failure: building the pre-tokenizer
// throws Error (see pretokenize.h); lookups never throw. Cost: build is O(vocab + merges);
// find() is O(1) expected (open addressing, load factor <= 1/2).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace minfer::tok {

// Open-addressing map from a (left id, right id) pair to the BPE merge it triggers. Built once,
// then read-only; faster than std::unordered_map on the merge loop's hot path.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  void build(const std::vector<std::pair<uint64_t, Merge>>& entries);
  const Merge* find(TokenId left, TokenId right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  static uint64_t pack(TokenId l, TokenId r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{0, kNoToken};
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Open-addressing index from token text to id (texts stay in the Vocab). One flat array of
// (hash, id) slots: no node allocations at load, one cache line per probe at lookup.
class TextIndex {
 public:
  void build(const std::vector<std::string>& texts);
  TokenId find(const std::vector<std::string>& texts, std::string_view key) const {
    const uint64_t h = std::hash<std::string_view>{}(key);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id == kNoToken) return kNoToken;
      if (s.tag == tag && texts[static_cast<size_t>(s.id)] == key) return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag = 0;
    TokenId id = kNoToken;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

struct Tokenizer::Impl {
  Vocab vocab;
  TextIndex text_to_id;
  std::vector<std::string> pieces;  // decoded bytes per id (control tokens: their text)
  std::vector<uint8_t> is_control;  // piece shown only with render_special
  // Special-token candidates by first byte, longest first (see partition()).
  std::array<std::vector<TokenId>, 256> special_by_byte;
  std::vector<TokenId> eog;

  // SPM and gemma4 BPE: byte-fallback token per byte value ("<0x41>"), kNoToken when absent.
  std::array<TokenId, 256> byte_fallback_token{};
  // SPM: true when no token contains "▁" preceded by anything but "▁", so merges never cross
  // the point before a word-initial "▁" and the text can be cut there.
  bool spm_cut_before_space = false;
  // BPE: token of each byte's byte-level character (byte-level vocabularies only); merge
  // table; the pre-tokenizer.
  std::array<TokenId, 256> bpe_byte_token{};
  MergeTable merges;
  std::unique_ptr<RegexSplitter> splitter;

  explicit Impl(Vocab v);

  TokenId find(std::string_view text) const { return text_to_id.find(vocab.tokens, text); }
  bool is_special_type(TokenId id) const;

 private:
  void build_pieces();
  void build_bpe();
  void build_eog();
};

// One fragment of input after special-token partitioning.
struct Fragment {
  TokenId token = kNoToken;  // kNoToken: a run of ordinary text
  std::string_view text;
};

// Appends the ids of one ordinary-text fragment.
void spm_tokenize(const Tokenizer::Impl& t, std::string_view text, bool add_prefix_space,
                  std::vector<TokenId>& out);
void bpe_tokenize(const Tokenizer::Impl& t, std::string_view text, std::vector<TokenId>& out);

}  // namespace minfer::tok
