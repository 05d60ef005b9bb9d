// llama.cpp's load-time special-token rules (Vocab::apply_llama_cpp_special_rules and
// Vocab::llama_cpp_eog_ids, vocab.h): which tokens it treats as control and which end
// generation, decided by token text because GGUF files do not always mark them.
#include <algorithm>
#include <initializer_list>
#include <span>
#include <string_view>
#include <unordered_map>

#include "tokenizer/vocab.h"

namespace minfer::tok {
namespace {

// Token texts llama.cpp ends generation on (and forces to control), whatever the file says.
constexpr std::string_view kEogNames[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
    "[e~[",
};

// Fill-in-the-middle marker names per kind, used only where the file gives no id.
constexpr std::string_view kFimPre[] = {"<|fim_prefix|>",
                                        "<fim-prefix>",
                                        "<fim_prefix>",
                                        "<\xEF\xBD\x9C"
                                        "fim\xE2\x96\x81"
                                        "begin\xEF\xBD\x9C>",
                                        "<PRE>",
                                        "\xE2\x96\x81<PRE>",
                                        "<|code_prefix|>",
                                        "<|prefix|>"};
constexpr std::string_view kFimSuf[] = {"<|fim_suffix|>",
                                        "<fim-suffix>",
                                        "<fim_suffix>",
                                        "<\xEF\xBD\x9C"
                                        "fim\xE2\x96\x81"
                                        "hole\xEF\xBD\x9C>",
                                        "<SUF>",
                                        "\xE2\x96\x81<SUF>",
                                        "<|code_suffix|>",
                                        "<|suffix|>"};
constexpr std::string_view kFimMid[] = {"<|fim_middle|>",
                                        "<fim-middle>",
                                        "<fim_middle>",
                                        "<\xEF\xBD\x9C"
                                        "fim\xE2\x96\x81"
                                        "end\xEF\xBD\x9C>",
                                        "<MID>",
                                        "\xE2\x96\x81<MID>",
                                        "<|code_middle|>",
                                        "<|middle|>"};
constexpr std::string_view kFimPad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view kFimRep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                        "<reponame>"};
constexpr std::string_view kFimSep[] = {"<|file_sep|>"};

// gpt-oss: llama.cpp always renders these, whatever their type.
constexpr std::string_view kAlwaysUserDefined[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                   "<|constrain|>"};

// The id of each named token present in the vocabulary. A text that occurs twice maps to its
// last id, as llama.cpp's token_to_id map (and Tokenizer::find_token) do.
class Named {
 public:
  explicit Named(const std::vector<std::string>& tokens) {
    using Names = std::span<const std::string_view>;
    for (Names names :
         {Names(kEogNames), Names(kFimPre), Names(kFimSuf), Names(kFimMid), Names(kFimPad),
          Names(kFimRep), Names(kFimSep), Names(kAlwaysUserDefined)}) {
      for (std::string_view n : names) ids_.emplace(n, kNoToken);
    }
    for (size_t id = 0; id < tokens.size(); ++id) {
      auto it = ids_.find(tokens[id]);
      if (it != ids_.end()) it->second = static_cast<TokenId>(id);
    }
  }
  TokenId operator[](std::string_view name) const {
    auto it = ids_.find(name);
    return it == ids_.end() ? kNoToken : it->second;
  }
  // The given id, else the lowest id among the named candidates. llama.cpp takes whichever
  // candidate its hash map yields first; the lowest id is a deterministic choice among them
  // (a vocabulary with two candidates for one kind is not known to exist).
  TokenId pick(TokenId given, std::span<const std::string_view> names) const {
    if (given != kNoToken) return given;
    TokenId best = kNoToken;
    for (std::string_view n : names) {
      const TokenId id = (*this)[n];
      if (id != kNoToken && (best == kNoToken || id < best)) best = id;
    }
    return best;
  }

 private:
  std::unordered_map<std::string_view, TokenId> ids_;
};

// llama.cpp's two exceptions to its end-of-generation list, by token text.
struct Exceptions {
  TokenId end_not_eog = kNoToken;  // <|end|>: o200k_harmony / solar-open use it mid-turn
  TokenId s_not_eog = kNoToken;    // </s>: gemma4 uses it as ordinary text
};

Exceptions exceptions(const Named& named) {
  auto has = [&](std::string_view n) { return named[n] != kNoToken; };
  Exceptions e;
  if ((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")))
    e.end_not_eog = named["<|end|>"];
  if (has("<|tool_response>")) e.s_not_eog = named["</s>"];
  return e;
}

}  // namespace

void Vocab::apply_llama_cpp_special_rules() {
  const Named named(tokens);
  auto force = [&](TokenId id, TokenType type) {
    if (id == kNoToken) return;
    if (types.empty()) types.assign(tokens.size(), TokenType::Normal);
    types[static_cast<size_t>(id)] = type;
  };
  // Only a marker llama.cpp finds by name becomes control; one the file names keeps its type.
  auto fim = [&](TokenId& field, std::span<const std::string_view> names) {
    if (field != kNoToken) return;
    field = named.pick(kNoToken, names);
    if (field != kNoToken && type_of(field) != TokenType::Unknown) force(field, TokenType::Control);
  };
  fim(fim_pre, kFimPre);
  fim(fim_suf, kFimSuf);
  fim(fim_mid, kFimMid);
  fim(fim_pad, kFimPad);
  fim(fim_rep, kFimRep);
  fim(fim_sep, kFimSep);
  // An unknown-type token keeps its type: it already behaves as control does when parsed, and
  // no end-of-generation name is a vocabulary's <unk>.
  for (std::string_view n : kEogNames) {
    const TokenId id = named[n];
    if (id != kNoToken && type_of(id) != TokenType::Unknown) force(id, TokenType::Control);
  }
  for (std::string_view n : kAlwaysUserDefined) force(named[n], TokenType::UserDefined);
  const Exceptions e = exceptions(named);
  force(e.end_not_eog, TokenType::UserDefined);
  force(e.s_not_eog, TokenType::Normal);
}

std::vector<TokenId> Vocab::llama_cpp_eog_ids() const {
  const Named named(tokens);
  std::vector<TokenId> eog;
  for (std::string_view n : kEogNames) eog.push_back(named[n]);
  for (TokenId id : {named.pick(fim_pad, kFimPad), named.pick(fim_rep, kFimRep),
                     named.pick(fim_sep, kFimSep), eos, eot, eom}) {
    eog.push_back(id);
  }
  const Exceptions e = exceptions(named);
  std::erase_if(
      eog, [&](TokenId id) { return id == kNoToken || id == e.end_not_eog || id == e.s_not_eog; });
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  return eog;
}

}  // namespace minfer::tok
