#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR] [extra cmake args...]: configure and build with Ninja.
# Configures when BUILD_DIR has no build.ninja yet, or when cmake args are given (they update
# the cache, e.g. -DMINFER_BUILD_TESTS=ON after a demo build that turned the tests off).
# MINFER_TARGETS="minfer ..." builds only those targets (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ] || (($#)); then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
targets=()
[ -n "${MINFER_TARGETS:-}" ] && targets=(--target $MINFER_TARGETS)
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
