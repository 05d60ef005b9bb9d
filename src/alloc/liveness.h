// Liveness of a compute graph as plain data: which node owns storage, which nodes alias it
// (views, in-place ops), and the live interval of every owned buffer — all in BUILD ORDER.
//
// This is the single source of truth for "when are a node's bytes precious". The size-class
// GraphAllocator consumes it, and so can an offset planner (arena): intervals[] is exactly the
// interval-packing instance (persistent KV regions and weights are outside it).
//
// Rules (design doc graph-allocator-and-kv-cache §2.2-2.4, §3.4):
//  * Steps are build positions 0..n-1 — the order the scheduler executes. Never a Kahn order
//    (the G3 bug: a buffer recycled while its reader was still to run).
//  * A buffer is busy over the CLOSED step range [first, last]. Two intervals may share bytes
//    only when one's last < the other's first.
//  * Graph inputs are host-filled before step 0, so they are live over [0, n]; outputs are
//    read after the last step, so they end at n (bug 2b: two inputs sharing one buffer).
//  * Dead nodes — no live consumer, not an output, no side effect — get no storage and are not
//    executed. Deadness propagates backwards (a node read only by dead nodes is dead).
//    Inputs are never dead (they are filled by name); KvStore and QkvBiasRopeStore have side
//    effects (they write the KV regions) and are never dead.
//  * Weights never get storage (their bytes are external).
//  * A View has no storage: it aliases its source's storage at an offset and extends the
//    storage's interval through its own consumers. Views of views compose offsets.
//  * Silu / Rope / QkvBiasRopeStore / SwiGlu (and GeGlu / Scale / SoftCap) alias src0's storage
//    in place when: every node on the storage chain from src0 back to the owner (through views
//    and earlier in-place aliases) has exactly one live consumer edge, none of them is an input
//    or output, every view on the chain is contiguous, the owner is an ordinary buffer (not a
//    weight or KV region) on the same backend as the op, and the op's output has exactly the
//    bytes of src0's window.
//    Otherwise the op gets its own buffer.
//
// Cost: O(nodes + edges) time and memory. Thread safety: pure function.
// Failure: the graph must be valid (Graph::validate()); violations are MINFER_ASSERTs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace minfer {

enum class StorageKind : uint8_t {
  None,      // dead: no buffer, not executed
  Weight,    // external bytes, never a buffer
  Own,       // owns a buffer: the root of one interval
  View,      // aliases its source's storage at an offset; not executed
  InPlace,   // in-place op writing into its src0's storage
  KvRegion,  // KvStore: output is the layer's persistent K region (outside intervals)
};
std::string_view storage_kind_name(StorageKind k);

// One buffer's lifetime. `bytes` is the owner node's real byte size.
struct LiveInterval {
  NodeId root = kNoNode;
  BackendKind backend = BackendKind::Cpu;
  int32_t first = 0;  // step of the first write (0 for inputs: filled before execution)
  int32_t last = 0;   // last step reading it directly or through views/aliases (n if pinned)
  uint64_t bytes = 0;
  bool pinned = false;  // input or output (or an alias/view of one is an output)
};

struct Liveness {
  int32_t n_steps = 0;                  // number of nodes; pinned intervals end here
  std::vector<StorageKind> kind;        // per node
  std::vector<NodeId> root;             // per node: the node that owns its bytes (self for Own /
                                        // KvRegion, the weight for weight views), kNoNode if None
  std::vector<uint64_t> offset;         // per node: byte offset of its window inside root's bytes
  std::vector<uint64_t> len;            // per node: byte length of its window
  std::vector<int32_t> first;           // per node: step its value is written (0 for inputs: filled
                                        // before execution; a view's = its source's), -1 if none
  std::vector<int32_t> last_use;        // per node: its own last reader (n if pinned), -1 if dead
  std::vector<int32_t> n_consumers;     // per node: live consumer edges
  std::vector<int32_t> interval_of;     // per node: index into intervals for Own nodes, else -1
  std::vector<LiveInterval> intervals;  // one per Own node, ordered by root id

  bool executes(NodeId id) const;  // a kernel runs for it (not None/Weight/View/Input)
  const LiveInterval* interval_for(NodeId id) const;  // the interval holding id's bytes
  std::string to_string(const Graph& g) const;
};

// Ops that write state outside their output (never dead even with no consumer).
bool op_has_side_effects(Op op);

// g must be valid (acyclic, sources before consumers).
Liveness compute_liveness(const Graph& g);

}  // namespace minfer
