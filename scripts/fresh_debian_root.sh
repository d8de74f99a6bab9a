#!/usr/bin/env bash
# Makes a fresh Debian 12 root (debootstrap, minbase) with nothing but Python from its own
# packages (python3, python3-venv: no -dev package), for trying an artifact where nothing of
# this build machine is installed (tests/package/wheel_fresh_root_test.sh).
#   scripts/fresh_debian_root.sh DIR
# The first run downloads the packages from the mirror ($DEBIAN_MIRROR, else deb.debian.org)
# and keeps a tarball of the root in $DDP_ROOT_CACHE (default /var/cache/ddplaunch, else
# ~/.cache/ddplaunch); later runs unpack it (a few seconds). Needs root and debootstrap.
set -euo pipefail
dir=${1:?usage: fresh_debian_root.sh DIR}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache_dir=${DDP_ROOT_CACHE:-/var/cache/ddplaunch}
mkdir -p "$cache_dir" 2>/dev/null || cache_dir=$HOME/.cache/ddplaunch
mkdir -p "$cache_dir"
tarball=$cache_dir/debian12-python-root.tar.gz
packages=python3,python3-venv

[ "$(id -u)" = 0 ] || { echo "fresh_debian_root.sh: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null ||
  { echo "fresh_debian_root.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
mkdir -p "$dir"
[ -z "$(ls -A "$dir")" ] || { echo "fresh_debian_root.sh: $dir is not empty" >&2; exit 1; }
if [ ! -s "$tarball" ]; then
  staging=$(mktemp -d "$cache_dir/root.XXXXXX")
  trap 'rm -rf "$staging"' EXIT
  echo "fresh_debian_root.sh: debootstrap bookworm ($packages) from $mirror" >&2
  debootstrap --variant=minbase --include="$packages" bookworm "$staging" "$mirror" \
    >"$staging.log" 2>&1 || { tail -20 "$staging.log" >&2; rm -f "$staging.log"; exit 1; }
  rm -f "$staging.log"
  rm -rf "$staging"/var/cache/apt/archives/*.deb
  tar -C "$staging" -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
fi
tar -C "$dir" -xzf "$tarball"
# The tarball's "." is the staging folder mktemp made (0700): a root's / must let every user
# through (a package's postinst running as its own user, e.g. munge's, fails otherwise).
chmod 0755 "$dir"
