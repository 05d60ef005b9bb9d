#!/usr/bin/env bash
# Builds minfer and runs every test: a Release build, then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
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
