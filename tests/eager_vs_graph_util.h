// Eager vs graph on one model: the same node list, run by the eager GraphRunner and by graph
// mode's Session, must give the same logits. Shared by eager_forward_test (the tiny `minfer
// gen` presets) and eager_presets_slow_test (the full-size presets, one layer deep).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "eager/forward.h"
#include "model/model.h"
#include "model/session.h"
#include "numeric_test_util.h"

namespace minfer::test {

struct EagerVsGraph {
  double max_diff = 0;        // largest |eager - graph| over every compared logit
  int64_t outstanding = -1;   // eager pool buffers still out after the last eval
  int64_t allocs_after = -1;  // eager pool heap allocations after warm-up
  bool finite = true;         // every eager logit finite (a NaN would hide from max_diff)
};

inline bool all_finite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// Prefill of 7 tokens in micro-batches of 4 with logits for rows 0, 3 and 6, then 4 decode
// steps fed with eager's argmax. Token ids are taken modulo the vocabulary. The caller has run
// model.prepare_fused_qkv() when `fused`.
inline EagerVsGraph compare_eager_and_graph(Model& model, bool fused, GgmlType kv_type,
                                            int n_threads = 1) {
  const int64_t V = model.hparams().n_vocab;
  SessionParams gp;
  gp.n_ctx = 64;
  gp.n_ubatch = 4;
  gp.n_threads = n_threads;
  gp.fusion = FusionToggles{fused, fused, fused};
  gp.type_k = gp.type_v = kv_type;
  eager::EagerParams ep;
  ep.n_ctx = 64;
  ep.n_ubatch = 4;
  ep.n_threads = n_threads;
  ep.fusion = gp.fusion;
  ep.kv_type = kv_type;
  Session graph(model, gp);  // first: it repacks the weights, and eager then reads them too
  eager::EagerSession eager(model, ep);
  std::vector<int32_t> prompt;
  for (int32_t t : {1, 5, 9, 33, 2, 60, 17}) prompt.push_back(static_cast<int32_t>(t % V));
  const std::vector<int32_t> rows = {0, 3, 6};
  EagerVsGraph r;
  std::vector<float> g;
  {
    const std::span<const float> s = graph.eval(prompt, 0, rows);
    g.assign(s.begin(), s.end());
  }
  {
    const std::span<const float> e = eager.eval(prompt, 0, rows);
    r.max_diff = max_abs_diff(g, e);
    r.finite = all_finite(e) && all_finite(g);
  }
  int64_t pos = static_cast<int64_t>(prompt.size());
  int32_t tok = static_cast<int32_t>(7 % V);
  for (int step = 0; step < 4; ++step, ++pos) {
    const int32_t one[1] = {tok};
    {
      const std::span<const float> s = graph.eval_last(one, pos);
      g.assign(s.begin(), s.end());
    }
    const std::span<const float> e = eager.eval_last(one, pos);
    r.max_diff = std::max(r.max_diff, max_abs_diff(g, e));
    r.finite = r.finite && all_finite(e) && all_finite(g);
    tok = static_cast<int32_t>(std::max_element(e.begin(), e.end()) - e.begin());
  }
  const eager::EagerMemReport m = eager.eager_mem_report();
  r.outstanding = m.outstanding;
  r.allocs_after = m.heap_allocations_after_warmup;
  return r;
}

}  // namespace minfer::test
