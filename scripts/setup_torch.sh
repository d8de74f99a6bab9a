#!/usr/bin/env bash
# Cached PyTorch virtualenvs for the live PyTorch tests (docs/pytorch.md): one venv per line
# of scripts/torch_versions.txt, at ${DDP_TORCH_VENVS:-/var/cache/ddplaunch/venvs}/torch-<v>,
# made with Debian's python3 and `pip install torch==<v> <requirements>` (PyPI's Linux wheels
# are CUDA builds of several GB; they run on CPU).
#
# A venv is complete when its marker (.ddplaunch-complete) holds exactly the line it was made
# from; the marker is written only after pip succeeded and `import torch` gave the version.
# Complete venvs are skipped silently. A venv without the marker whose torch imports at the
# right version (one made by hand, or an older line) only gets the missing requirements; any
# other (half-finished, broken) is re-created. A version that cannot be installed (no
# network) is reported and left out: the tests that need it skip, naming this script.
# Idempotent; one run at a time (flock on the cache folder).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENVS=${DDP_TORCH_VENVS:-/var/cache/ddplaunch/venvs}
PYTHON=/usr/bin/python3  # Debian's, as the 1.13 tests use: not whatever comes first on PATH
MARKER=.ddplaunch-complete

# True when venv $1's python imports torch at version $2 (any local "+cu124" suffix).
torch_is() {
  [ -x "$1/bin/python" ] &&
    "$1/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$2')" \
      >/dev/null 2>&1
}

# Brings venv $1 to the spec line $2 ("<version> <requirement>..."); 0 when complete.
install_venv() {
  local venv=$1 line=$2 version reqs
  read -r version reqs <<<"$line"
  local log="$VENVS/torch-$version.log"
  if ! torch_is "$venv" "$version"; then
    echo "setup_torch: creating $venv (torch==$version, several GB; log: $log)"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv" >"$log" 2>&1 || return 1
  else
    echo "setup_torch: completing $venv ($reqs)"
  fi
  # torch pinned in the same command, so no requirement can move it.
  # shellcheck disable=SC2086  # the requirements are words
  "$venv/bin/pip" install --no-input --progress-bar off "torch==$version" $reqs >>"$log" 2>&1 ||
    return 1
  torch_is "$venv" "$version" || return 1
  printf '%s\n' "$line" >"$venv/$MARKER"
  echo "setup_torch: $venv ready"
}

mkdir -p "$VENVS"
exec 9>"$VENVS/.lock"
flock 9

failed=()
while read -r line; do
  read -ra words <<<"${line%%#*}"
  [ ${#words[@]} -gt 0 ] || continue
  version=${words[0]}
  line="${words[*]}"  # one space between words, as the marker holds it
  venv="$VENVS/torch-$version"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/$MARKER" 2>/dev/null)" = "$line" ]; then
    continue
  fi
  rm -f "$venv/$MARKER"
  install_venv "$venv" "$line" || failed+=("$version")
done <"$here/torch_versions.txt"

if [ ${#failed[@]} -gt 0 ]; then
  # Not fatal: without a network the rest of the suite still runs; the live tests of these
  # versions skip with a message naming this script.
  echo "setup_torch: could not install torch ${failed[*]} (see $VENVS/torch-<version>.log);" \
    "their live tests will skip until scripts/setup_torch.sh succeeds" >&2
fi
