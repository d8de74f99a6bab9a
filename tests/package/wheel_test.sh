#!/usr/bin/env bash
# The wheel of scripts/build_wheel.sh, pip-installed into a fresh venv (Debian's python3 with
# --system-site-packages, so torch comes from python3-torch and nothing is downloaded): the
# venv's ddplaunch runs and prints the build's version, and ddplaunch_recovery imports.
#   wheel_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

wheel=$(bash "$source_dir/scripts/build_wheel.sh" "$build_dir" "$work/dist")
[ -f "$wheel" ] || fail "build_wheel.sh printed '$wheel', which is not a file"
/usr/bin/python3 -m venv --system-site-packages "$work/venv" || fail "cannot make a venv"
"$work/venv/bin/pip" install --no-index --no-deps --disable-pip-version-check -q "$wheel" ||
  fail "pip could not install $wheel"
version=$("$work/venv/bin/ddplaunch" --version)
expected=$("$build_dir/ddplaunch" --version)
[ "$version" = "$expected" ] || fail "the wheel's ddplaunch --version: '$version', built: '$expected'"
"$work/venv/bin/ddpstore" --version >/dev/null || fail "the wheel's ddpstore does not run"
"$work/venv/bin/python" -c 'import ddplaunch_recovery, ddplaunch_progress
assert ddplaunch_recovery.__file__.startswith("'"$work/venv"'"), ddplaunch_recovery.__file__' ||
  fail "ddplaunch_recovery does not import from the venv"
echo "wheel ok: $(basename "$wheel")"
