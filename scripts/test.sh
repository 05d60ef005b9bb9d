#!/usr/bin/env bash
# Builds minfer and runs every test: a Release build, then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer, the concurrent tests under ThreadSanitizer, and
# every libFuzzer target (fuzz/) for a short budget under ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)
scripts/build.sh build
# planner_exact_slow asserts that a 10-second exact search reaches the best known heights: a
# figure that depends on how busy the machine is, so it is a benchmark, run on demand with
# `ctest --test-dir build -L planner_exact_slow`; the cheap exact-mode checks run here.
(cd build && ctest --output-on-failure -j "$jobs" -LE planner_exact_slow)
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMINFER_SANITIZE=ON -DMINFER_BUILD_BENCH=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j "$jobs" -LE slow)
# ThreadSanitizer: only the thread pool and the buffer pool's tests (tests/CMakeLists.txt builds
# just those two, against their own sources, when MINFER_TSAN is on).
if [ ! -f build-tsan/build.ninja ]; then
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMINFER_TSAN=ON \
    -DMINFER_BUILD_BENCH=OFF >/dev/null
fi
cmake --build build-tsan --target test_thread_pool test_eager_pool -j "$jobs"
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j "$jobs")
# Fuzzing: each fuzz/*_fuzz.cpp for MINFER_CI_FUZZ_SECONDS (default 20) from its seed corpus; a
# finding fails the run (docs/RELIABILITY.md has the longer runs).
scripts/fuzz.sh "${MINFER_CI_FUZZ_SECONDS:-20}"
