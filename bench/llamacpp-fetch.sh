#!/usr/bin/env bash
# bench/llamacpp-fetch.sh: get llama.cpp's llama-bench, llama-completion, llama-batched-bench and
# llama-server (bench/compare-serve)
# into a cache folder OUTSIDE the repository, building them once from the source bundled in the
# npm package node-llama-cpp@3.21.1. Nothing of llama.cpp is ever written into this repository.
#
# Usage: bench/llamacpp-fetch.sh [--print-bin-dir] [--jobs N] [--isa native|avx2]
#   Cache: $MINFER_LLAMACPP_CACHE (default ~/.cache/minfer/llamacpp). Layout:
#     pkg/      the unpacked npm package (package/llama/gitRelease.bundle is llama.cpp's source)
#     src/      a clone of that bundle
#     build/    CMake build (Release, CPU only, GGML_NATIVE=ON, no CURL/OpenSSL)
#     bin/      llama-bench, llama-completion, llama-batched-bench, llama-server (copied from
#               build/bin), plus a .stamp. A cache built before llama-server joined the list
#               gets only llama-server built (the other targets are up to date).
#     build-avx2/, bin-avx2/  the same with --isa avx2: GGML_NATIVE=OFF, AVX2+FMA+F16C on,
#               AVX-512 and AVX-VNNI off, so an AVX-512 machine can stand in for an AVX2-only
#               one (compare with minfer under MINFER_SIMD=avx2)
#   Idempotent: if bin/.stamp matches the package version, nothing is done.
#   The build runs under `nice -n 19` (the machine is shared) with -j2 by default; it takes
#   about 15-30 minutes on 2 busy cores. Output of each step goes to $CACHE/fetch.log.
#   With --print-bin-dir the script prints only the bin folder on stdout (after building if
#   needed), so callers can do: bin=$(bench/llamacpp-fetch.sh --print-bin-dir).
set -euo pipefail

NLC_VERSION=3.21.1
CACHE=${MINFER_LLAMACPP_CACHE:-$HOME/.cache/minfer/llamacpp}
JOBS=2
PRINT_BIN_DIR=0
ISA=native
while [ $# -gt 0 ]; do
  case "$1" in
    --print-bin-dir) PRINT_BIN_DIR=1 ;;
    --jobs) JOBS=$2; shift ;;
    --isa) ISA=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "llamacpp-fetch: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

say() { echo "llamacpp-fetch: $*" >&2; }
die() { say "error: $*"; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found; $2"; }

case "$ISA" in
  native) SUFFIX=""
    ISA_FLAGS=(-DGGML_NATIVE=ON) ;;
  avx2) SUFFIX="-avx2"
    ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
      -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
      -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
  *) echo "llamacpp-fetch: --isa must be native or avx2, not '$ISA'" >&2; exit 2 ;;
esac
BIN=$CACHE/bin$SUFFIX
BUILD=$CACHE/build$SUFFIX
STAMP="node-llama-cpp@$NLC_VERSION${SUFFIX:+ isa=$ISA}"
if [ -f "$BIN/.stamp" ] && [ "$(cat "$BIN/.stamp")" = "$STAMP" ] &&
   [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-completion" ] &&
   [ -x "$BIN/llama-batched-bench" ] && [ -x "$BIN/llama-server" ]; then
  [ "$PRINT_BIN_DIR" = 1 ] && echo "$BIN"
  exit 0
fi

need npm "install Node.js and npm (Debian: apt-get install -y nodejs npm)"
need git "install git (Debian: apt-get install -y git)"
need cmake "install CMake (Debian: apt-get install -y cmake)"
need c++ "install a C++ compiler (Debian: apt-get install -y g++)"
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi

mkdir -p "$CACHE"
LOG=$CACHE/fetch$SUFFIX.log
# Only one fetch at a time per cache (two benchmark runs started together must not race); the
# log is emptied only once the lock is held, so a waiting fetch never wipes a running one's.
exec 9>"$CACHE/.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9 || die "cannot lock $CACHE/.lock"
fi
: >"$LOG"

# 1. The npm package (about 35 MB), unpacked. `npm pack` fetches without installing anything.
if [ ! -f "$CACHE/pkg/package/llama/gitRelease.bundle" ]; then
  say "downloading node-llama-cpp@$NLC_VERSION from the npm registry"
  rm -rf "$CACHE/pkg.tmp" && mkdir -p "$CACHE/pkg.tmp"
  (cd "$CACHE/pkg.tmp" && npm pack --silent "node-llama-cpp@$NLC_VERSION" >>"$LOG" 2>&1) ||
    die "npm pack node-llama-cpp@$NLC_VERSION failed (see $LOG)"
  tar -xzf "$CACHE/pkg.tmp/node-llama-cpp-$NLC_VERSION.tgz" -C "$CACHE/pkg.tmp" ||
    die "cannot unpack the npm package"
  [ -f "$CACHE/pkg.tmp/package/llama/gitRelease.bundle" ] ||
    die "the package has no llama/gitRelease.bundle; its layout changed"
  rm -rf "$CACHE/pkg" && mv "$CACHE/pkg.tmp" "$CACHE/pkg"
fi

# 2. llama.cpp's source from the git bundle.
if [ ! -f "$CACHE/src/CMakeLists.txt" ]; then
  say "cloning llama.cpp from the package's git bundle"
  rm -rf "$CACHE/src"
  git clone -q "$CACHE/pkg/package/llama/gitRelease.bundle" "$CACHE/src" >>"$LOG" 2>&1 ||
    die "git clone of the bundle failed (see $LOG)"
fi
[ -d "$CACHE/src/tools/llama-bench" ] || die "$CACHE/src has no tools/llama-bench"
[ -d "$CACHE/src/tools/completion" ] ||
  die "$CACHE/src has no tools/completion (llama-completion); this llama.cpp is too old/new"
[ -d "$CACHE/src/tools/batched-bench" ] ||
  die "$CACHE/src has no tools/batched-bench (llama-batched-bench); this llama.cpp is too old/new"
[ -d "$CACHE/src/tools/server" ] || die "$CACHE/src has no tools/server (llama-server)"

# 3. Build only the four tools. CPU only, native ISA, static libs so the binaries are
#    self-contained; no network features (LLAMA_CURL is the old name, LLAMA_OPENSSL the new one).
#    llama-server without its web UI: no prebuilt assets fetched, none built (the API is what
#    bench/compare-serve measures).
say "configuring llama.cpp (log: $LOG)"
nice -n 19 cmake -S "$CACHE/src" -B "$BUILD" "${GEN[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF "${ISA_FLAGS[@]}" \
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON \
  >>"$LOG" 2>&1 || die "cmake configure failed (see $LOG)"
TOOLS=(llama-bench llama-completion llama-batched-bench llama-server)
say "building ${TOOLS[*]} with -j$JOBS under nice -n 19 (slow; log: $LOG)"
nice -n 19 cmake --build "$BUILD" -j "$JOBS" --target "${TOOLS[@]}" \
  >>"$LOG" 2>&1 || die "build failed (see $LOG)"

mkdir -p "$BIN"
for t in "${TOOLS[@]}"; do
  f=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -n1)
  [ -n "$f" ] || die "built, but $t is not in $BUILD"
  cp -f "$f" "$BIN/$t"
done
echo "$STAMP" >"$BIN/.stamp"
say "llama.cpp ready in $BIN"
[ "$PRINT_BIN_DIR" = 1 ] && echo "$BIN"
exit 0
