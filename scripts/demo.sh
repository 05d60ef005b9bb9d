#!/usr/bin/env bash
# The main job: build minfer and generate text from the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
model=../shared/models/stories260K.gguf
if [ ! -f "$model" ]; then
  echo "minfer: $model not found; generating a small RANDOM-weight model (its text is noise)" >&2
  model=build/tiny-random.gguf
  [ -f "$model" ] || ./build/minfer gen --preset tiny-llama --type f32 -o "$model"
fi
./build/minfer run -m "$model" -p "Once upon a time" -n 96 "$@"
