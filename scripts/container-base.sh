#!/usr/bin/env bash
# scripts/container-base.sh [ENGINE]: makes the two base images deploy/Containerfile starts FROM,
# docker.io/library/debian:12 and debian:12-slim, from Debian's package mirror, for hosts that
# reach a Debian mirror but no image registry. ENGINE is podman (default) or docker; the images
# are imported under the names a registry pull would give, so the Containerfile is unchanged and
# `podman build` finds them locally instead of pulling.
#
# Each image is a Debian 12 minbase root file system from mmdebstrap (installed with apt if
# missing; needs root): the packages of Priority required plus apt, with bookworm, -updates and
# -security in its sources, like the official images. -slim leaves out documentation, man pages
# and locales (dpkg path-exclude, kept in the image so later installs leave them out too).
# Cost: 4-10 minutes each on a loaded 2-core machine (about 1 CPU-minute), mostly downloading
# and unpacking 96 packages; 120-170 MB tarballs in a temporary folder, deleted on exit.
# MINFER_DEBIAN_MIRROR overrides http://deb.debian.org (a local mirror or apt proxy).
set -euo pipefail
engine=${1:-podman}
case "$engine" in
  podman|docker) ;;
  *) echo "usage: scripts/container-base.sh [podman|docker]" >&2; exit 2 ;;
esac
command -v "$engine" >/dev/null || { echo "container-base: $engine not installed" >&2; exit 1; }
if ! command -v mmdebstrap >/dev/null; then
  echo "container-base: installing mmdebstrap" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi
mirror=${MINFER_DEBIAN_MIRROR:-http://deb.debian.org}
sources=("deb $mirror/debian bookworm main" "deb $mirror/debian bookworm-updates main"
         "deb $mirror/debian-security bookworm-security main")
tmp=$(mktemp -d /tmp/minfer-base.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# What the official -slim image drops (copyright files stay: the licences ask for them).
slim=(--dpkgopt='path-exclude=/usr/share/doc/*'
      --dpkgopt='path-include=/usr/share/doc/*/copyright'
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
      --dpkgopt='path-exclude=/usr/share/locale/*'
      --dpkgopt='path-include=/usr/share/locale/locale.alias'
      --dpkgopt='path-exclude=/usr/share/lintian/*' --dpkgopt='path-exclude=/usr/share/linda/*')
build() {  # NAME [mmdebstrap options...]
  local name=$1 start=$SECONDS
  shift
  echo "container-base: $name (mmdebstrap, log $tmp/$name.log)" >&2
  if ! mmdebstrap --variant=minbase "$@" bookworm "$tmp/$name.tar" "${sources[@]}" \
      >"$tmp/$name.log" 2>&1; then
    tail -20 "$tmp/$name.log" >&2
    exit 1
  fi
  # CMD as in the official images; the tarball becomes one layer.
  if ! "$engine" import --change 'CMD ["bash"]' "$tmp/$name.tar" "docker.io/library/debian:$name" \
      >>"$tmp/$name.log" 2>&1; then
    tail -20 "$tmp/$name.log" >&2
    exit 1
  fi
  rm -f "$tmp/$name.tar"
  echo "container-base: imported docker.io/library/debian:$name in $((SECONDS - start)) s" >&2
}
build 12
build 12-slim "${slim[@]}"
