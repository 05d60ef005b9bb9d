// lcdump: greedy generation with llama.cpp (linked from its static libraries, see build.sh),
// dumping the tokens and each step's logits. Numerics checks only; not part of minfer.
// usage: lcdump MODEL PROMPT N OUTPREFIX
//   OUTPREFIX.tok: "n_prompt n_vocab" then every token id (prompt + N generated)
//   OUTPREFIX.logits: f32 [N][n_vocab], the logits each generated token was picked from
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage\n");
    return 2;
  }
  const char* path = argv[1];
  std::string prompt = argv[2];
  int n = atoi(argv[3]);
  std::string out = argv[4];
  llama_backend_init();
  auto mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(path, mp);
  if (!model) return 1;
  auto cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int nv = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> toks(prompt.size() + 8);
  int nt =
      llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), toks.size(), true, true);
  toks.resize(nt);
  FILE* fl = fopen((out + ".logits").c_str(), "wb");
  std::vector<llama_token> all = toks;
  llama_batch b = llama_batch_get_one(toks.data(), toks.size());
  if (llama_decode(ctx, b)) return 1;
  for (int i = 0; i < n; ++i) {
    const float* lg = llama_get_logits_ith(ctx, -1);
    fwrite(lg, 4, nv, fl);
    int best = 0;
    for (int j = 1; j < nv; ++j)
      if (lg[j] > lg[best]) best = j;
    all.push_back(best);
    llama_token t = best;
    if (i + 1 < n) {
      b = llama_batch_get_one(&t, 1);
      if (llama_decode(ctx, b)) return 1;
    }
  }
  fclose(fl);
  FILE* ft = fopen((out + ".tok").c_str(), "w");
  fprintf(ft, "%d %d\n", nt, nv);
  for (auto t : all) fprintf(ft, "%d ", t);
  fprintf(ft, "\n");
  fclose(ft);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
