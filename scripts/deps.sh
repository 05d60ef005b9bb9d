#!/usr/bin/env bash
# Installs the Debian 12 packages minfer builds and tests with (chromium renders `minfer plan -o html`
# in a test; clang and its runtime libraries (libFuzzer, a Recommends that --no-install-recommends
# would skip) build the fuzz targets; xz-utils unpacks the committed tokenizer vocabularies in
# tests/data/vocab), only those missing.
set -euo pipefail
pkgs=(g++ clang libclang-rt-14-dev cmake ninja-build pkg-config libgtest-dev libgmock-dev
      libbenchmark-dev libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libhwy-dev
      libcpp-httplib-dev chromium xz-utils)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "minfer: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
