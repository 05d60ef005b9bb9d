#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "common/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace minfer::tok {

void MergeTable::build(const std::vector<std::pair<uint64_t, Merge>>& entries) {
  size_t cap = 16;
  while (cap < entries.size() * 2) cap *= 2;  // load factor <= 0.5 keeps probes short
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  for (const auto& [key, merge] : entries) {
    MINFER_ASSERT(key != kEmpty);
    size_t i = hash(key) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    // The first (lowest-rank) occurrence of a pair wins, as in a rank lookup by string.
    if (slots_[i].key == kEmpty) slots_[i] = Slot{key, merge};
  }
}

void TextIndex::build(const std::vector<std::string>& texts) {
  size_t cap = 16;
  while (cap < texts.size() * 2) cap *= 2;  // load factor <= 0.5
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  for (size_t id = 0; id < texts.size(); ++id) {
    const uint64_t h = std::hash<std::string_view>{}(texts[id]);
    const auto tag = static_cast<uint32_t>(h >> 32);
    size_t i = h & mask_;
    while (slots_[i].id != kNoToken &&
           !(slots_[i].tag == tag && texts[static_cast<size_t>(slots_[i].id)] == texts[id])) {
      i = (i + 1) & mask_;
    }
    // A later duplicate text replaces the earlier id, as in llama.cpp's token_to_id map.
    slots_[i] = Slot{tag, static_cast<TokenId>(id)};
  }
}

namespace {

// "<0x41>" -> 0x41; -1 when the text is not a byte token.
int parse_byte_token(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  int v = 0;
  for (char c : s.substr(3, 2)) {
    v *= 16;
    if (c >= '0' && c <= '9')
      v += c - '0';
    else if (c >= 'A' && c <= 'F')
      v += c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v += c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

std::string spm_unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, 3) == "\xE2\x96\x81") {  // U+2581 LOWER ONE EIGHTH BLOCK marks a space
      out.push_back(' ');
      i += 3;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// True when "▁" occurs after the first character and not right after another "▁".
bool has_inner_space(std::string_view tok) {
  constexpr std::string_view sp = "\xE2\x96\x81";
  for (size_t p = tok.find(sp, 1); p != std::string_view::npos; p = tok.find(sp, p + 3)) {
    if (p < 3 || tok.substr(p - 3, 3) != sp) return true;
  }
  return false;
}

}  // namespace

bool Tokenizer::Impl::is_special_type(TokenId id) const {
  const TokenType ty = vocab.type_of(id);
  return ty == TokenType::Control || ty == TokenType::Unknown || ty == TokenType::UserDefined;
}

Tokenizer::Impl::Impl(Vocab v) : vocab(std::move(v)) {
  vocab.validate("tokenizer vocabulary");
  text_to_id.build(vocab.tokens);
  build_pieces();
  if (vocab.type == VocabType::Spm) {
    spm_cut_before_space = std::none_of(vocab.tokens.begin(), vocab.tokens.end(),
                                        [](const std::string& s) { return has_inner_space(s); });
  } else {
    build_bpe();
  }
  build_eog();
}

// Decoded piece per token, byte-fallback table, special-token candidates.
void Tokenizer::Impl::build_pieces() {
  const int32_t n = vocab.size();
  pieces.resize(static_cast<size_t>(n));
  is_control.assign(static_cast<size_t>(n), 0);
  byte_fallback_token.fill(kNoToken);
  for (TokenId id = 0; id < n; ++id) {
    const std::string& text = vocab.tokens[id];
    std::string& piece = pieces[id];
    switch (vocab.type_of(id)) {
      case TokenType::Control:
        is_control[id] = 1;
        piece = text;
        break;
      case TokenType::UserDefined:
        piece = text;
        break;
      case TokenType::Unknown:
        piece = vocab.type == VocabType::Spm ? "\xE2\x96\x85" : "";  // U+2585, as llama.cpp
        break;
      case TokenType::Byte: {
        const int b = parse_byte_token(text);
        piece = b >= 0 ? std::string(1, static_cast<char>(b)) : text;
        if (b >= 0 && byte_fallback_token[b] == kNoToken) byte_fallback_token[b] = id;
        break;
      }
      case TokenType::Undefined:
      case TokenType::Unused:
        break;  // renders as nothing
      case TokenType::Normal:
        // gemma4 BPE spells spaces "▁" like SentencePiece; other BPE tokens are byte-level.
        piece = vocab.type == VocabType::Spm || !vocab.byte_level ? spm_unescape(text)
                                                                  : byte_level_decode(text);
        break;
    }
    if (is_special_type(id) && !text.empty()) {
      special_by_byte[static_cast<uint8_t>(text[0])].push_back(id);
    }
  }
  for (auto& cands : special_by_byte) {
    std::stable_sort(cands.begin(), cands.end(), [&](TokenId a, TokenId b) {
      return vocab.tokens[a].size() > vocab.tokens[b].size();
    });
  }
}

// Byte -> token table, merge table (by id pair) and the pre-tokenizer's regexes.
void Tokenizer::Impl::build_bpe() {
  const ByteLevelTables& bl = byte_level_tables();
  bpe_byte_token.fill(kNoToken);
  if (vocab.byte_level) {
    for (int b = 0; b < 256; ++b) bpe_byte_token[b] = find(bl.byte_to_utf8[b]);
  }
  std::vector<std::pair<uint64_t, MergeTable::Merge>> entries;
  entries.reserve(vocab.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& m = vocab.merges[rank];
    // Split at the first space after the first byte (a part is never empty).
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) {
      fail(ErrorKind::InvalidArgument, "tokenizer.ggml.merges[{}] = '{}' has no space", rank, m);
    }
    const std::string_view left(m.data(), sp);
    const std::string_view right(m.data() + sp + 1, m.size() - sp - 1);
    joined.assign(left).append(right);
    const TokenId l = find(left), r = find(right), merged = find(joined);
    // A merge whose parts or result are not tokens can never produce an output token.
    if (l == kNoToken || r == kNoToken || merged == kNoToken) continue;
    entries.push_back({MergeTable::pack(l, r), {static_cast<int32_t>(rank), merged}});
  }
  merges.build(entries);
  splitter = std::make_unique<RegexSplitter>(pre_tokenizer_patterns(vocab.pre));
}

