#!/usr/bin/env bash
# process tier: `cpack -G DEB` in the build tree, unpack the package, run its ddplaunch
# --version, and check its Depends: every shared library the packaged programs load must come
# from a Debian package the Depends names (directly or through what it Provides). Libraries
# no package owns (CUDA, NCCL from NVIDIA's installers) are listed, not required. Last, the
# example trainer is built against the unpacked tree (its static libraries are stripped of
# debug info) and run under the packaged ddplaunch.
#   deb_test.sh SOURCE_DIR BUILD_DIR CXX_COMPILER
set -euo pipefail
source_dir=$1 build_dir=$2 cxx=$3
work=$build_dir/tests/package/deb
rm -rf "$work"
mkdir -p "$work"
# shellcheck source=tests/package/lib.sh
source "$(dirname "$0")/lib.sh"

(cd "$build_dir" && run_logged cpack cpack -G DEB -B "$work")
debs=("$work"/ddplaunch_*.deb)
[ -f "${debs[0]}" ] || fail "cpack made no ddplaunch_*.deb in $work: $(ls "$work")"
deb=${debs[0]}
[ "$(dpkg-deb -f "$deb" Package)" = ddplaunch ] || fail "package name is not ddplaunch"
dpkg-deb -x "$deb" "$work/root"

version=$("$work/root/usr/bin/ddplaunch" --version)
expected=$("$build_dir/ddplaunch" --version)
[ "$version" = "$expected" ] || fail "packaged ddplaunch --version: '$version', built: '$expected'"
[ "$(dpkg-deb -f "$deb" Version)" = "${version#ddplaunch }" ] ||
  fail "package version $(dpkg-deb -f "$deb" Version) is not the program's ${version#ddplaunch }"
for f in usr/bin/ddpstore usr/libexec/ddplaunch/train usr/lib/cmake/ddplaunch/ddplaunchConfig.cmake \
         usr/share/bash-completion/completions/ddplaunch \
         usr/lib/python3/dist-packages/ddplaunch_recovery.py \
         usr/lib/python3/dist-packages/ddplaunch_progress.py; do
  [ -e "$work/root/$f" ] || fail "the package lacks /$f"
done

# Depends as a list of names: "a (>= 1), b | c" -> a b c
depends=$(dpkg-deb -f "$deb" Depends)
read -r -a names <<<"$(sed -E 's/\([^)]*\)//g; s/[,|]/ /g' <<<"$depends")"
named() { local n; for n in "${names[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }
owner() {  # the package owning a library file; usrmerge: dpkg may know it as /lib/...
  local path
  path=$(readlink -f "$1")
  dpkg-query -S "$path" 2>/dev/null || dpkg-query -S "${path#/usr}" 2>/dev/null || return 1
}

unowned=()
for program in "$work"/root/usr/bin/* "$work"/root/usr/libexec/ddplaunch/*; do
  while read -r soname path; do
    if ! package=$(owner "$path"); then
      unowned+=("$soname")
      continue
    fi
    package=${package%%:*}  # "libssl3:amd64: /usr/lib/..." -> libssl3
    named "$package" && continue
    provides=$(dpkg-query -W -f='${Provides}' "$package" | sed -E 's/\([^)]*\)//g; s/,/ /g')
    ok=0
    for p in $provides; do named "$p" && ok=1; done
    [ $ok = 1 ] || fail "${program##*/} loads $soname from package $package, which Depends ($depends) does not name"
  done < <(ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
           grep -F -f <(readelf -d "$program" | sed -nE 's/.*NEEDED.*\[(.*)\]/\1/p'))
done
check_example "$work/root/usr" "$source_dir" "$work/example" "$cxx"
echo "ok: $(basename "$deb"), Depends: $depends; the example builds against it and runs"
[ ${#unowned[@]} -eq 0 ] || echo "not from a Debian package (not declared): ${unowned[*]}"
