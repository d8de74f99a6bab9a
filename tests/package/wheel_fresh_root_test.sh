#!/usr/bin/env bash
# The manylinux wheel of scripts/build_wheel.sh where nothing of the build machine is: a fresh
# Debian 12 root (scripts/fresh_debian_root.sh: debootstrap, minbase, python3 and python3-venv
# only, no -dev package). Inside it (chroot, its own mount namespace with /proc and /dev):
# a venv of the root's own python3, `pip install --no-index` of the wheel, ddplaunch --version,
# a 2-rank PyTorch job (gloo all_reduce) whose workers import ddplaunch_recovery, and the
# import from the venv's python. PyTorch is PyPI's torch 2.15 (several GB of CUDA wheels):
# instead of downloading it again, the cached venv of scripts/setup_torch.sh lends its
# site-packages, bound read-only into the root and put on the venv's path by a .pth file.
# Skipped (DDP-TEST-SKIPPED) only without root, debootstrap, that venv, or a private mount
# namespace (inside a chroot).
#   wheel_fresh_root_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
source "$(dirname "$0")/lib.sh"
skip() { echo "DDP-TEST-SKIPPED: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root for debootstrap and chroot"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/setup.sh)"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
# Inside a chroot whose / is no mount point (scripts/bench/cold_test.sh's fresh root) a
# private mount namespace cannot be made: "cannot change root filesystem propagation".
unshare --mount --propagation private true 2>/dev/null ||
  skip "no private mount namespace here (unshare --mount --propagation private failed: is / a" \
    "mount point? not inside a chroot)"
torch_venv=${DDP_TORCH_VENVS:-/var/cache/ddplaunch/venvs}/torch-2.15.0
[ -f "$torch_venv/.ddplaunch-complete" ] ||
  skip "no PyTorch 2.15 venv at $torch_venv (scripts/setup_torch.sh makes it)"
torch_site=$(echo "$torch_venv"/lib/python3*/site-packages)
work=$(mktemp -d /var/tmp/ddp_fresh_root.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT

wheel=$(bash "$source_dir/scripts/build_wheel.sh" "$build_dir" "$work/dist")
[[ $(basename "$wheel") == ddplaunch-*-py3-none-manylinux_2_*_x86_64.whl ]] ||
  fail "build_wheel.sh made $(basename "$wheel"), not a manylinux wheel"
root=$work/root
run_logged root bash "$source_dir/scripts/fresh_debian_root.sh" "$root"
# Nothing to build with: no -dev package, no compiler, and none of the libraries the wheel
# carries (Boost, hwloc, liburing) installed.
dev=$(chroot "$root" dpkg-query -W -f '${Package}\n' | grep -E -- '-dev(:|$)' || true)
[ -z "$dev" ] || fail "the fresh root has -dev packages: $dev"
for lib in libboost_filesystem.so.1.81.0 libhwloc.so.15 liburing.so.2; do
  ! chroot "$root" /sbin/ldconfig -p | grep -q "$lib" || fail "the fresh root has $lib"
done
cp "$wheel" "$root/opt/"
mkdir -p "$root/opt/pypi-torch"
cat >"$root/opt/worker.py" <<'PY'
import os
import torch
import torch.distributed as dist
import ddplaunch_progress
import ddplaunch_recovery
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print("rank %d of %d: sum %d, ddplaunch_recovery from %s" % (
    dist.get_rank(), dist.get_world_size(), int(total.item()),
    os.path.dirname(ddplaunch_recovery.__file__)), flush=True)
dist.destroy_process_group()
PY
cat >"$root/opt/check.sh" <<'SH'
set -eu
mount -t proc proc /proc
python3 -m venv /opt/venv
/opt/venv/bin/pip install --no-index --no-deps --disable-pip-version-check -q /opt/ddplaunch-*.whl
site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo /opt/pypi-torch >"$site/pypi-torch.pth"
export PATH=/opt/venv/bin:$PATH
ldd --version | head -1
ddplaunch --version
ddplaunch --standalone --nproc_per_node=2 /opt/worker.py
python -c 'import ddplaunch_recovery; print("import ok:", ddplaunch_recovery.__file__)'
SH
# /dev of the host and PyPI's torch, bound in the new mount namespace (gone with it, as /proc
# is).
out=$(unshare --mount --propagation private --fork sh -c "mount --bind /dev '$root/dev' &&
      mount --bind '$torch_site' '$root/opt/pypi-torch' &&
      mount -o remount,bind,ro '$root/opt/pypi-torch' &&
      chroot '$root' /bin/sh /opt/check.sh" 2>&1) || fail "the wheel in the fresh root:"$'\n'"$out"
echo "$out"
expected_version=$("$build_dir/ddplaunch" --version)
grep -qx "$expected_version" <<<"$out" || fail "no '$expected_version' in:"$'\n'"$out"
for rank in 0 1; do
  grep -q "^\[default$rank\]:rank $rank of 2: sum 3, ddplaunch_recovery from /opt/venv/lib/python3[.0-9]*/site-packages$" \
    <<<"$out" || fail "rank $rank did not run in the venv:"$'\n'"$out"
done
grep -q "^import ok: /opt/venv/lib/python3" <<<"$out" || fail "ddplaunch_recovery did not import"
echo "wheel ok in a fresh Debian 12 root: $(basename "$wheel")"
