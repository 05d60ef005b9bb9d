#include "model/pooling.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "common/error.h"
#include "gguf/gguf.h"
#include "model/engine.h"

namespace minfer {

std::string_view pooling_name(Pooling p) {
  switch (p) {
    case Pooling::None:
      return "none";
    case Pooling::Mean:
      return "mean";
    case Pooling::Cls:
      return "cls";
    case Pooling::Last:
      return "last";
    case Pooling::Unspecified:
      break;
  }
  return "unspecified";
}

Pooling parse_pooling(std::string_view s, std::string_view flag) {
  for (Pooling p : {Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last})
    if (s == pooling_name(p)) return p;
  if (s == "rank")
    fail(ErrorKind::InvalidArgument,
         "{} 'rank' is not supported (reranker heads are not implemented; use none, mean, cls or "
         "last)",
         flag);
  fail(ErrorKind::InvalidArgument, "{} '{}' is not a pooling type (none, mean, cls, last)", flag,
       s);
}

Pooling gguf_pooling(const gguf::File& f) {
  const std::string key = f.get_string("general.architecture") + ".pooling_type";
  if (!f.has(key)) return Pooling::Unspecified;
  const int64_t v = f.get_int(key);
  if (v < 0 || v > 3)
    fail(ErrorKind::Unsupported,
         "{}: key '{}': pooling type {} is not supported (0 none, 1 mean, "
         "2 cls, 3 last)",
         f.path(), key, v);
  return static_cast<Pooling>(v);
}

Pooling resolve_pooling(Pooling requested, const gguf::File& f) {
  if (requested != Pooling::Unspecified) return requested;
  const Pooling p = gguf_pooling(f);
  return p == Pooling::Unspecified ? Pooling::None : p;
}

int parse_normalize(std::string_view s, std::string_view flag) {
  const std::string str(s);
  char* end = nullptr;
  const long v = std::strtol(str.c_str(), &end, 10);
  if (str.empty() || *end != '\0' || v < -1 || v > 64)
    fail(ErrorKind::InvalidArgument,
         "{} '{}' is not a normalization (-1 none, 0 max-abs int16, 1 taxicab, 2 euclidean, "
         "p > 2 p-norm up to 64)",
         flag, s);
  return static_cast<int>(v);
}

std::vector<int32_t> pooling_rows(Pooling p, int64_t n_tokens) {
  MINFER_ASSERT(n_tokens > 0, "pooling_rows: empty sequence");
  if (p == Pooling::Cls) return {0};
  if (p == Pooling::Last) return {static_cast<int32_t>(n_tokens - 1)};
  std::vector<int32_t> rows(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) rows[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  return rows;
}

std::vector<float> pool(Pooling p, std::span<const float> rows, int64_t n_embd) {
  const auto e = static_cast<size_t>(n_embd);
  MINFER_ASSERT(n_embd > 0 && !rows.empty() && rows.size() % e == 0, "pool: bad row block");
  if (p != Pooling::Mean) {
    // none: every row; cls / last: the one row their pooling_rows asked for.
    MINFER_ASSERT(p == Pooling::None || rows.size() == e, "pool: cls / last take one row");
    return std::vector<float>(rows.begin(), rows.end());
  }
  const size_t n = rows.size() / e;
  std::vector<double> sum(e, 0.0);
  for (size_t r = 0; r < n; ++r)
    for (size_t i = 0; i < e; ++i) sum[i] += rows[r * e + i];
  std::vector<float> out(e);
  for (size_t i = 0; i < e; ++i) out[i] = static_cast<float>(sum[i] / static_cast<double>(n));
  return out;
}

std::vector<float> embed_sequence(SeqEngine& e, int32_t seq, std::span<const int32_t> tokens,
                                  Pooling p, int norm, int32_t n_batch) {
  MINFER_ASSERT(!tokens.empty() && n_batch > 0, "embed_sequence: no tokens or batch");
  const int64_t n_embd = e.n_out_row();
  e.seq_rm(seq, 0, -1);
  const std::vector<int32_t> want = pooling_rows(p, static_cast<int64_t>(tokens.size()));
  std::vector<float> rows;
  rows.reserve(want.size() * static_cast<size_t>(n_embd));
  Batch b;
  size_t next = 0;  // the next wanted row
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(n_batch)) {
    b.clear();
    const size_t end = std::min(tokens.size(), at + static_cast<size_t>(n_batch));
    for (size_t i = at; i < end; ++i) {
      const bool out = next < want.size() && static_cast<size_t>(want[next]) == i;
      next += out ? 1 : 0;
      b.add(tokens[i], static_cast<int32_t>(i), seq, out);
    }
    const std::span<const float> got = e.decode(b);  // valid until the next decode
    rows.insert(rows.end(), got.begin(), got.end());
  }
  MINFER_ASSERT(rows.size() == want.size() * static_cast<size_t>(n_embd), "embed: rows lost");
  std::vector<float> v = pool(p, rows, n_embd);
  normalize(v, n_embd, norm);
  return v;
}

void normalize(std::span<float> v, int64_t n_embd, int mode) {
  const auto e = static_cast<size_t>(n_embd);
  MINFER_ASSERT(n_embd > 0 && v.size() % e == 0, "normalize: bad vector block");
  for (size_t at = 0; at < v.size(); at += e) {
    std::span<float> x = v.subspan(at, e);
    double sum = 0.0;
    if (mode < 0) {
      sum = 1.0;
    } else if (mode == 0) {  // max-abs, scaled to the int16 range
      for (float f : x) sum = std::max(sum, static_cast<double>(std::abs(f)));
      sum /= 32760.0;
    } else if (mode == 2) {
      for (float f : x) sum += static_cast<double>(f) * f;
      sum = std::sqrt(sum);
    } else {
      for (float f : x) sum += std::pow(std::abs(static_cast<double>(f)), mode);
      sum = std::pow(sum, 1.0 / mode);
    }
    const double k = sum > 0.0 ? 1.0 / sum : 0.0;
    for (float& f : x) f = static_cast<float>(f * k);
  }
}

}  // namespace minfer
