// `minfer gen --preset NAME --type TYPE [--vocab VOCAB.gguf] -o OUT.gguf [--seed S] [-t N]`:
// writes a random-weight GGUF with a real architecture's shapes (see src/gen/gen.h).
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "gen/gen.h"

namespace minfer::app {
namespace {

// A one-line bar on stderr, redrawn at most every 100 ms.
class ProgressBar {
 public:
  void update(uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double f = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    constexpr int kWidth = 40;
    const int fill = static_cast<int>(f * kWidth);
    std::string bar(static_cast<size_t>(fill), '=');
    if (fill < kWidth) bar += '>';
    bar.resize(kWidth, ' ');
    std::fprintf(stderr, "\r[%s] %3d%%  %7.1f / %.1f MiB", bar.c_str(), static_cast<int>(f * 100),
                 done / 1048576.0, total / 1048576.0);
    std::fflush(stderr);
  }

 private:
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

int cmd_gen(int argc, char** argv) {
  CLI::App app{"Write a random-weight GGUF model with a real architecture's shapes", "minfer gen"};
  gen::GenOptions opt;
  std::string presets_help = "architecture preset:";
  for (const auto& p : gen::presets()) presets_help += " " + p.name;
  app.add_option("--preset", opt.preset, presets_help)->required();
  app.add_option("--type", opt.type,
                 "weight type: f32, f16, q8_0, q4_0, q4_k / q5_k (Q4_K_M- / Q5_K_M-like "
                 "mixes), q6_k")
      ->capture_default_str();
  app.add_option("--vocab", opt.vocab_path,
                 "vocabulary GGUF whose tokenizer.* metadata is copied (tiny presets may omit it)");
  app.add_option("-o,--output", opt.out_path, "output GGUF path")->required();
  // Read signed, then checked: CLI11 converts -3 into the unsigned seed as 2^64 - 3.
  int64_t seed = static_cast<int64_t>(opt.seed);
  app.add_option("--seed", seed, "random seed (>= 0)")->capture_default_str();
  app.add_option("--layers", opt.n_layer,
                 "keep only the first N layers of the preset (0: all; numerics checks)")
      ->capture_default_str();
  app.add_option("-t,--threads", opt.n_threads, "threads (0: all cores)")->capture_default_str();
  app.add_option("--std", opt.weight_std,
                 "standard deviation of the 2-D weights (numerics fixtures use more than a "
                 "trained model's 0.02 so attention is sharp)")
      ->capture_default_str();
  if (auto status = parse_command_line(app, argc, argv)) return *status;
  // The same rule as the other commands (0: all cores); --layers and --std are checked by
  // gen::generate.
  check_threads(opt.n_threads);
  if (seed < 0) fail(ErrorKind::InvalidArgument, "--seed {} must be >= 0", seed);
  opt.seed = static_cast<uint64_t>(seed);

  ProgressBar bar;
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty) opt.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
  const auto t0 = std::chrono::steady_clock::now();
  const gen::GenSummary s = gen::generate(opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) std::fprintf(stderr, "\n");
  std::fprintf(
      stderr,
      "minfer gen: wrote %s: preset %s, type %s, %d tensors, %.1fM parameters, vocab %lld, "
      "%.1f MiB of tensor data in %.2f s\n",
      opt.out_path.c_str(), gen::find_preset(opt.preset).name.c_str(),
      std::string(gen::mix_name(gen::parse_mix(opt.type))).c_str(), s.n_tensors, s.n_params / 1e6,
      static_cast<long long>(s.n_vocab), s.tensor_bytes / 1048576.0, secs);
  return 0;
}

}  // namespace minfer::app