void Tokenizer::Impl::build_eog() {
  eog = vocab.llama_cpp_eog_ids();
}

Tokenizer::Tokenizer(Vocab vocab) : impl_(std::make_shared<const Impl>(std::move(vocab))) {}

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
  return Tokenizer(Vocab::from_gguf(file));
}

const Vocab& Tokenizer::vocab() const {
  return impl_->vocab;
}
const std::vector<TokenId>& Tokenizer::eog_ids() const {
  return impl_->eog;
}
bool Tokenizer::is_eog(TokenId id) const {
  return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);  // eog is sorted
}
TokenId Tokenizer::find_token(std::string_view text) const {
  return impl_->find(text);
}

namespace {

// C's isspace in the "C" locale, as llama.cpp's strip loops use it.
bool is_c_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Splits text at special-token occurrences, leftmost first and longest at each position.
void partition(const Tokenizer::Impl& t, std::string_view text, bool parse_special,
               std::vector<Fragment>& out) {
  size_t seg = 0;
  for (size_t i = 0; i < text.size();) {
    TokenId hit = kNoToken;
    for (TokenId id : t.special_by_byte[static_cast<uint8_t>(text[i])]) {
      const TokenType ty = t.vocab.type_of(id);
      // User-defined tokens are always matched; control/unknown only when asked (llama.cpp).
      if (!parse_special && ty != TokenType::UserDefined) continue;
      if (text.substr(i).starts_with(t.vocab.tokens[id])) {
        hit = id;
        break;
      }
    }
    if (hit == kNoToken) {
      ++i;
      continue;
    }
    // llama.cpp's LSTRIP / RSTRIP (Vocab::strip, e.g. Phi-3's special tokens): the
    // whitespace before / after the token is dropped from the neighbouring text.
    const uint8_t strip = t.vocab.strip_of(hit);
    size_t left_end = i;
    if (strip & Vocab::kLstrip)
      while (left_end > seg && is_c_space(text[left_end - 1])) --left_end;
    if (left_end > seg) out.push_back({kNoToken, text.substr(seg, left_end - seg)});
    out.push_back({hit, {}});
    i += t.vocab.tokens[hit].size();
    if (strip & Vocab::kRstrip)
      while (i < text.size() && is_c_space(text[i])) ++i;
    seg = i;
  }
  if (seg < text.size()) out.push_back({kNoToken, text.substr(seg)});
}

void check_id(const Tokenizer::Impl& t, TokenId id) {
  if (id < 0 || id >= t.vocab.size()) {
    fail(ErrorKind::InvalidArgument, "token id {} is outside the vocabulary (0..{})", id,
         t.vocab.size() - 1);
  }
}

}  // namespace

