// Heap allocations made through operator new since the process started (heap_counter.cpp
// replaces the global operator new/delete of the minfer binary). Thread safety: atomic.
#pragma once

#include <cstdint>

namespace minfer::app {
uint64_t heap_allocations();
}  // namespace minfer::app
