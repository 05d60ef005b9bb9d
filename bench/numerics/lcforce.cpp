// lcforce: teacher-forced logits from llama.cpp (linked from its static libraries, see
// build.sh) for minfer's fidelity fixtures. Numerics checks only; not part of minfer.
// usage: lcforce MODEL N_TOKENS OUT POS...
//   feeds tokens t_i = (i * 7919 + 13) % n_vocab, i < N_TOKENS (the sequence
//   tests/fidelity_test.cpp uses), one sequence from position 0, and writes OUT:
//   i32 n_vocab, i32 n_pos, i32 pos[n_pos], f32 logits[n_pos][n_vocab] (the logits after the
//   token at each listed position). KV cache f16 (llama.cpp's default, as minfer's).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: lcforce MODEL N_TOKENS OUT POS...\n");
    return 2;
  }
  const int n = atoi(argv[2]);
  std::vector<int> want;
  for (int i = 4; i < argc; ++i) want.push_back(atoi(argv[i]));
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) return 1;
  auto cp = llama_context_default_params();
  cp.n_ctx = n;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::vector<llama_token> toks(n);
  for (int i = 0; i < n; ++i) toks[i] = static_cast<llama_token>((i * 7919LL + 13) % nv);
  std::vector<std::vector<float>> out(want.size());
  llama_batch b = llama_batch_init(512, 0, 1);
  for (int s = 0; s < n; s += 512) {
    b.n_tokens = 0;
    for (int i = s; i < n && i < s + 512; ++i) {
      const int k = b.n_tokens++;
      b.token[k] = toks[i];
      b.pos[k] = i;
      b.n_seq_id[k] = 1;
      b.seq_id[k][0] = 0;
      b.logits[k] = 0;
      for (int p : want) b.logits[k] |= (p == i);
    }
    if (llama_decode(ctx, b)) return 1;
    for (int k = 0; k < b.n_tokens; ++k) {
      if (!b.logits[k]) continue;
      const float* lg = llama_get_logits_ith(ctx, k);
      for (size_t w = 0; w < want.size(); ++w)
        if (want[w] == b.pos[k]) out[w].assign(lg, lg + nv);
    }
  }
  FILE* f = fopen(argv[3], "wb");
  const int np = static_cast<int>(want.size());
  fwrite(&nv, 4, 1, f);
  fwrite(&np, 4, 1, f);
  fwrite(want.data(), 4, np, f);
  for (auto& v : out) {
    if (static_cast<int>(v.size()) != nv) return 3;  // a position past N_TOKENS
    fwrite(v.data(), 4, nv, f);
  }
  fclose(f);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
