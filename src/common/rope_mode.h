// RopeMode: how RoPE pairs a head's dimensions. Shared by the graph IR (OpParams::rope_mode) and
// the CPU kernels (RopeParams), which must not depend on the graph IR for this one enum.
// A plain enum: no ownership, thread safety, failure or cost.
#pragma once

#include <cstdint>

namespace minfer {

enum class RopeMode : uint8_t { Normal = 0, Neox = 2 };  // llama.cpp's mode numbers

}  // namespace minfer
