#!/bin/bash
# For one GGUF and prompt: llama.cpp greedy tokens + logits, minfer's logits on the same tokens,
# a float64 numpy forward (npref.py, Qwen2 only) unless NOREF=1, and the summary line.
# usage: bench/numerics/run.sh MODEL.gguf "PROMPT" TAG [N=32]   (in the output directory)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); OUT=${OUT:-/tmp/minfer-numerics}
m=$1; prompt=$2; tag=$3; n=${4:-32}
"$OUT/lcdump" "$m" "$prompt" "$n" "lc_$tag" 2>>lcdump.log
"$OUT/mfdump" "$m" "lc_$tag.tok" "mf_$tag" 2
PY=${PYTHON:-/usr/bin/python3}  # needs numpy; npref.py also llama.cpp's gguf-py
if [ "${NOREF:-0}" = 1 ]; then
  "$PY" "$here/steps.py" "lc_$tag" "mf_$tag" | tail -2
else
  "$PY" "$here/npref.py" "$m" "lc_$tag.tok" "np_$tag"
  "$PY" "$here/summary.py" "$tag"
fi
