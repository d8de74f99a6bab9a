#!/usr/bin/env bash
# Configures and builds ddplaunch into build/ (or $BUILD_DIR); through ccache when it is
# installed (cmake/Ccache.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} -DDDP_WERROR=ON "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
