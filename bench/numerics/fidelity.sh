#!/bin/bash
# Makes tests/data/fidelity/: per architecture preset a 2-layer random-weight GGUF from
# `minfer gen` (weights std 0.25: sharp attention, so position handling moves the logits) and llama.cpp's teacher-forced logits on the fixed 4001-token sequence at 37
# positions (1, 64, 1024, 4000 and every 125th), by bench/numerics/lcforce.cpp.
# usage: bench/numerics/fidelity.sh [MINFER_BIN (default build/minfer)]
#   MINFER_LLAMACPP_CACHE: llama.cpp source + build (bench/llamacpp-fetch.sh), default
#   ~/.cache/minfer/llamacpp. Rerun after changing a preset; the test then checks the new files.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../.." && pwd)
BIN=${1:-$repo/build/minfer}
LC=${MINFER_LLAMACPP_CACHE:-$HOME/.cache/minfer/llamacpp}
OUT=${OUT:-/tmp/minfer-numerics}; mkdir -p "$OUT"
g++ -O2 -std=c++17 "$here/lcforce.cpp" -I"$LC/src/include" -I"$LC/src/ggml/include" \
  "$LC/build/src/libllama.a" "$LC/build/ggml/src/libggml.a" "$LC/build/ggml/src/libggml-cpu.a" \
  "$LC/build/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -o "$OUT/lcforce"
dst=$repo/tests/data/fidelity; mkdir -p "$dst"
pos="1 64 1024 4000 $(seq 0 125 4000)"
pos=$(echo $pos | tr ' ' '\n' | sort -n | uniq | tr '\n' ' ')
for preset in ${PRESETS:-tiny-llama3 tiny-llama-linear tiny-qwen2 tiny-qwen2-yarn tiny-qwen3 tiny-phi3 tiny-phi3-longrope}; do
  "$BIN" gen --preset "$preset" --type f16 --layers 2 --std "${STD:-0.25}" -o "$dst/$preset.gguf"
  "$OUT/lcforce" "$dst/$preset.gguf" 4001 "$dst/$preset.lclogits" $pos 2>"$OUT/lcforce-$preset.log"
  echo "$preset: $(stat -c %s "$dst/$preset.gguf") + $(stat -c %s "$dst/$preset.lclogits") bytes"
done
