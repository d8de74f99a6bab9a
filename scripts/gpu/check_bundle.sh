#!/usr/bin/env bash
# Checks a GPU bundle made by scripts/gpu/pack.sh (docs/gpu.md), unpacked into a temporary
# directory as the device will unpack it: every file MANIFEST.txt names is there with its size; every library any binary or carried library needs (DT_NEEDED) is
# carried or on the image's list (image_libs.sh); every program finds the carried ones through
# its own RPATH ($ORIGIN/../lib) with nothing in the environment; the bundle fits the device
# tool's 64 MiB together with the working tree.
#   scripts/gpu/check_bundle.sh [BUNDLE_DIR]     (default gpu-bundle)
#   env: CHECK_RPATH=0 skips the RPATH checks (a bundle packed from a build without them)
set -euo pipefail
cd "$(dirname "$0")/../.."
PACKED=${1:-gpu-bundle}
. scripts/gpu/image_libs.sh
LIMIT=$((64 * 1024 * 1024))
fail=0
bad() { echo "check_bundle: $*" >&2; fail=1; }

[[ -f "$PACKED/bundle.tar.xz" ]] || { echo "check_bundle: no $PACKED/bundle.tar.xz (run scripts/gpu/bundle.sh)" >&2; exit 1; }
BUNDLE=$(mktemp -d)
trap 'rm -rf "$BUNDLE"' EXIT
tar -C "$BUNDLE" -xJf "$PACKED/bundle.tar.xz"
[[ -f "$BUNDLE/MANIFEST.txt" ]] || { echo "check_bundle: no MANIFEST.txt in $PACKED/bundle.tar.xz" >&2; exit 1; }
cmp -s "$BUNDLE/MANIFEST.txt" "$PACKED/MANIFEST.txt" || bad "$PACKED/MANIFEST.txt differs from the archive's"
while read -r kind name size; do
  [[ "$kind" == file ]] || continue
  if [[ ! -f "$BUNDLE/$name" ]]; then
    bad "$name is in MANIFEST.txt but missing"
  elif [[ "$(stat -c %s "$BUNDLE/$name")" != "$size" ]]; then
    bad "$name is $(stat -c %s "$BUNDLE/$name") bytes, MANIFEST.txt says $size"
  fi
done <"$BUNDLE/MANIFEST.txt"

mapfile -t elves < <(find "$BUNDLE/bin" "$BUNDLE/lib" -type f ! -name '*.txt' | sort)
[[ ${#elves[@]} -gt 0 ]] || bad "no binaries in $BUNDLE"
for f in "${elves[@]}"; do
  while read -r lib; do
    if ! is_image_lib "$lib" && [[ ! -f "$BUNDLE/lib/$lib" && ! -f "$BUNDLE/lib/compat/$lib" ]]; then
      bad "${f#"$BUNDLE"/} needs $lib: neither carried nor on the image's list (scripts/gpu/image_libs.sh)"
    fi
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done

if [[ "${CHECK_RPATH:-1}" == 1 ]]; then
  for f in "$BUNDLE"/bin/*; do
    # shellcheck disable=SC2016  # a literal $ORIGIN
    readelf -d "$f" | grep '(RPATH).*\[\$ORIGIN/\.\./lib' >/dev/null \
      || bad "${f#"$BUNDLE"/} lacks DT_RPATH \$ORIGIN/../lib: $(readelf -d "$f" | grep -E 'R(UN)?PATH' || echo none)"
    # Resolved as the device will: nothing in the environment but the compat directory. Every
    # library not on the image's list must come from the bundle.
    while read -r name path; do
      is_image_lib "$name" && continue
      [[ "$path" == "$(realpath "$BUNDLE")"/* ]] || bad "${f#"$BUNDLE"/}: $name resolves to $path, outside the bundle"
    done < <(env -i LD_LIBRARY_PATH="$(realpath "$BUNDLE")/lib/compat" ldd "$f" | awk '$2 == "=>" {print $1, $3}')
  done
fi

bundle_bytes=$(du -sb "$PACKED" | cut -f1)
tree_bytes=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
if (( bundle_bytes + tree_bytes > LIMIT )); then
  bad "bundle $bundle_bytes + working tree $tree_bytes bytes exceed the device tool's 64 MiB"
fi
[[ $fail == 0 ]] || exit 1
echo "check_bundle: $PACKED ok: ${#elves[@]} files, $((bundle_bytes / 1024)) KiB packed" \
  "($(($(du -sb "$BUNDLE" | cut -f1) / 1024)) KiB unpacked) + $((tree_bytes / 1024)) KiB working tree, limit 65536 KiB"
