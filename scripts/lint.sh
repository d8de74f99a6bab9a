#!/usr/bin/env bash
# Lint, as CI runs it (scripts/test.sh calls this after the build):
#  1. clang-format: every tracked C++/CUDA file is formatted (.clang-format);
#  2. layers: no lower layer includes a higher one (scripts/check_layers.sh);
#  3. test names: no ';' in a TEST_CASE name (CTest splits it, and then nothing runs), none
#     starting with '-' (the test binary reads it as an option, and the test fails at once);
#  4. clang-tidy (.clang-tidy, the release scripts/setup.sh pins) on the library sources the
#     build compiles: the number of distinct findings may not grow past
#     scripts/tidy_baseline.txt (older findings, to be paid down; a change that removes some
#     lowers the number).
# Needs build/compile_commands.json (scripts/build.sh writes it) for step 4.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
status=0

mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')
if ! clang-format --dry-run -Werror "${sources[@]}" 2>/tmp/ddp_format.$$; then
  echo "lint: clang-format: these files need 'clang-format -i':"
  grep -oE '^[^:]+\.(cpp|hpp|cu|cuh)' /tmp/ddp_format.$$ | sort -u | sed 's/^/  /'
  status=1
fi
rm -f /tmp/ddp_format.$$

scripts/check_layers.sh || status=1

bad_names=$(grep -rnE 'TEST_CASE\("[^"]*;' tests || true)
if [ -n "$bad_names" ]; then
  echo "lint: test names with ';' (CTest splits them and runs nothing):"
  echo "$bad_names" | sed 's/^/  /'
  status=1
fi
dash_names=$(grep -rnE 'TEST_CASE\("-' tests || true)
if [ -n "$dash_names" ]; then
  echo "lint: test names starting with '-' (the test binary reads them as an option):"
  echo "$dash_names" | sed 's/^/  /'
  status=1
fi

# The pinned clang-tidy scripts/setup.sh installs (CLANG_TIDY names another); the checks are
# .clang-tidy's, named one by one, so another release runs the same ones. Compiler warnings
# are the build's business (-w): clang's set differs from GCC's, and -Werror would turn them
# into errors here. GCC's own include directory comes after clang's: Boost.Stacktrace's
# backtrace.h lives there only.
tidy_version=$(sed -nE 's/^CLANG_TIDY_VERSION=(.*)$/\1/p' scripts/setup.sh)
CLANG_TIDY=${CLANG_TIDY:-${DDP_TOOLS:-/var/cache/ddplaunch/tools}/clang-tidy-$tidy_version/bin/clang-tidy}
tidy_args=(--quiet --extra-arg=-w)
for dir in /usr/lib/gcc/x86_64-linux-gnu/*/include; do
  [ -f "$dir/backtrace.h" ] && tidy_args+=("--extra-arg=-idirafter$dir")
done
if ! "$CLANG_TIDY" --version >/dev/null 2>&1; then
  # Never a silent pass: a clang-tidy that does not run finds nothing.
  echo "lint: $CLANG_TIDY does not run (scripts/setup.sh installs clang-tidy $tidy_version)"
  status=1
elif [ -f "$BUILD_DIR/compile_commands.json" ]; then
  # Only what this build compiles: a source it leaves out (the CUDA ones, on a machine without
  # the toolkit) has no compile command, and clang-tidy's guess at its flags finds other things.
  mapfile -t units < <(git ls-files 'common/*.cpp' 'rendezvous/*.cpp' 'launcher/*.cpp' \
    'worker_runtime/*.cpp' 'trainer/*.cpp' | grep -v boost_process_impl |
    grep -xF -f <(sed -nE "s|^ *\"file\": \"$PWD/(.*)\",?$|\1|p" "$BUILD_DIR/compile_commands.json"))
  findings=$(printf '%s\n' "${units[@]}" |
    xargs -P "$JOBS" -n 4 "$CLANG_TIDY" -p "$BUILD_DIR" "${tidy_args[@]}" 2>/dev/null |
    grep -E '^/.*: warning: .*\[[a-z-]+.*\]$' | sed "s|^$PWD/||" | sort -u || true)
  count=$(printf '%s' "$findings" | grep -c . || true)
  baseline=$(cat scripts/tidy_baseline.txt)
  if [ "$count" -gt "$baseline" ]; then
    echo "lint: clang-tidy: $count findings, more than the baseline of $baseline:"
    echo "$findings" | sed 's/^/  /'
    status=1
  else
    echo "lint: clang-tidy: $count findings (baseline $baseline)"
  fi
else
  echo "lint: no $BUILD_DIR/compile_commands.json; clang-tidy skipped (run scripts/build.sh)"
fi

[ $status -eq 0 ] && echo "lint: clean"
exit $status
