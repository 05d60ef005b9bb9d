#!/bin/bash
# Builds lcdump (against llama.cpp's static libraries from bench/llamacpp-fetch.sh) and mfdump
# (against a minfer build directory's layer libraries) into OUT (default /tmp/minfer-numerics).
# usage: bench/numerics/build.sh [MINFER_BUILD_DIR (default build)] [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../.." && pwd)
B=$(cd "${1:-$repo/build}" && pwd); OUT=${2:-/tmp/minfer-numerics}
LC=${MINFER_LLAMACPP_CACHE:-$HOME/.cache/minfer/llamacpp}
mkdir -p "$OUT"
g++ -O2 -std=c++17 "$here/lcdump.cpp" -I"$LC/src/include" -I"$LC/src/ggml/include" \
  "$LC/build/src/libllama.a" "$LC/build/ggml/src/libggml.a" "$LC/build/ggml/src/libggml-cpu.a" \
  "$LC/build/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -o "$OUT/lcdump"
libs=()
for l in eager model sched sample tokenizer template backend/sim backend/cpu alloc planner backend graph gguf kv common; do
  a="$B/src/$l/libminfer_${l//\//_}.a"
  [ -f "$a" ] && libs+=("$a")
done
g++ -O2 -std=c++20 -I"$repo/src" "$here/mfdump.cpp" "${libs[@]}" -lfmt -lpcre2-8 -lpthread \
  -o "$OUT/mfdump"
echo "built $OUT/lcdump $OUT/mfdump"
