# shellcheck shell=bash
# Sourced by the package tests (tests/package/*_test.sh), which set $work (their scratch
# directory) first.

fail() { echo "FAIL: $*" >&2; exit 1; }

# run_logged NAME COMMAND...: runs COMMAND quietly into $work/NAME.log, shown when it fails.
run_logged() {
  local log=${work:?}/$1.log
  shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$* (exit $?)"; }
}

# check_example PREFIX SOURCE_DIR DIR CXX_COMPILER: builds examples/native_trainer in DIR
# against the installed tree at PREFIX (find_package(ddplaunch)) and runs it under PREFIX's
# ddplaunch with 2 workers; both ranks must print the all-reduced sum.
check_example() {
  local prefix=$1 source_dir=$2 dir=$3 cxx=$4
  local cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx")
  if command -v ccache >/dev/null; then cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  run_logged configure cmake -S "$source_dir/examples/native_trainer" -B "$dir" "${cmake_args[@]}"
  run_logged build cmake --build "$dir"

  local version
  version=$("$prefix/bin/ddplaunch" --version)
  [[ $version == "ddplaunch "[0-9]*.[0-9]*.[0-9]* ]] ||
    fail "ddplaunch --version printed '$version', expected 'ddplaunch X.Y.Z'"

  local nproc=2 out rank line
  # Gloo whatever GPUs the machine has: the lines below name the backend.
  out=$(DDPLAUNCH_BACKEND=gloo "$prefix/bin/ddplaunch" --standalone --nproc_per_node=$nproc \
        "$dir/native_trainer" 2>&1) ||
    fail "$prefix/bin/ddplaunch --nproc_per_node=$nproc native_trainer exited $?:"$'\n'"$out"
  for ((rank = 0; rank < nproc; rank++)); do
    line="rank $rank of $nproc (gloo, $version): sum of rank + 1 = $((nproc * (nproc + 1) / 2))"
    grep -qF -- "$line" <<<"$out" || fail "no line '$line' in the output:"$'\n'"$out"
  done
}
