// Tokenizer metadata for generated models: copied from a vocabulary GGUF, or synthesised.
#include <string>

#include "common/error.h"
#include "gen/gen.h"

namespace minfer::gen {

Vocab load_vocab(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  Vocab v;
  for (const auto& [k, val] : f.metadata())
    if (k.rfind("tokenizer.", 0) == 0) v.kv.emplace_back(k, val);
  v.n_vocab = static_cast<int64_t>(f.get_string_array("tokenizer.ggml.tokens").size());
  if (v.n_vocab == 0) fail(ErrorKind::InvalidFile, "{}: tokenizer.ggml.tokens is empty", path);
  return v;
}

namespace {

using gguf::Value;

// Token types as llama.cpp numbers them.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// GPT-2's reversible byte -> printable code point map: printable Latin-1 bytes map to
// themselves, the others to 256, 257, ... in byte order.
std::string byte_symbol(int b) {
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  uint32_t cp = static_cast<uint32_t>(b);
  if (!printable) {
    uint32_t n = 0;
    for (int i = 0; i < b; ++i)
      if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) ++n;
    cp = 256 + n;
  }
  std::string s;
  append_utf8(s, cp);
  return s;
}

Vocab synth_spm() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {kUnknown, kControl, kControl};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.emplace_back(buf);
    types.push_back(kByte);
  }
  const std::string sp = "\xe2\x96\x81";  // U+2581, SentencePiece's space marker
  // Every piece must be distinct (llama.cpp asserts a one-to-one token <-> id map).
  std::vector<std::string> pieces = {
      sp,         sp + "the",    sp + "Once", sp + "upon", sp + "time", sp + "there", sp + "was",
      sp + "and", sp + "little", ".",         ",",         "!",         "?",          "'"};
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(std::string(1, c));
  for (char c = 'A'; c <= 'Z'; ++c) pieces.push_back(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(sp + c);
  for (auto& p : pieces) {
    tokens.push_back(p);
    types.push_back(kNormal);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i - 259);
  Vocab v;
  v.n_vocab = static_cast<int64_t>(tokens.size());
  v.kv.emplace_back("tokenizer.ggml.model", Value::string("llama"));
  v.kv.emplace_back("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
  v.kv.emplace_back("tokenizer.ggml.scores", Value::f32_array(std::move(scores)));
  v.kv.emplace_back("tokenizer.ggml.token_type", Value::i32_array(std::move(types)));
  v.kv.emplace_back("tokenizer.ggml.bos_token_id", Value::u32(1));
  v.kv.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(2));
  v.kv.emplace_back("tokenizer.ggml.unknown_token_id", Value::u32(0));
  v.kv.emplace_back("tokenizer.ggml.add_bos_token", Value::boolean(true));
  v.kv.emplace_back("tokenizer.ggml.add_eos_token", Value::boolean(false));
  return v;
}

// Phi-3's: the SentencePiece vocabulary plus its added chat tokens (<|endoftext|> the EOS, as
// in Phi-3; llama.cpp's vocab loader looks <unk>, <s>, </s> and <|endoftext|> up by name for
// any model named "phi3", so all four must exist) and its chat template.
Vocab synth_phi3() {
  Vocab v = synth_spm();
  auto find = [&](std::string_view key) -> Value& {
    for (auto& [k, val] : v.kv)
      if (k == key) return val;
    fail(ErrorKind::Internal, "synth_phi3: no {}", key);
  };
  auto& tokens = find("tokenizer.ggml.tokens").strings;
  auto& scores = find("tokenizer.ggml.scores").floats;
  auto& types = find("tokenizer.ggml.token_type").ints;
  const auto eot = static_cast<uint32_t>(tokens.size());
  for (const char* s : {"<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"}) {
    tokens.emplace_back(s);
    scores.push_back(-1000.0);
    types.push_back(kControl);
  }
  v.n_vocab = static_cast<int64_t>(tokens.size());
  find("tokenizer.ggml.eos_token_id") = Value::u32(eot);
  v.kv.emplace_back(
      "tokenizer.chat_template",
      Value::string("{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + "
                    "message['content'] + '<|end|>' + '\\n'}}{% endfor %}{% if "
                    "add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"));
  return v;
}

Vocab synth_bpe() {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_symbol(b));
    types.push_back(kNormal);
  }
  const std::string G = byte_symbol(' ');  // "Ġ"
  const std::vector<std::pair<std::string, std::string>> merges = {
      {G, "t"},   {"h", "e"}, {G + "t", "he"}, {"i", "n"}, {G, "a"},   {"e", "r"},
      {"o", "n"}, {G, "o"},   {"r", "e"},      {G, "s"},   {"a", "t"}, {"e", "n"}};
  std::vector<std::string> merge_strs;
  for (const auto& [l, r] : merges) {
    merge_strs.push_back(l + " " + r);
    tokens.push_back(l + r);
    types.push_back(kNormal);
  }
  const int32_t eot = static_cast<int32_t>(tokens.size());
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(s);
    types.push_back(kControl);
  }
  Vocab v;
  v.n_vocab = static_cast<int64_t>(tokens.size());
  v.kv.emplace_back("tokenizer.ggml.model", Value::string("gpt2"));
  v.kv.emplace_back("tokenizer.ggml.pre", Value::string("qwen2"));
  v.kv.emplace_back("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
  v.kv.emplace_back("tokenizer.ggml.token_type", Value::i32_array(std::move(types)));
  v.kv.emplace_back("tokenizer.ggml.merges", Value::string_array(std::move(merge_strs)));
  v.kv.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(static_cast<uint32_t>(eot + 2)));
  v.kv.emplace_back("tokenizer.ggml.padding_token_id", Value::u32(static_cast<uint32_t>(eot)));
  v.kv.emplace_back("tokenizer.ggml.bos_token_id", Value::u32(static_cast<uint32_t>(eot)));
  v.kv.emplace_back("tokenizer.ggml.add_bos_token", Value::boolean(false));
  v.kv.emplace_back(
      "tokenizer.chat_template",
      Value::string("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
                    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"));
  return v;
}

}  // namespace

Vocab synth_vocab(std::string_view arch) {
  // Gemma's tokenizer is SentencePiece too.
  if (arch == "llama" || arch == "gemma2" || arch == "gemma3") return synth_spm();
  if (arch == "phi3") return synth_phi3();
  return synth_bpe();
}

}  // namespace minfer::gen
