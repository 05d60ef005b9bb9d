#!/usr/bin/env bash
# aarch64 cross build of the kernel and model tests, run under qemu-aarch64 user emulation:
# the NEON / NEON+dotprod matmul tiles (src/backend/cpu/matmul_neon.inc) against the reference
# kernels at every SIMD level, and stories260K end to end against the llama.cpp goldens.
# Correctness only: emulated timings say nothing about ARM speed (docs/RELIABILITY.md).
#
# Usage: scripts/test-arm.sh [ctest args...]   (build dir: build-arm)
# Installs what it needs (Debian 12, root or sudo): the cross compiler, qemu-user, and the
# target's libraries as multiarch :arm64 packages (adds the arm64 dpkg architecture once).
set -euo pipefail
cd "$(dirname "$0")/.."
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
pkgs=(g++-aarch64-linux-gnu qemu-user libfmt-dev:arm64 libpcre2-dev:arm64 libgtest-dev:arm64
      libgmock-dev:arm64 libcpp-httplib-dev:arm64)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "test-arm: installing ${missing[*]}" >&2
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo_cmd dpkg --add-architecture arm64
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

# The tests that exercise the CPU kernels and the model on stories260K (every other test is
# architecture-neutral code that the x86 runs already cover); model_fused_ffn holds the NEON
# GLU tails to the bit (fused gate/up rows against the separate path's flat calls).
targets=(test_kernels test_kv_kernels test_numerics test_cpu_backend test_quant test_model
         test_golden test_model_fused_ffn)
if [ ! -f build-arm/build.ninja ]; then
  cmake -S . -B build-arm -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DMINFER_BUILD_BENCH=OFF >/dev/null
fi
ninja -C build-arm -j "${MINFER_ARM_JOBS:-$(nproc)}" "${targets[@]}"
regex="^($(IFS='|'; echo "${targets[*]#test_}"))\$"
# Labels are the component names (tests/CMakeLists.txt); the emulator is ~10-50x slower than
# native, so give each test room.
(cd build-arm && ctest --output-on-failure -j "${MINFER_ARM_JOBS:-$(nproc)}" -L "$regex" \
   --timeout 900 "$@")
