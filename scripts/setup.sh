#!/usr/bin/env bash
# Installs the Debian packages ddplaunch needs. Idempotent and quiet when they are there.
#   scripts/setup.sh          everything: build, test, lint, fuzz, sanitize, benchmark, and the
#                             PyTorch 2.x test venvs (scripts/setup_torch.sh; DDP_SETUP_TORCH=0
#                             skips them). scripts/test.sh and the README's second command.
#   scripts/setup.sh --demo   only what building and running `ddplaunch` and `train` needs, plus
#                             scripts/fetch_digits.sh and scripts/plot_metrics (scripts/demo.sh):
#                             169 Debian packages on a fresh bookworm, of the full set's ~570
#                             (docs/build_times.md).
set -euo pipefail

# Building ddplaunch and train (cmake/Dependencies.cmake), and the demo's own scripts.
DEMO_PACKAGES=(
  build-essential cmake pkg-config
  ninja-build               # scripts/demo.sh builds a new tree with Ninja (both targets at once)
  # Boost's headers (Asio, Beast, Process v2, Stacktrace) and the only two Boost components
  # the build asks for (cmake/Dependencies.cmake); libboost1.81-all-dev is all 33, MPI and ICU.
  libboost1.81-dev libboost-system1.81-dev libboost-filesystem1.81-dev
  liburing-dev              # the store server's io_uring loop
  nlohmann-json3-dev libcli11-dev
  catch2                    # configure-time only: the test suite is configured, not built
  libgloo-dev               # CPU collectives
  libopenblas-dev zlib1g-dev
  libssl-dev                # libcrypto: the store's HMAC-SHA256; libssl: HTTPS to etcd members
  libhwloc-dev              # the CPU/NUMA topology for --numa_binding (docs/binding.md)
  python3 gnuplot-nox       # scripts/plot_metrics
)
# The rest: tests, lint, fuzzing, sanitizers, benchmarks, man pages.
TEST_PACKAGES=(
  git
  ccache                    # compiler cache for every build (cmake/Ccache.cmake)
  libboost1.81-all-dev      # what the tests and benchmarks may use beyond the demo's Boost
  python3-torch             # PyTorch 1.13 (CPU): compatibility tests and reference benchmarks
  python3-numpy
  python3-venv              # scripts/setup_torch.sh: the cached PyTorch 2.x venvs (docs/pytorch.md)
  slurm-wlm munge           # a real single-host SLURM for the srun tests
  hyperfine iproute2 procps psmisc
  help2man                  # man pages from --help (cmake/ManPages.cmake)
  clang-format clang-tidy   # scripts/lint.sh
  chromium                  # the job page of the health endpoint, checked in headless Chromium
  tmux                      # progress bars on a real terminal (capture-pane), tests/e2e
  debootstrap               # a fresh Debian 12 root for the wheel (tests/package/wheel_fresh_root_test.sh)
  etcd-server etcd-client   # the etcd v3 store's tests start their own members (docs/etcd.md)
  prometheus                # the health endpoint's tests: a real scrape, and promtool's lint
  clang libclang-rt-14-dev  # scripts/fuzz.sh (libFuzzer) and scripts/sanitize.sh (ASan/UBSan/TSan)
  llvm                      # llvm-symbolizer: file:line in sanitizer reports
)

demo=0
case "${1:-}" in
  --demo) demo=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--demo]" >&2; exit 2 ;;
esac
PACKAGES=("${DEMO_PACKAGES[@]}")
[ "$demo" = 1 ] || PACKAGES+=("${TEST_PACKAGES[@]}")
# The PyTorch 2.x venvs are for the live tests only, never for the demo.
torch() {
  [ "$demo" = 0 ] && [ "${DDP_SETUP_TORCH:-1}" != 0 ] || exit 0
  exec "$(dirname "$0")/setup_torch.sh"
}

# The lint's clang-tidy (scripts/lint.sh): a pinned release from PyPI in a venv of its own,
# installed once per machine (45 MB). Debian's clang-tidy 14 runs the same checks about four
# times slower: it matches every declaration of the system headers, which releases since 21
# skip; that was a fifth of the test command's CPU (docs/build_times.md).
CLANG_TIDY_VERSION=23.1.4
TOOLS=${DDP_TOOLS:-/var/cache/ddplaunch/tools}
tidy() {
  [ "$demo" = 0 ] || return 0
  local venv=$TOOLS/clang-tidy-$CLANG_TIDY_VERSION
  "$venv/bin/clang-tidy" --version >/dev/null 2>&1 && return 0
  echo "setup: clang-tidy $CLANG_TIDY_VERSION from PyPI into $venv"
  mkdir -p "$TOOLS"
  rm -rf "$venv"
  # Debian's python3 (python3-venv), not whichever python3 comes first on PATH: the venv's
  # scripts name their interpreter, which must exist wherever the cache is used.
  /usr/bin/python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check "clang-tidy==$CLANG_TIDY_VERSION" ||
    { rm -rf "$venv"; echo "setup: clang-tidy $CLANG_TIDY_VERSION could not be installed" >&2; return 1; }
  "$venv/bin/clang-tidy" --version >/dev/null
}

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  tidy
  torch
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's etcd-server enables a system etcd on 2379; the tests start their own members on
# free loopback ports and never use it, so keep it from holding the default ports.
if printf '%s\n' "${missing[@]}" | grep -qx etcd-server && command -v systemctl >/dev/null; then
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
fi
# Debian's prometheus enables a system server on 9090 scraping itself; the tests start their
# own on a free loopback port with a config of their own.
if printf '%s\n' "${missing[@]}" | grep -qx prometheus && command -v systemctl >/dev/null; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
tidy
echo "setup: done"
torch
