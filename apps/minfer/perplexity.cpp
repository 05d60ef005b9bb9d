#include "perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"

namespace minfer::app::ppl {

namespace {

struct RowMax {
  float max;
  int64_t argmax;  // the first index holding the maximum, as llama-perplexity's
};

RowMax row_max(std::span<const float> x) {
  RowMax m{x[0], 0};
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > m.max) m = {x[i], static_cast<int64_t>(i)};
  return m;
}

// log(sum exp(x - max)) in float64: the sum of a 150k-entry vocabulary in float loses the small
// terms that a quantization's KL divergence is made of.
double log_sum_exp(std::span<const float> x, float max) {
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - max);
  return std::log(sum);
}

// (mean, standard error of the mean), llama-perplexity's: no error below 11 samples.
std::pair<double, double> mean_and_error(double sum, double sum2, int64_t count) {
  if (count < 1) return {0, 0};
  const double f = sum / count;
  const double var = sum2 / count - f * f;
  return {f, var > 0 && count > 10 ? std::sqrt(var / (count - 1)) : 0};
}

double covariance(double a, double b, double ab, int64_t count) {
  if (count < 10) return 0;
  return (ab / count - (a / count) * (b / count)) / (count - 1);
}

// Linear interpolation between the sorted values around fraction x (size - 1).
float percentile(const std::vector<float>& v, float fraction) {
  if (fraction <= 0) return v.front();
  if (fraction >= 1) return v.back();
  float p = fraction * static_cast<float>(v.size() - 1);
  const auto ip = static_cast<size_t>(p);
  p -= static_cast<float>(ip);
  return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

float median(const std::vector<float>& v) {
  const size_t n = v.size();
  return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

}  // namespace

double row_nll(std::span<const float> logits, int32_t tok) {
  MINFER_DASSERT(tok >= 0 && static_cast<size_t>(tok) < logits.size());
  const float max = row_max(logits).max;
  return static_cast<double>(max) + log_sum_exp(logits, max) - logits[static_cast<size_t>(tok)];
}

double PplSums::ppl() const {
  return std::exp(nll / static_cast<double>(count));
}

double PplSums::ppl_uncertainty() const {
  if (count < 2) return 0;
  const double mean = nll / static_cast<double>(count);
  const double var = nll2 / static_cast<double>(count) - mean * mean;
  return var > 0 ? std::sqrt(var / static_cast<double>(count - 1)) * ppl() : 0;
}

double quantize_log_probs(std::span<const float> logits, int32_t tok, uint16_t* out) {
  const float max = row_max(logits).max;
  const float min = std::max(*std::min_element(logits.begin(), logits.end()), max - 16);
  const double lse = log_sum_exp(logits, max);
  const float scale = (max - min) / 65535.f;
  const auto min_log_prob = static_cast<float>(min - max - lse);
  std::memcpy(out, &scale, sizeof(float));
  std::memcpy(out + 2, &min_log_prob, sizeof(float));
  uint16_t* q = out + 4;
  if (scale > 0) {
    const float inv = 1 / scale;
    for (size_t i = 0; i < logits.size(); ++i)
      q[i] = logits[i] > min ? static_cast<uint16_t>(std::lrintf(inv * (logits[i] - min))) : 0;
  } else {
    std::fill(q, q + logits.size(), uint16_t{0});
  }
  return static_cast<double>(max) + lse - logits[static_cast<size_t>(tok)];
}

void KlSums::merge(const KlSums& o) {
  nll += o.nll, nll2 += o.nll2, nll_base += o.nll_base, nll_base2 += o.nll_base2;
  nll_nll_base += o.nll_nll_base, kld += o.kld, kld2 += o.kld2;
  p_diff += o.p_diff, p_diff2 += o.p_diff2, p_diff4 += o.p_diff4;
  max_p_diff = std::max(max_p_diff, o.max_p_diff);
  same_top += o.same_top, count += o.count;
}

double kl_row(std::span<const float> logits, const uint16_t* base, int32_t tok, KlSums& s,
              float& p_diff) {
  const RowMax m = row_max(logits);
  const double log_norm = static_cast<double>(m.max) + log_sum_exp(logits, m.max);
  float scale, min_log_prob;
  std::memcpy(&scale, base, sizeof(float));
  std::memcpy(&min_log_prob, base + 2, sizeof(float));
  const uint16_t* q = base + 4;
  const auto t = static_cast<size_t>(tok);
  const double nll = log_norm - logits[t];
  const double nll_base = -(static_cast<double>(scale) * q[t] + min_log_prob);
  double kld = 0;
  int64_t imax_base = 0;
  uint16_t qmax = q[0];
  for (size_t i = 0; i < logits.size(); ++i) {
    if (q[i] > qmax) qmax = q[i], imax_base = static_cast<int64_t>(i);
    const double lp_base = static_cast<double>(scale) * q[i] + min_log_prob;
    // Below e^-16 the base kept no resolution (its floor): those terms are left out, as the
    // file's producer intends.
    if (lp_base > -16) kld += std::exp(lp_base) * (lp_base - (logits[i] - log_norm));
  }
  s.nll += nll, s.nll2 += nll * nll;
  s.nll_base += nll_base, s.nll_base2 += nll_base * nll_base, s.nll_nll_base += nll * nll_base;
  s.kld += kld, s.kld2 += kld * kld;
  const double d = std::exp(-nll) - std::exp(-nll_base);
  s.p_diff += d, s.p_diff2 += d * d, s.p_diff4 += d * d * d * d;
  s.max_p_diff = std::max(s.max_p_diff, std::fabs(d));
  s.same_top += m.argmax == imax_base ? 1 : 0;
  ++s.count;
  p_diff = static_cast<float>(d);
  return kld;
}

void parallel_parts(int64_t n, int n_threads,
                    const std::function<void(int64_t, int64_t, int)>& fn) {
  const int parts = static_cast<int>(std::clamp<int64_t>(n, 1, std::max(1, n_threads)));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(parts - 1));
  auto bound = [&](int p) { return n * p / parts; };
  for (int p = 1; p < parts; ++p) threads.emplace_back(fn, bound(p), bound(p + 1), p);
  fn(0, bound(1), 0);
  for (auto& t : threads) t.join();
}

