#!/usr/bin/env bash
# Builds minfer and runs every test: a Release build, then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer, the concurrent tests under ThreadSanitizer, and
# every libFuzzer target (fuzz/) for a short budget under ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
jobs=$(nproc)
# Tests and benches on (scripts/demo.sh may have configured build/ without them).
scripts/build.sh build -DMINFER_BUILD_TESTS=ON -DMINFER_BUILD_BENCH=ON
# planner_exact_slow asserts that a 10-second exact search reaches the best known heights: a
# figure that depends on how busy the machine is, so it is a benchmark, run on demand with
# `ctest --test-dir build -L planner_exact_slow`; the cheap exact-mode checks run here.
(cd build && ctest --output-on-failure -j "$jobs" -LE planner_exact_slow)
# Sanitizer builds use -O1 -g1 (line tables: enough for symbolised reports): half the compile
# time of RelWithDebInfo's -O2 -g, which made the ASan build the largest part of CI.
san_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
scripts/build.sh build-asan "${san_flags[@]}" -DMINFER_SANITIZE=ON -DMINFER_BUILD_BENCH=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j "$jobs" -LE slow)
# ThreadSanitizer: the thread pool's, the buffer pool's and the server's HTTP tests (32
# concurrent clients, disconnects, shutdown over the fake engine); tests/CMakeLists.txt builds
# just those, against their own sources, when MINFER_TSAN is on. tests/tsan_server.supp says
# what its three suppressed report classes are and why they are not races in minfer's memory.
if [ ! -f build-tsan/build.ninja ]; then
  cmake -S . -B build-tsan -G Ninja "${san_flags[@]}" -DMINFER_TSAN=ON \
    -DMINFER_BUILD_BENCH=OFF >/dev/null
fi
tsan_targets=(test_thread_pool test_eager_pool test_server_http)
tsan_labels='thread_pool|eager_pool|server_http'
cmake --build build-tsan --target "${tsan_targets[@]}" -j "$jobs"
supp="$PWD/tests/tsan_server.supp"
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$supp" \
   ctest --output-on-failure -j "$jobs" -L "$tsan_labels")
# Fuzzing: each fuzz/*_fuzz.cpp for MINFER_CI_FUZZ_SECONDS (default 20) from its seed corpus; a
# finding fails the run (docs/RELIABILITY.md has the longer runs).
scripts/fuzz.sh "${MINFER_CI_FUZZ_SECONDS:-20}"
