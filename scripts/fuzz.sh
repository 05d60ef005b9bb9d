#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...]: builds the libFuzzer targets (clang, ASan + UBSan, in
# build-fuzz/, only the fuzz targets and the libraries they link) and runs each fuzz/*_fuzz.cpp
# (or the named ones) for SECONDS (default 60) from a seed corpus the target writes itself (see
# fuzz/fuzz_util.h) plus fuzz/seeds/<name>/ when present. Crashes, sanitizer reports, leaks,
# timeouts (> 10 s per input) and inputs over 2 GiB RSS are findings: the reproducer lands in
# build-fuzz/fuzz-artifacts/ and the script exits non-zero. Prints one summary line per target
# (execs, exec/s, coverage, corpus). A new fuzz/<name>_fuzz.cpp joins without edits here (with
# fuzz/<name>.dict as its libFuzzer dictionary when that file exists).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
dir=${MINFER_FUZZ_BUILD_DIR:-build-fuzz}
jobs=$(nproc)
if [ ! -f "$dir/build.ninja" ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DMINFER_FUZZ=ON -DMINFER_BUILD_TESTS=OFF \
    -DMINFER_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
fi
cmake --build "$dir" --target minfer_fuzz_all -j "$jobs"
targets=("$@")
if ((${#targets[@]} == 0)); then
  for src in fuzz/*_fuzz.cpp; do
    n=$(basename "$src" .cpp)
    targets+=("${n%_fuzz}")
  done
fi
mkdir -p "$dir/fuzz-artifacts" "$dir/fuzz-logs"
status=0
for name in "${targets[@]}"; do
  corpus="$dir/fuzz-corpus/$name"
  mkdir -p "$corpus"
  [ -d "fuzz/seeds/$name" ] && cp -n "fuzz/seeds/$name"/* "$corpus"/ 2>/dev/null || true
  log="$dir/fuzz-logs/$name.log"
  dict=()
  [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")  # a mutation dictionary, if any
  # -rss_limit_mb: a hostile input must not eat the machine; -timeout: nor hang.
  if ! MINFER_FUZZ_SEED_DIR="$corpus" ASAN_OPTIONS=detect_leaks=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$dir/fuzz/fuzz_$name" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$dir/fuzz-artifacts/$name-" "$corpus" >"$log" 2>&1; then
    echo "fuzz $name: FINDING (see $log and $dir/fuzz-artifacts/)" >&2
    tail -40 "$log" >&2
    status=1
    continue
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || echo '?')
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || echo '?')
  files=$(ls "$corpus" | wc -l)
  echo "fuzz $name: ${secs}s, $execs execs, $speed exec/s, cov $cov, ft $ft, corpus $files, no findings"
done
exit $status