uint64_t KlBaseHeader::file_bytes() const {
  return 8 + 3 * 4 + uint64_t(n_chunk) * uint64_t(n_ctx) * 4 +
         uint64_t(n_chunk) * uint64_t(rows_per_chunk()) * uint64_t(base_row_u16(n_vocab)) * 2;
}

KlBaseWriter::KlBaseWriter(const std::string& path, const KlBaseHeader& h)
    : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
  if (!out_) fail(ErrorKind::Io, "--kl-divergence-base {}: cannot open for writing", path);
  out_.write("_logits_", 8);
  out_.write(reinterpret_cast<const char*>(&h.n_ctx), 4);
  out_.write(reinterpret_cast<const char*>(&h.n_vocab), 4);
  out_.write(reinterpret_cast<const char*>(&h.n_chunk), 4);
  out_.write(reinterpret_cast<const char*>(h.tokens.data()),
             static_cast<std::streamsize>(h.tokens.size() * 4));
  if (!out_) fail(ErrorKind::Io, "--kl-divergence-base {}: write failed", path);
}

void KlBaseWriter::write_chunk(const std::vector<uint16_t>& rows) {
  out_.write(reinterpret_cast<const char*>(rows.data()),
             static_cast<std::streamsize>(rows.size() * sizeof(uint16_t)));
  if (!out_) fail(ErrorKind::Io, "--kl-divergence-base {}: write failed (disk full?)", path_);
}

void KlBaseWriter::close() {
  out_.close();
  if (!out_) fail(ErrorKind::Io, "--kl-divergence-base {}: write failed", path_);
}

