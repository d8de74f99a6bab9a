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

# shellcheck source=tests/package/lib.sh
source "$(dirname "$0")/lib.sh"

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

check_example "$prefix" "$source_dir" "$work/example" "$cxx"
echo "ok: installed tree, example built with find_package(ddplaunch), 2 ranks agree"
