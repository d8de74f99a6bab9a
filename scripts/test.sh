#!/usr/bin/env bash
# Installs what is needed, builds, lints (format, layers, clang-tidy against its baseline),
# runs the whole CTest suite, then the fuzzers and the sanitizer builds (docs/fuzzing.md:
# scripts/fuzz.sh, scripts/sanitize.sh; together about 10 minutes on 2 cores, from clean).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
scripts/lint.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 600)
FUZZ_SECONDS=${FUZZ_SECONDS:-15} scripts/fuzz.sh
SANITIZE_SCOPE=${SANITIZE_SCOPE:-ci} scripts/sanitize.sh