KlBaseReader::KlBaseReader(const std::string& path, int64_t n_vocab, int64_t n_ctx)
    : path_(path), in_(path, std::ios::binary) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (!in_ || ec) fail(ErrorKind::InvalidArgument, "--kl-divergence-base {}: cannot open", path);
  char magic[8] = {};
  in_.read(magic, 8);
  in_.read(reinterpret_cast<char*>(&h_.n_ctx), 4);
  in_.read(reinterpret_cast<char*>(&h_.n_vocab), 4);
  in_.read(reinterpret_cast<char*>(&h_.n_chunk), 4);
  if (!in_ || std::memcmp(magic, "_logits_", 8) != 0)
    fail(ErrorKind::InvalidArgument,
         "--kl-divergence-base {}: not a log-probability file (no '_logits_' header)", path);
  if (h_.n_vocab != n_vocab)
    fail(ErrorKind::InvalidArgument,
         "--kl-divergence-base {}: vocabulary of {} tokens, this model has {}", path, h_.n_vocab,
         n_vocab);
  if (h_.n_ctx != n_ctx)
    fail(ErrorKind::InvalidArgument,
         "--kl-divergence-base {}: computed with -c {}, this run has -c {} (give -c {})", path,
         h_.n_ctx, n_ctx, h_.n_ctx);
  // n_chunk is bounded by the bytes its tokens need before file_bytes() multiplies it.
  if (h_.n_chunk < 1 || h_.n_ctx < 4 || uint64_t(h_.n_chunk) > size / (uint64_t(h_.n_ctx) * 4) ||
      size != h_.file_bytes())
    fail(ErrorKind::InvalidArgument,
         "--kl-divergence-base {}: {} bytes, but its header (n_ctx {}, n_vocab {}, {} chunks) "
         "needs {}",
         path, size, h_.n_ctx, h_.n_vocab, h_.n_chunk, h_.file_bytes());
  h_.tokens.resize(static_cast<size_t>(h_.n_chunk) * static_cast<size_t>(h_.n_ctx));
  in_.read(reinterpret_cast<char*>(h_.tokens.data()),
           static_cast<std::streamsize>(h_.tokens.size() * 4));
  for (int32_t t : h_.tokens)
    if (t < 0 || t >= n_vocab)
      fail(ErrorKind::InvalidArgument,
           "--kl-divergence-base {}: token id {} outside the vocabulary", path, t);
}

void KlBaseReader::read_chunk(std::vector<uint16_t>& rows) {
  rows.resize(static_cast<size_t>(h_.rows_per_chunk() * base_row_u16(h_.n_vocab)));
  in_.read(reinterpret_cast<char*>(rows.data()),
           static_cast<std::streamsize>(rows.size() * sizeof(uint16_t)));
  if (!in_) fail(ErrorKind::Io, "--kl-divergence-base {}: read failed", path_);
}

void print_kl_chunk_line(FILE* out, int chunk, const KlSums& s) {
  const auto lp = mean_and_error(s.nll, s.nll2, s.count);
  const auto lb = mean_and_error(s.nll_base, s.nll_base2, s.count);
  const double cov = covariance(s.nll, s.nll_base, s.nll_nll_base, s.count);
  const double ratio_err = std::sqrt(lp.second * lp.second + lb.second * lb.second - 2 * cov);
  const auto kl = mean_and_error(s.kld, s.kld2, s.count);
  const auto mse = mean_and_error(s.p_diff2, s.p_diff4, s.count);
  const double rms = std::sqrt(mse.first);
  const double top = static_cast<double>(s.same_top) / static_cast<double>(s.count);
  const double top_err =
      s.count > 1 ? std::sqrt(top * (1 - top) / static_cast<double>(s.count - 1)) : 0;
  std::fputs(fmt::format("{:4d}    {:9.4f} ± {:9.4f}    {:10.5f} ± {:10.5f}    {:10.5f} ± {:10.5f}"
                         "    {:6.3f} ± {:6.3f} %    {:6.3f} ± {:6.3f} %\n",
                         chunk, std::exp(lp.first), std::exp(lp.first) * lp.second,
                         lp.first - lb.first, ratio_err, kl.first, kl.second, 100 * rms,
                         rms > 0 ? 100 * 0.5 / rms * mse.second : 0.0, 100 * top, 100 * top_err)
                 .c_str(),
             out);
}

