// generate(): random rows -> reference quantizer -> the writer's output mapping, in parallel.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "common/error.h"
#include "common/quant.h"
#include "gen/gen.h"

namespace minfer::gen {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** seeded per row, so a row's values never depend on which thread made it.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& x : s_) x = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Marsaglia's polar method: exact normal samples, two per accepted pair of uniforms (no trig;
// about 21% of pairs are rejected). Both uniforms come from one 64-bit draw.
void fill_normal(Rng& rng, float* y, int64_t n, float sigma) {
  constexpr float kScale = 0x1.0p-31f;  // 32-bit integer -> [-1, 1)
  for (int64_t i = 0; i < n;) {
    const uint64_t r = rng.next();
    const float u = static_cast<float>(static_cast<int32_t>(r)) * kScale;
    const float v = static_cast<float>(static_cast<int32_t>(r >> 32)) * kScale;
    const float s = u * u + v * v;
    if (s >= 1.0f || s == 0.0f) continue;
    const float f = sigma * std::sqrt(-2.0f * std::log(s) / s);
    y[i++] = u * f;
    if (i < n) y[i++] = v * f;
  }
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

struct FillJob {
  const TensorPlan* plan;
  uint64_t seed;
  int n_threads;
  float weight_std;
  std::atomic<uint64_t>* done_bytes;
  std::function<void()> report;  // called on the calling thread only
};

void fill_tensor(const FillJob& job, uint8_t* dst, uint64_t n_bytes) {
  const TensorPlan& tp = *job.plan;
  const int64_t row = tp.ne[0];
  int64_t n_rows = 1;
  for (size_t d = 1; d < tp.ne.size(); ++d) n_rows *= tp.ne[d];
  const size_t row_bytes = row_size(tp.type, row);
  MINFER_ASSERT(row_bytes * static_cast<uint64_t>(n_rows) == n_bytes, "tensor size mismatch");
  const uint64_t base = job.seed ^ name_hash(tp.name);
  // ~64K elements per chunk: enough work per atomic, fine-grained enough to balance threads.
  const int64_t chunk = std::max<int64_t>(1, 65536 / std::max<int64_t>(row, 1));
  const int64_t n_chunks = (n_rows + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  auto work = [&](bool caller) {
    std::vector<float> buf(static_cast<size_t>(row));
    for (int64_t c; (c = next.fetch_add(1)) < n_chunks;) {
      const int64_t r1 = std::min(n_rows, (c + 1) * chunk);
      for (int64_t r = c * chunk; r < r1; ++r) {
        if (tp.init == Init::Ones) {
          std::fill(buf.begin(), buf.end(), 1.0f);
        } else if (tp.init == Init::Values) {
          MINFER_ASSERT(tp.values.size() == buf.size() && n_rows == 1, "gen: values size");
          std::copy(tp.values.begin(), tp.values.end(), buf.begin());
        } else {
          uint64_t s = base + static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ull;
          Rng rng(splitmix64(s));
          fill_normal(rng, buf.data(), row,
                      tp.init == Init::Normal ? job.weight_std : job.weight_std / 10.0f);
        }
        quantize_row(tp.type, buf.data(), dst + static_cast<size_t>(r) * row_bytes, row);
      }
      job.done_bytes->fetch_add(static_cast<uint64_t>(r1 - c * chunk) * row_bytes);
      if (caller && job.report) job.report();
    }
  };
  const int n_threads = static_cast<int>(std::min<int64_t>(job.n_threads, n_chunks));
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(work, false);
  work(true);
  for (auto& th : pool) th.join();
  if (job.report) job.report();
}

}  // namespace

GenSummary generate(const GenOptions& opt) {
  Preset p = find_preset(opt.preset);
  if (opt.n_layer < 0 || opt.n_layer > p.n_layer)
    fail(ErrorKind::InvalidArgument, "gen: --layers {} outside [1, {}] for preset '{}'",
         opt.n_layer, p.n_layer, p.name);
  if (opt.n_layer > 0) p.n_layer = opt.n_layer;
  const WeightMix mix = parse_mix(opt.type);
  if (opt.out_path.empty()) fail(ErrorKind::InvalidArgument, "gen: no output path (-o)");
  if (!(opt.weight_std > 0.0f && opt.weight_std <= 10.0f))
    fail(ErrorKind::InvalidArgument, "gen: --std {} outside (0, 10]", opt.weight_std);
  Vocab vocab;
  if (!opt.vocab_path.empty()) {
    vocab = load_vocab(opt.vocab_path);
  } else if (p.tiny) {
    vocab = synth_vocab(p.arch);
  } else {
    fail(ErrorKind::InvalidArgument,
         "preset '{}' needs --vocab VOCAB.gguf (e.g. ../shared/vocab/ggml-vocab-qwen2.gguf); only "
         "tiny presets synthesise a vocabulary",
         p.name);
  }
  const std::vector<TensorPlan> plan = plan_tensors(p, mix, vocab.n_vocab);
  gguf::Writer w;
  for (auto& [k, v] : model_metadata(p, mix, vocab, opt.seed)) w.set(k, v);

  GenSummary sum;
  sum.n_vocab = vocab.n_vocab;
  for (const auto& tp : plan) {
    int64_t n = 1;
    for (int64_t d : tp.ne) n *= d;
    sum.n_params += n;
    sum.tensor_bytes += row_size(tp.type, tp.ne[0]) * static_cast<uint64_t>(n / tp.ne[0]);
  }
  sum.n_tensors = static_cast<int>(plan.size());

  int n_threads =
      opt.n_threads > 0 ? opt.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  n_threads = std::max(1, n_threads);
  std::atomic<uint64_t> done{0};
  const uint64_t total = sum.tensor_bytes;
  std::function<void()> report;
  if (opt.progress) report = [&] { opt.progress(done.load(), total); };
  for (const auto& tp : plan) {
    FillJob job{&tp, opt.seed, n_threads, opt.weight_std, &done, report};
    w.add_tensor(tp.name, tp.type, tp.ne,
                 [job](uint8_t* dst, uint64_t n_bytes) { fill_tensor(job, dst, n_bytes); });
  }
  w.write(opt.out_path);
  return sum;
}

}  // namespace minfer::gen
