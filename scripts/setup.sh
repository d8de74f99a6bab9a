#!/usr/bin/env bash
# Installs every Debian package ddplaunch needs to build, test and benchmark.
# Idempotent and quiet when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  ccache                    # compiler cache for every build (cmake/Ccache.cmake)
  libboost1.81-all-dev      # Asio, Process v2
  liburing-dev              # the store server's io_uring loop
  nlohmann-json3-dev libcli11-dev catch2
  libgloo-dev               # CPU collectives
  libopenblas-dev zlib1g-dev
  libssl-dev                # libcrypto: the store's HMAC-SHA256; libssl: HTTPS to etcd members
  libhwloc-dev              # the CPU/NUMA topology for --numa_binding (docs/binding.md)
  python3-torch             # PyTorch 1.13 (CPU): compatibility tests and reference benchmarks
  python3-numpy
  python3-venv              # scripts/setup_torch.sh: the cached PyTorch 2.x venvs (docs/pytorch.md)
  gnuplot-nox               # scripts/plot_metrics
  slurm-wlm munge           # a real single-host SLURM for the srun tests
  hyperfine iproute2 procps psmisc
  help2man                  # man pages from --help (cmake/ManPages.cmake)
  clang-format clang-tidy   # scripts/lint.sh
  etcd-server etcd-client   # the etcd v3 store's tests start their own members (docs/etcd.md)
  prometheus                # the health endpoint's tests: a real scrape, and promtool's lint
  clang libclang-rt-14-dev  # scripts/fuzz.sh (libFuzzer) and scripts/sanitize.sh (ASan/UBSan/TSan)
  llvm                      # llvm-symbolizer: file:line in sanitizer reports
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  # PyTorch 2.x venvs for the live tests; DDP_SETUP_TORCH=0 skips them (scripts/demo.sh)
  [ "${DDP_SETUP_TORCH:-1}" = 0 ] || exec "$(dirname "$0")/setup_torch.sh"
  exit 0
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
echo "setup: done"
[ "${DDP_SETUP_TORCH:-1}" = 0 ] || exec "$(dirname "$0")/setup_torch.sh"
