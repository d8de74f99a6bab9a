#!/usr/bin/env bash
# Installs what is needed, builds, lints (format, layers, clang-tidy against its baseline)
# and runs the whole CTest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
scripts/lint.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 600