void print_kl_summary(FILE* out, const KlSums& s, std::vector<float>& kld,
                      std::vector<float>& p_diff) {
  if (s.count < 100) return;  // too few values for statistics, as llama-perplexity
  std::sort(kld.begin(), kld.end());
  std::sort(p_diff.begin(), p_diff.end());
  std::string o = "====== Perplexity statistics ======\n";
  const auto lp = mean_and_error(s.nll, s.nll2, s.count);
  const auto lb = mean_and_error(s.nll_base, s.nll_base2, s.count);
  const double ppl = std::exp(lp.first), ppl_err = ppl * lp.second;
  const double base = std::exp(lb.first), base_err = base * lb.second;
  const double cov = covariance(s.nll, s.nll_base, s.nll_nll_base, s.count);
  const double ratio = lp.first - lb.first;
  const double ratio_err = std::sqrt(lp.second * lp.second + lb.second * lb.second - 2 * cov);
  o += fmt::format("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", ppl, ppl_err);
  o += fmt::format("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", base, base_err);
  o += fmt::format("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%\n",
                   100 * cov / (lp.second * lb.second));
  o += fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", ratio, ratio_err);
  o += fmt::format("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", std::exp(ratio),
                   std::exp(ratio) * ratio_err);
  const double diff_err = std::sqrt(ppl_err * ppl_err + base_err * base_err - 2 * ppl * base * cov);
  o += fmt::format("Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}\n\n", ppl - base, diff_err);

  o += "====== KL divergence statistics ======\n";
  const auto kl = mean_and_error(s.kld, s.kld2, s.count);
  o += fmt::format("Mean    KLD: {:10.6f} ± {:10.6f}\n", kl.first, kl.second);
  o += fmt::format("Maximum KLD: {:10.6f}\n", kld.back());
  const std::pair<const char*, float> kq[] = {{"99.9%", .999f}, {"99.0%", .99f}, {"95.0%", .95f},
                                              {"90.0%", .9f},   {"Median", -1},  {"10.0%", .1f},
                                              {" 5.0%", .05f},  {" 1.0%", .01f}, {" 0.1%", .001f}};
  for (const auto& [name, f] : kq)
    o += fmt::format("{:<8}KLD: {:10.6f}\n", name, f < 0 ? median(kld) : percentile(kld, f));
  o += fmt::format("Minimum KLD: {:10.6f}\n\n", kld.front());

  o += "====== Token probability statistics ======\n";
  const auto pd = mean_and_error(s.p_diff, s.p_diff2, s.count);
  o += fmt::format("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100 * pd.first, 100 * pd.second);
  o += fmt::format("Maximum Δp: {:6.3f}%\n", 100 * p_diff.back());
  const std::pair<const char*, float> pq[] = {{"99.9%", .999f}, {"99.0%", .99f}, {"95.0%", .95f},
                                              {"90.0%", .9f},   {"75.0%", .75f}, {"Median", -1},
                                              {"25.0%", .25f},  {"10.0%", .1f},  {" 5.0%", .05f},
                                              {" 1.0%", .01f},  {" 0.1%", .001f}};
  for (const auto& [name, f] : pq)
    o += fmt::format("{:<8}Δp: {:6.3f}%\n", name,
                     100 * (f < 0 ? median(p_diff) : percentile(p_diff, f)));
  o += fmt::format("Minimum Δp: {:6.3f}%\n", 100 * p_diff.front());
  const auto mse = mean_and_error(s.p_diff2, s.p_diff4, s.count);
  const double rms = std::sqrt(mse.first);
  o += fmt::format("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100 * rms,
                   rms > 0 ? 100 * 0.5 / rms * mse.second : 0.0);
  const double top = static_cast<double>(s.same_top) / static_cast<double>(s.count);
  o += fmt::format("Same top p: {:6.3f} ± {:5.3f} %\n", 100 * top,
                   100 * std::sqrt(top * (1 - top) / static_cast<double>(s.count - 1)));
  std::fputs(o.c_str(), out);
}

}  // namespace minfer::app::ppl
