#!/usr/bin/env bash
# Puts the handwritten digits set (1797 8x8 images, 10 classes) at data/digits.csv.gz, taken
# from Debian's python3-sklearn package WITHOUT installing scikit-learn: the .deb is downloaded
# and unpacked into a temporary directory. Idempotent: does nothing when the file is there.
# Usage: scripts/fetch_digits.sh [destination]   (default: data/digits.csv.gz)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-data/digits.csv.gz}
if [ -s "$DEST" ]; then
  echo "fetch_digits: $DEST already present"
  exit 0
fi
mkdir -p "$(dirname "$DEST")"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd_tmp_download() {
  (cd "$TMP" && apt-get download python3-sklearn >/dev/null 2>"$TMP/apt.err")
}
if ! cd_tmp_download; then
  # A fresh machine may have no package lists yet.
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  cd_tmp_download || { cat "$TMP/apt.err" >&2; echo "fetch_digits: apt-get download python3-sklearn failed" >&2; exit 1; }
fi
dpkg -x "$TMP"/python3-sklearn_*.deb "$TMP/root"
SRC=$(find "$TMP/root" -path '*sklearn/datasets/data/digits.csv.gz' | head -n 1)
if [ -z "$SRC" ]; then
  echo "fetch_digits: the python3-sklearn package holds no sklearn/datasets/data/digits.csv.gz" >&2
  exit 1
fi
cp "$SRC" "$DEST.tmp.$$"
mv "$DEST.tmp.$$" "$DEST"
echo "fetch_digits: wrote $DEST ($(zcat "$DEST" | wc -l) rows)"
