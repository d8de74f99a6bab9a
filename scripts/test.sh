#!/usr/bin/env bash
# Installs what is needed, builds, lints (format, layers, clang-tidy against its baseline),
# runs the whole CTest suite, the GPU run's dry run (docs/gpu.md), then the fuzzers and the
# sanitizer builds (docs/fuzzing.md:
# scripts/fuzz.sh, scripts/sanitize.sh; each builds only what it runs). Every build goes
# through ccache when installed (docs/build_times.md: cold and warm times).
# The lint runs beside the test suite, at the lowest CPU priority: most of the suite waits on
# processes, sockets and timers, so clang-tidy takes the idle cores without slowing the tests
# (about 4 minutes saved on 2 cores). Each phase prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
phase() { echo "test.sh: $1 done at +$((SECONDS / 60))m$((SECONDS % 60))s"; }

scripts/setup.sh
phase setup
scripts/build.sh
phase build

lint_log=$(mktemp)
trap 'rm -f "$lint_log"' EXIT
nice -n 19 scripts/lint.sh >"$lint_log" 2>&1 &
lint_pid=$!
test_status=0
(cd "$BUILD_DIR" && ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 600) || test_status=$?
phase ctest
lint_status=0
wait "$lint_pid" || lint_status=$?
cat "$lint_log"
phase lint
if [ "$test_status" -ne 0 ] || [ "$lint_status" -ne 0 ]; then
  echo "test.sh: ctest exit $test_status, lint exit $lint_status"
  exit 1
fi

# The prepared GPU run (docs/gpu.md), dry: its scripts, a bundle packed from build/ (no CUDA
# rebuild) and every step scaled down on the CPU, so the device's minutes never go to a broken
# script.
BUILD_DIR=$BUILD_DIR scripts/gpu/run.sh --dry-run
phase gpu-dry-run

# A fixed seed: CI replays the corpus and the regressions and explores the same way each run,
# so a red CI means a change broke something, not that this run's luck found an old bug (run
# scripts/fuzz.sh by hand, unseeded and longer, to hunt: docs/fuzzing.md).
FUZZ_SEED=${FUZZ_SEED:-1} FUZZ_SECONDS=${FUZZ_SECONDS:-15} scripts/fuzz.sh
phase fuzz
SANITIZE_SCOPE=${SANITIZE_SCOPE:-ci} scripts/sanitize.sh
phase sanitize
