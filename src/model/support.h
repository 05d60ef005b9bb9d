// What minfer implements of a GGUF's model description, and the refusal of everything else.
//
// Silent drift is the worst failure a loader can have: a file whose metadata asks for math we
// do not do (soft-capping, a sliding window, an unknown rope scaling type, mixture of experts,
// ...) would load and produce plausible but wrong logits. So every "{arch}.*" key is
// classified: read by HParams, harmless (descriptive only), accepted only at the value that
// changes nothing (e.g. expert_count 0, attention.causal true), or refused. Unknown keys are
// refused too: a key we have never seen may change the math. Likewise ModelWeights::load
// refuses a tensor that no part of the graph reads (weights.h).
//
// Every path that runs a model (run, chat, bench, serve, the eager engine) goes through
// Model::load -> HParams::from_gguf, which calls check_arch_metadata first; `minfer info`
// calls unsupported_reason to say whether and why the file cannot run.
//
// Ownership: none kept. Thread safety: pure functions of the file. Failure:
// check_arch_metadata throws Error(Unsupported) naming the file, the key and the value.
// Cost: one pass over the metadata keys (a few dozen); unsupported_reason also locates the
// tensors (no weight bytes read).
#pragma once

#include <string>

namespace minfer {
namespace gguf {
class File;
}

// Throws Error(Unsupported) for an architecture minfer does not implement or an
// "{arch}.*" metadata key that changes the math and is not implemented.
void check_arch_metadata(const gguf::File& f);

// Empty when the file's metadata and tensors would load as a model; otherwise the message of
// the error that loading it throws (what `minfer info` prints under "runnable").
std::string unsupported_reason(const gguf::File& f);

}  // namespace minfer
