#!/usr/bin/env bash
# scripts/deps.sh [--test] [--list]: installs the Debian 12 packages minfer needs, only those
# missing (--list: prints the package names, one a line, and installs nothing).
#   (no argument)  what building the `minfer` binary needs (scripts/demo.sh)
#   --test         that plus what the tests, benches and fuzz targets need (scripts/test.sh, CI):
#                  gtest/gmock, Google Benchmark, clang and its runtime libraries (libFuzzer, a
#                  Recommends that --no-install-recommends would skip), chromium (renders
#                  `minfer plan -o html` in one test), python3-jinja2 (the template test's
#                  differential check), xz-utils (unpacks the committed tokenizer
#                  vocabularies in tests/data/vocab) and nginx-light (tests/deploy: the test
#                  runs its own nginx from a temporary prefix, never the system service).
# apt runs quietly: its output goes to a log, shown only when it fails.
set -euo pipefail
pkgs=(g++ cmake ninja-build pkg-config libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev
      libhwy-dev libcpp-httplib-dev)
list=0
for a in "$@"; do
  case "$a" in
    --test) pkgs+=(clang libclang-rt-14-dev libgtest-dev libgmock-dev libbenchmark-dev chromium
                   python3-jinja2 xz-utils nginx-light) ;;
    --list) list=1 ;;
    *) echo "usage: scripts/deps.sh [--test] [--list]" >&2; exit 2 ;;
  esac
done
if ((list)); then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
echo "minfer: installing ${#missing[@]} package(s): ${missing[*]}" >&2
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
log=$(mktemp /tmp/minfer-apt.XXXXXX.log)
if ! { $sudo_cmd apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
         "${missing[@]}"; } >"$log" 2>&1; then
  echo "minfer: apt-get failed:" >&2
  tail -30 "$log" >&2
  exit 1
fi
rm -f "$log"
