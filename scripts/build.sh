#!/usr/bin/env bash
# Configures and builds ddplaunch into build/ (or $BUILD_DIR); through ccache when it is
# installed (cmake/Ccache.cmake).
# RelWithDebInfo here is -O2 with line tables only (-g1): backtraces, sanitizer reports and
# gdb's `bt` keep their file:line and inlined frames, only local variables and types are left
# out; that is a third less compile CPU than -g (docs/build_times.md). For full debug info:
#   scripts/build.sh -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG"
# A new tree is made with Ninja when it is installed (scripts/cmake_tree.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
. scripts/cmake_tree.sh
tree_generator "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DDDP_WERROR=ON "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
