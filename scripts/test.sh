#!/usr/bin/env bash
# Builds minfer and runs every test: a Release build, then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)
scripts/build.sh build
(cd build && ctest --output-on-failure -j "$jobs")
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMINFER_SANITIZE=ON -DMINFER_BUILD_BENCH=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j "$jobs" -LE slow)
