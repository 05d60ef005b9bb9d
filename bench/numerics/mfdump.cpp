// mfdump: minfer's logits teacher-forced on lcdump's token sequence (prompt prefilled, then the
// generated tokens one by one), so every step compares with llama.cpp's logits at the same
// context even after the greedy texts diverge. F16 KV cache and fused QKV, as `minfer run`.
// usage: mfdump MODEL TOKFILE OUTPREFIX [threads] [graph|eager]  -> OUTPREFIX.logits
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <vector>
#include "common/error.h"
#include "eager/forward.h"
#include "model/model.h"
#include "model/session.h"

using namespace minfer;
int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage\n");
    return 2;
  }
  std::ifstream in(argv[2]);
  int np, nv;
  in >> np >> nv;
  std::vector<int32_t> toks;
  for (int t; in >> t;) toks.push_back(t);
  const int threads = argc > 4 ? atoi(argv[4]) : 2;
  const bool eager = argc > 5 && std::string(argv[5]) == "eager";
  auto model = Model::load(argv[1]);
  model->prepare_fused_qkv();
  std::unique_ptr<Engine> eng;
  if (eager) {
    model->make_fused_readable(nullptr, cpu::SimdLevel::kBest);  // eager packs nothing
    eager::EagerParams ep;
    ep.n_ctx = std::max<int64_t>(512, static_cast<int64_t>(toks.size()));
    ep.n_threads = threads;
    ep.fusion = FusionToggles{true, true};
    ep.kv_type = GgmlType::F16;
    eng = std::make_unique<eager::EagerSession>(*model, ep);
  } else {
    SessionParams sp;
    sp.n_ctx = std::max<int64_t>(512, static_cast<int64_t>(toks.size()));
    sp.n_threads = threads;
    eng = std::make_unique<Session>(*model, sp);
  }
  FILE* f = fopen((std::string(argv[3]) + ".logits").c_str(), "wb");
  auto lg = eng->eval_last(std::span<const int32_t>(toks.data(), np), 0);
  MINFER_ASSERT((int)lg.size() == nv, "vocab");
  const int n = (int)toks.size() - np;
  for (int i = 0; i < n; ++i) {
    fwrite(lg.data(), 4, nv, f);
    if (i + 1 < n) lg = eng->eval_last(std::span<const int32_t>(&toks[np + i], 1), np + i);
  }
  fclose(f);
  return 0;
}