void Tokenizer::tokenize_into(std::string_view raw, const TokenizeOptions& opts,
                              std::vector<TokenId>& out) const {
  const Impl& t = *impl_;
  const Vocab& v = t.vocab;
  // One U+FFFD per invalid byte, so everything downstream sees well-formed UTF-8.
  const std::string text = sanitize_utf8(raw);
  if (opts.add_special && v.add_bos && v.bos != kNoToken) out.push_back(v.bos);

  std::vector<Fragment> frags;
  partition(t, text, opts.parse_special, frags);
  bool prev_special = true;  // SPM: text at the start or after a special token gets a " "
  for (const Fragment& f : frags) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    if (v.type == VocabType::Spm) {
      spm_tokenize(t, f.text, v.add_space_prefix && prev_special, out);
    } else {
      bpe_tokenize(t, f.text, out);
    }
    prev_special = false;
  }
  if (opts.add_special && v.add_eos && v.eos != kNoToken) out.push_back(v.eos);
}

std::vector<TokenId> Tokenizer::tokenize(std::string_view text, const TokenizeOptions& opts) const {
  std::vector<TokenId> out;
  tokenize_into(text, opts, out);
  return out;
}

std::string_view Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  check_id(*impl_, id);
  if (impl_->is_control[id] && !render_special) return {};
  return impl_->pieces[id];
}

const std::string& Tokenizer::token_text(TokenId id) const {
  check_id(*impl_, id);
  return impl_->vocab.tokens[id];
}

std::string Tokenizer::detokenize(std::span<const TokenId> ids,
                                  const DetokenizeOptions& opts) const {
  const Vocab& v = impl_->vocab;
  bool strip = opts.remove_space_prefix && v.type == VocabType::Spm && v.add_space_prefix;
  std::string out;
  for (TokenId id : ids) {
    std::string_view piece = token_to_piece(id, opts.render_special);
    if (piece.empty()) continue;
    // Only the first text piece can carry the space tokenize() inserted.
    if (strip && piece[0] == ' ') piece.remove_prefix(1);
    strip = false;
    out.append(piece);
  }
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(&tokenizer), render_special_(render_special) {}

std::string StreamDecoder::push(TokenId id) {
  return push_bytes(tokenizer_->token_to_piece(id, render_special_));
}

void StreamDecoder::push(TokenId id, std::string& out) {
  out.clear();
  pending_.append(tokenizer_->token_to_piece(id, render_special_));
  const size_t hold = incomplete_utf8_tail(pending_);
  append_sanitized_utf8(std::string_view(pending_).substr(0, pending_.size() - hold), out);
  pending_.erase(0, pending_.size() - hold);
}

std::string StreamDecoder::push_bytes(std::string_view bytes) {
  pending_.append(bytes);
  const size_t hold = incomplete_utf8_tail(pending_);
  std::string ready = sanitize_utf8(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace minfer::tok
