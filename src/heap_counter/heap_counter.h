// Heap-allocation counter: how many allocations went through operator new since the process
// started. `minfer run --mem-report` reports it per decode step, and the tests that assert "no
// heap allocation in steady state" (model_test) take differences of it.
//
// heap_counter.cpp replaces the global operator new / delete (every form: plain, array, aligned
// and nothrow, so the standard library never mixes ours with its own) with malloc-based ones
// that count. Link the library minfer_heap_counter only into executables (the minfer binary, a
// test naming it on its minfer-test-libs line), never into a layer library: whatever links it
// gets the replacement. It is its own translation unit so that the compiler never inlines our
// free()-based delete next to a new-expression it can see, which GCC reports as
// -Wmismatched-new-delete (a false positive: our new is malloc).
//
// Not under the sanitizers (MINFER_SANITIZE): they own operator new there (and check new/delete
// pairing with it). kHeapCounting is then false and heap_allocations() stays 0; callers say
// "not counted" (tests GTEST_SKIP their count assertions).
//
// Ownership: none (a process-wide counter). Thread safety: the counter is atomic and counts
// allocations made on every thread. Failure: the replacement throws std::bad_alloc as the
// standard one does (nullptr from the nothrow forms). Cost: one relaxed atomic add per
// allocation on top of malloc.
#pragma once

#include <cstdint>

namespace minfer {

#ifdef MINFER_SANITIZE
inline constexpr bool kHeapCounting = false;
#else
inline constexpr bool kHeapCounting = true;
#endif

// Allocations through operator new since the process started; take differences.
uint64_t heap_allocations();

}  // namespace minfer
