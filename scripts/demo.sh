#!/usr/bin/env bash
# The main job: build the minfer binary (only that target: no tests or benches) and generate
# text from the default model. One line per phase on stderr; apt and ninja output go to logs
# shown only on failure. Extra arguments go to `minfer run`.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "minfer demo: $*" >&2; }
say "packages (scripts/deps.sh: build only; the test packages are scripts/test.sh's)"
scripts/deps.sh
say "building the minfer target in build/ (log: build/demo-build.log)"
mkdir -p build
start=$SECONDS
# Tests and benches off: their packages are not installed here; scripts/test.sh turns them on.
if ! MINFER_TARGETS=minfer scripts/build.sh build -DMINFER_BUILD_TESTS=OFF \
    -DMINFER_BUILD_BENCH=OFF >build/demo-build.log 2>&1; then
  tail -30 build/demo-build.log >&2
  exit 1
fi
say "built build/minfer in $((SECONDS - start)) s"
model=../shared/models/stories260K.gguf
if [ ! -f "$model" ]; then
  model=build/tiny-random.gguf
  say "$model: no trained model in ../shared; generating a RANDOM-weight one (its text is noise)"
  [ -f "$model" ] || ./build/minfer gen --preset tiny-llama --type f32 -o "$model" >/dev/null
fi
say "running: minfer run -m $model -p \"Once upon a time\" -n 96 (the header's model line names it)"
./build/minfer run -m "$model" -p "Once upon a time" -n 96 "$@"
