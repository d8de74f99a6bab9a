#!/usr/bin/env bash
# Installs what is needed, builds, lints (format, layers, clang-tidy against its baseline),
# runs the whole CTest suite, the GPU run's dry run (docs/gpu.md), then the fuzzers and the
# tests of the sanitizer builds (docs/fuzzing.md: scripts/fuzz.sh, scripts/sanitize.sh; each
# builds only what it runs). Every build goes through ccache when installed.
# On 2 cores the compiles are most of the work and most of the test suite waits on processes,
# sockets and timers, so the phases overlap (docs/build_times.md has what each costs):
#  - the PyTorch venvs (scripts/setup_torch.sh: downloads, once per machine) are installed
#    while build/ compiles;
#  - beside the test suite run the lint and the GPU run's dry run (nice 10: ahead of the
#    builds, so that they end near the suite's end) and the fuzz and sanitizer builds
#    (FUZZ_STEP=build, SANITIZE_STEP=build, nice 19): they take the cores the tests leave idle,
#    and a test that wants a core gets it first;
#  - then the fuzzers and the sanitizer tests run on what was built.
# Each phase prints when it ended, the CPU time (user + system) of the commands finished so
# far, and the 1-minute load average.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
export SANITIZE_SCOPE=${SANITIZE_SCOPE:-ci}
phase() {  # `times` in this shell: its second line is what its finished children used
  times >"$logs/times"
  local cpu
  cpu=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m");
    t = u[1] * 60 + u[2] + s[1] * 60 + s[2]; printf "%dm%02ds", t / 60, t % 60 }' "$logs/times")
  echo "test.sh: $1 done at +$((SECONDS / 60))m$((SECONDS % 60))s" \
    "(CPU $cpu, load $(cut -d' ' -f1 /proc/loadavg))"
}
# background NAME COMMAND...: runs COMMAND at nice $NICE_LEVEL (19 unless given) in a process
# group of its own, its output to $logs/NAME; `finish NAME` waits for it, shows the output and
# returns its status.
# On exit (a failed phase) whatever still runs in the background is killed.
declare -A pids
logs=$(mktemp -d)
# shellcheck disable=SC2154  # p: the loop variable inside the trap string
trap 'for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done; rm -rf "$logs"' EXIT
background() {
  local name=$1
  shift
  setsid nice -n "${NICE_LEVEL:-19}" "$@" >"$logs/$name" 2>&1 &
  pids[$name]=$!
}
finish() {
  local status=0
  wait "${pids[$1]}" || status=$?
  cat "$logs/$1"
  return $status
}

DDP_SETUP_TORCH=0 scripts/setup.sh
phase setup
if [ "${DDP_SETUP_TORCH:-1}" != 0 ]; then
  # Network-bound; niced only so that unpacking the wheels does not slow the compile.
  setsid nice -n 10 scripts/setup_torch.sh >"$logs/torch" 2>&1 &
  pids[torch]=$!
fi
scripts/build.sh
phase build
if [ -n "${pids[torch]:-}" ]; then
  finish torch
  phase "setup (PyTorch venvs)"
fi

NICE_LEVEL=10 background lint scripts/lint.sh
# The prepared GPU run (docs/gpu.md), dry: its scripts, a bundle packed from build/ (no CUDA
# rebuild) and every step scaled down on the CPU, so the device's minutes never go to a broken
# script. Mostly waits (PyTorch 1.13's torchrun), so it costs the suite little. In a network
# namespace of its own where the machine allows one: torchrun 1.13's --standalone takes the
# fixed port 29400, which a test beside it might hold.
gpu_dry_run=(env BUILD_DIR="$BUILD_DIR" scripts/gpu/run.sh --dry-run)
if unshare -n true 2>/dev/null; then gpu_dry_run=(scripts/bench/netns_exec.sh "${gpu_dry_run[@]}"); fi
NICE_LEVEL=10 background gpu-dry-run "${gpu_dry_run[@]}"
background fuzz-build env FUZZ_STEP=build scripts/fuzz.sh
background sanitize-build env SANITIZE_STEP=build scripts/sanitize.sh
test_status=0
# Three tests at a time on 2 cores: most of them wait on processes, sockets and timers (the
# network-namespace blips, the chaos harness, the PyTorch jobs), and once the builds beside
# them end the cores would sit idle at two (docs/build_times.md).
(cd "$BUILD_DIR" && ctest --output-on-failure -j "${TEST_JOBS:-3}" --timeout 600) || test_status=$?
phase ctest
lint_status=0
finish lint || lint_status=$?
phase lint
gpu_status=0
finish gpu-dry-run || gpu_status=$?
phase gpu-dry-run
if [ "$test_status" -ne 0 ] || [ "$lint_status" -ne 0 ] || [ "$gpu_status" -ne 0 ]; then
  echo "test.sh: ctest exit $test_status, lint exit $lint_status, GPU dry run exit $gpu_status"
  exit 1
fi

# A fixed seed: CI replays the corpus and the regressions and explores the same way each run,
# so a red CI means a change broke something, not that this run's luck found an old bug (run
# scripts/fuzz.sh by hand, unseeded and longer, to hunt: docs/fuzzing.md).
finish fuzz-build
phase fuzz-build
FUZZ_STEP=run FUZZ_SEED=${FUZZ_SEED:-1} FUZZ_SECONDS=${FUZZ_SECONDS:-15} scripts/fuzz.sh
phase fuzz
finish sanitize-build
phase sanitize-build
SANITIZE_STEP="test" scripts/sanitize.sh
phase sanitize
