// Heap-allocation counter for the tests that assert "no heap allocation in steady state".
//
// heap_counter.cpp replaces the global operator new / delete (every form: plain, array, aligned
// and nothrow, so the standard library never mixes ours with its own) with malloc-based ones
// that count. It is its own translation unit, in the library minfer_test_heap_counter that a
// test names on its minfer-test-libs line, so that (a) test binaries share one replacement
// instead of each defining one, and (b) the compiler never inlines our free()-based delete next
// to a new-expression it can see, which GCC reports as -Wmismatched-new-delete (a false
// positive: our new is malloc).
//
// Not under the sanitizers (MINFER_SANITIZE): they own operator new there. kHeapCounting is then
// false and heap_allocations() stays 0; tests GTEST_SKIP their count assertions.
// Thread safety: the counter is atomic and counts allocations made on every thread.
// Cost: one relaxed atomic add per allocation.
#pragma once

#include <cstdint>

namespace minfer::test {

#ifdef MINFER_SANITIZE
inline constexpr bool kHeapCounting = false;
#else
inline constexpr bool kHeapCounting = true;
#endif

// Allocations through operator new since the process started; take differences.
uint64_t heap_allocations();

}  // namespace minfer::test
