#!/usr/bin/env bash
# process tier: `cmake --install` the build tree into a fresh prefix, build
# examples/native_trainer against it (find_package(ddplaunch), ddplaunch::worker_runtime),
# run it under the installed ddplaunch with 2 workers, and check what a user would see: both
# ranks' all-reduced value, the installed version, man pages and bash completion in place.
#   install_test.sh SOURCE_DIR BUILD_DIR CXX_COMPILER WITH_MAN_PAGES(ON/OFF)
set -euo pipefail
source_dir=$1 build_dir=$2 cxx=$3 man_pages=$4
# A fixed place (not mktemp) keeps compile lines identical between runs, so ccache hits.
work=$build_dir/tests/package/install
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

fail() { echo "FAIL: $*" >&2; exit 1; }
run_logged() {  # runs "$@" quietly, showing its output only when it fails
  local log=$work/$1.log
  shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$* (exit $?)"; }
}

run_logged install cmake --install "$build_dir" --prefix "$prefix"
for f in bin/ddplaunch bin/ddpstore libexec/ddplaunch/train \
         lib/cmake/ddplaunch/ddplaunchConfig.cmake include/ddplaunch/worker_runtime/dist_context.hpp \
         include/ddplaunch/common/version.hpp \
         share/bash-completion/completions/ddplaunch share/bash-completion/completions/ddpstore; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not put $f in place"
done
if [ "$man_pages" = ON ]; then
  for page in ddplaunch ddpstore; do
    man_file=$prefix/share/man/man1/$page.1
    [ -s "$man_file" ] || fail "no man page $man_file"
    # roff: "\-\-version"; the header names the program's version (from its --version)
    grep -qF -- '\-\-version' "$man_file" || fail "$man_file does not describe --version"
    grep -qF -- "\"$("$prefix/bin/$page" --version)\"" "$man_file" ||
      fail "$man_file does not carry the version $("$prefix/bin/$page" --version)"
  done
  grep -qF -- '\-\-nproc_per_node' "$prefix/share/man/man1/ddplaunch.1" ||
    fail "ddplaunch.1 does not describe --nproc_per_node"
fi

launcher=(-DCMAKE_CXX_COMPILER="$cxx")
if command -v ccache >/dev/null; then launcher+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
run_logged configure cmake -S "$source_dir/examples/native_trainer" -B "$work/example" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}"
run_logged build cmake --build "$work/example"

version=$("$prefix/bin/ddplaunch" --version)
[[ $version == "ddplaunch "[0-9]*.[0-9]*.[0-9]* ]] ||
  fail "ddplaunch --version printed '$version', expected 'ddplaunch X.Y.Z'"

nproc=2
# Gloo whatever GPUs the machine has: the line below names the backend.
out=$(DDPLAUNCH_BACKEND=gloo "$prefix/bin/ddplaunch" --standalone --nproc_per_node=$nproc "$work/example/native_trainer" 2>&1) ||
  fail "ddplaunch --nproc_per_node=$nproc native_trainer exited $?:"$'\n'"$out"
expected_sum=$((nproc * (nproc + 1) / 2))
for ((rank = 0; rank < nproc; rank++)); do
  line="rank $rank of $nproc (gloo, ${version}): sum of rank + 1 = $expected_sum"
  grep -qF -- "$line" <<<"$out" || fail "no line '$line' in the output:"$'\n'"$out"
done
echo "ok: installed tree, example built with find_package(ddplaunch), $nproc ranks agree"
