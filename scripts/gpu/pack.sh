#!/usr/bin/env bash
# Packs built programs into a bundle for the GPU machine and checks it (docs/gpu.md):
#   scripts/gpu/pack.sh BUILD_DIR BUNDLE_DIR TARGET...
# BUNDLE_DIR gets bundle.tar.xz (what travels: about a fifth of the unpacked size, which is
# over the device tool's 64 MiB with OpenBLAS alone at 36 MB) and a copy of its MANIFEST.txt.
# Inside the archive:
# bin/      the programs and test binaries, debug info stripped
# lib/      every shared library they need that the image does not provide (ldd here)
# lib/compat/  libstdc++ and libgcc_s: run.sh puts them on the path only when the image's are
#           older than these binaries need (check_glibcxx in run.sh)
# MANIFEST.txt  files, sizes, and the symbol versions the binaries need from the image
# Then scripts/gpu/check_bundle.sh verifies it. A target not built (no CUDA here) is an error
# unless ALLOW_MISSING lists it (the dry run packs a build without CUDA). XZ_LEVEL: 6.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 3 ]] || { echo "usage: pack.sh BUILD_DIR BUNDLE_DIR TARGET..." >&2; exit 2; }
BUILD_DIR=$1
BUNDLE=$2
shift 2
. scripts/gpu/image_libs.sh
read -r -a allow_missing <<<"${ALLOW_MISSING:-}"

OUT_DIR=$BUNDLE
BUNDLE=$(mktemp -d)
trap 'rm -rf "$BUNDLE"' EXIT
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib/compat"
packed=()
for t in "$@"; do
  src=""
  for dir in "$BUILD_DIR" "$BUILD_DIR/tests"; do
    [[ -x "$dir/$t" && -f "$dir/$t" ]] && { src="$dir/$t"; break; }
  done
  if [[ -z "$src" ]]; then
    if [[ " ${allow_missing[*]} " == *" $t "* ]]; then
      echo "pack.sh: $t not built here (allowed: ALLOW_MISSING)"
      continue
    fi
    echo "pack.sh: $t not found in $BUILD_DIR or $BUILD_DIR/tests" >&2
    exit 1
  fi
  strip --strip-debug -o "$BUNDLE/bin/$t" "$src"
  packed+=("$BUNDLE/bin/$t")
done

# Every library the binaries need, transitively (ldd resolves the whole tree), resolved here
# with no LD_LIBRARY_PATH so the result does not depend on this shell.
declare -A carried=()
for bin in "${packed[@]}"; do
  while read -r name path; do
    if is_image_lib "$name"; then
      continue
    fi
    [[ "$path" == /* ]] || { echo "pack.sh: $bin needs $name, not found here ($path)" >&2; exit 1; }
    carried[$name]=$path
  done < <(env -u LD_LIBRARY_PATH ldd "$bin" | awk '$2 == "=>" {print $1, $3} $2 != "=>" && $1 !~ /^\// {print $1, "-"}')
done
for name in "${!carried[@]}"; do
  dest="$BUNDLE/lib"
  is_compat_lib "$name" && dest="$BUNDLE/lib/compat"
  cp -L "${carried[$name]}" "$dest/$name"
  chmod u+w "$dest/$name"
  strip --strip-debug "$dest/$name"
done

# The symbol versions every carried file asks of the image's glibc (and of libstdc++, should
# the compat copy be left off): the image must offer at least the highest of each.
max_version() {  # PREFIX FILE...: the highest PREFIX_x.y.z any of FILE needs
  objdump -T "${@:2}" 2>/dev/null | grep -o "($1_[0-9.]*)" | tr -d '()' | sed "s/^$1_//" \
    | sort -V | tail -1
}
mapfile -t all_files < <(find "$BUNDLE/bin" "$BUNDLE/lib" -maxdepth 1 -type f | sort)

{
  echo "# gpu bundle manifest (scripts/gpu/pack.sh $BUILD_DIR $BUNDLE $*)"
  # shellcheck source=/dev/null
  echo "built_on $(. /etc/os-release && echo "$PRETTY_NAME") glibc $(ldd --version | sed -n 1p | awk '{print $NF}')"
  echo "needs GLIBC $(max_version GLIBC "${all_files[@]}")"
  echo "needs GLIBC_with_compat $(max_version GLIBC "${all_files[@]}" "$BUNDLE"/lib/compat/*)"
  echo "needs GLIBCXX $(max_version GLIBCXX "${all_files[@]}")"
  echo "needs CXXABI $(max_version CXXABI "${all_files[@]}")"
  echo "needs GCC $(max_version GCC "${all_files[@]}")"
  echo "compat $(find "$BUNDLE/lib/compat" -type f -printf '%f ' | sort)"
  echo "image_libs ${IMAGE_LIBS[*]}"
  for f in "${all_files[@]}" "$BUNDLE"/lib/compat/*; do
    [[ -f "$f" ]] && echo "file ${f#"$BUNDLE"/} $(stat -c %s "$f")"
  done
  echo "unpacked_bytes $(du -sb "$BUNDLE" | cut -f1)"
} >"$BUNDLE/MANIFEST.txt"
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
start=$SECONDS
tar -C "$BUNDLE" -cf - . | xz -T"${JOBS:-$(nproc)}" "-${XZ_LEVEL:-6}" >"$OUT_DIR/bundle.tar.xz"
cp "$BUNDLE/MANIFEST.txt" "$OUT_DIR/MANIFEST.txt"
echo "pack.sh: ${#packed[@]} programs, ${#carried[@]} libraries, $(du -sh "$BUNDLE" | cut -f1) unpacked," \
  "$(du -sh "$OUT_DIR/bundle.tar.xz" | cut -f1) packed into $OUT_DIR/bundle.tar.xz ($((SECONDS - start)) s)"
scripts/gpu/check_bundle.sh "$OUT_DIR"
