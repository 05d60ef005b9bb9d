#include "server/embeddings.h"

#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "server/request.h"

namespace minfer::server {

namespace {

bool all_numbers(const json& a) {
  if (!a.is_array() || a.empty()) return false;
  for (const json& x : a)
    if (!x.is_number_integer()) return false;
  return true;
}

// One input: a string, or a list of token ids, or (llama-server's mixed prompt) a list of
// strings and ids, concatenated with BOS added once before the first piece.
std::vector<int32_t> tokenize_input(const json& in, const tok::Tokenizer& tk, size_t index) {
  const auto bad = [index](const std::string& why) {
    return bad_request(fmt::format("'input' element {} {}", index, why));
  };
  if (in.is_string())
    return tk.tokenize(in.get<std::string>(), {.add_special = true, .parse_special = true});
  if (!in.is_array() || in.empty())
    throw bad("must be a string, a list of token ids or a list of strings and token ids");
  std::vector<int32_t> out;
  for (size_t i = 0; i < in.size(); ++i) {
    const json& x = in[i];
    if (x.is_number_integer()) {
      const auto id = x.get<int64_t>();
      if (id < 0 || id >= tk.n_tokens())
        throw bad(
            fmt::format("holds token id {} outside the vocabulary [0, {})", id, tk.n_tokens()));
      out.push_back(static_cast<int32_t>(id));
    } else if (x.is_string()) {
      const auto t =
          tk.tokenize(x.get<std::string>(), {.add_special = i == 0, .parse_special = true});
      out.insert(out.end(), t.begin(), t.end());
    } else {
      throw bad(fmt::format("holds a {} (expected token ids and strings)", x.type_name()));
    }
  }
  return out;
}

}  // namespace

EmbeddingsRequest parse_embeddings(const json& body, bool oai, const tok::Tokenizer& tk,
                                   int default_normalize) {
  if (!body.is_object()) throw bad_request("the body must be a JSON object");
  EmbeddingsRequest r;
  r.oai = oai;
  r.normalize = default_normalize;
  json input;
  if (body.contains("input")) {
    input = body.at("input");
  } else if (body.contains("content")) {
    r.oai = false;  // "content" is not OpenAI's: the native answer, as llama-server
    input = body.at("content");
  } else {
    throw bad_request("\"input\" or \"content\" must be provided");
  }
  if (body.contains("encoding_format")) {
    const json& f = body.at("encoding_format");
    if (f == "base64")
      r.base64 = true;
    else if (f != "float")
      throw bad_request(
          fmt::format("'encoding_format' {}: the format to return the embeddings "
                      "in can be either float or base64",
                      f.dump()));
  }
  if (body.contains("embd_normalize")) {
    const json& n = body.at("embd_normalize");
    if (!n.is_number_integer() || n.get<int64_t>() < -1 || n.get<int64_t>() > 64)
      throw bad_request(
          fmt::format("'embd_normalize' {} must be an integer in [-1, 64]", n.dump()));
    r.normalize = n.get<int>();
  }
  if (body.contains("model") && body.at("model").is_string())
    r.model = body.at("model").get<std::string>();
  // A list of ids is one input; any other list is a list of inputs.
  if (input.is_array() && !all_numbers(input)) {
    if (input.empty()) throw bad_request("'input' must not be empty");
    for (size_t i = 0; i < input.size(); ++i) r.inputs.push_back(tokenize_input(input[i], tk, i));
  } else {
    r.inputs.push_back(tokenize_input(input, tk, 0));
  }
  for (size_t i = 0; i < r.inputs.size(); ++i)
    if (r.inputs[i].empty()) throw bad_request(fmt::format("input {} is empty (no tokens)", i));
  return r;
}

std::string base64_floats(const std::vector<float>& v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static_assert(std::endian::native == std::endian::little, "float bytes are sent as stored");
  std::string bytes(v.size() * sizeof(float), '\0');
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = (w << 8) | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

json embeddings_response(const EmbeddingsRequest& r, const std::vector<TaskEvent>& finals,
                         const std::string& model_id, int64_t n_embd) {
  const auto e = static_cast<size_t>(n_embd);
  if (!r.oai) {
    json arr = json::array();
    for (size_t i = 0; i < finals.size(); ++i) {
      json rows = json::array();
      const std::vector<float>& v = finals[i].embedding;
      for (size_t at = 0; at + e <= v.size(); at += e)
        rows.push_back(std::vector<float>(v.begin() + static_cast<ptrdiff_t>(at),
                                          v.begin() + static_cast<ptrdiff_t>(at + e)));
      arr.push_back({{"index", i}, {"embedding", rows}});
    }
    return arr;
  }
  json data = json::array();
  int64_t n_tokens = 0;
  for (size_t i = 0; i < finals.size(); ++i) {
    json d;
    if (r.base64)
      d = {{"embedding", base64_floats(finals[i].embedding)},
           {"index", i},
           {"object", "embedding"},
           {"encoding_format", "base64"}};
    else
      d = {{"embedding", finals[i].embedding}, {"index", i}, {"object", "embedding"}};
    data.push_back(std::move(d));
    n_tokens += finals[i].usage.prompt_tokens;
  }
  return {{"model", r.model.empty() ? model_id : r.model},
          {"object", "list"},
          {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}},
          {"data", std::move(data)}};
}

}  // namespace minfer::server
