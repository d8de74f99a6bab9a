#!/usr/bin/env bash
# Times the README's test command (scripts/test.sh) the way a fresh machine runs it: a fresh
# Debian 12 root (scripts/fresh_debian_root.sh, not timed), a clean clone of COMMIT, ccache off,
# nothing of this machine's packages or build trees. Only the machine's one-time caches are
# shared, as CI's machine keeps them: the PyTorch venvs (/var/cache/ddplaunch/venvs, installed
# once per machine by scripts/setup_torch.sh) and the Debian root tarball the wheel test unpacks.
#   scripts/bench/cold_test.sh [COMMIT]        (default HEAD; needs root)
# Writes the run's output and a load-average sample every 15 s to $DDP_COLD_LOGS (default
# /var/tmp/ddplaunch-cold/<commit>), and prints the wall time, CPU time and load at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
commit=$(git rev-parse --short "${1:-HEAD}")
root=${DDP_COLD_ROOT:-/var/tmp/ddplaunch-cold/root}
logs=${DDP_COLD_LOGS:-/var/tmp/ddplaunch-cold/$commit}
cache=/var/cache/ddplaunch
[ "$(id -u)" = 0 ] || { echo "cold_test.sh: needs root (chroot, mounts)" >&2; exit 1; }
[ ! -e "$root" ] || { echo "cold_test.sh: $root exists (a run in progress, or left over)" >&2; exit 1; }
mkdir -p "$logs" "$cache"

mounted=()
cleanup() {
  [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -R -l "${mounted[$i]}" 2>/dev/null || true; done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
bind() {  # bind SOURCE TARGET: recursive, and slave so that nothing unmounted inside leaks out
  mkdir -p "$2"
  mount --rbind "$1" "$2"
  mount --make-rslave "$2"
  mounted+=("$2")
}

scripts/fresh_debian_root.sh "$root"
# What a machine of this kind has besides its packages: name resolution (localhost among it),
# and the network's trust (a custom CA under /usr/local/share/ca-certificates, which the
# ca-certificates package adds to the bundle when setup installs it; pip's config).
cp /etc/resolv.conf /etc/hosts "$root/etc/"
[ ! -e /etc/pip.conf ] || cp /etc/pip.conf "$root/etc/"
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
# The root may hold ca-certificates already (its bundle made without them): the machine's.
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$root/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
# The variables the machine's own shells carry for it (certificate bundles, pip's timeout).
passed=()
for var in SSL_CERT_FILE SSL_CERT_DIR PIP_CERT REQUESTS_CA_BUNDLE CURL_CA_BUNDLE PIP_DEFAULT_TIMEOUT; do
  [ -z "${!var:-}" ] || passed+=("$var=${!var}")
done
# The root is a mount point, as / is on a machine: `ip -n` and `ip netns exec` make their
# mount namespace's / a slave (the network-namespace tests, the chaos harness), and the wheel
# test a private one; neither works on a plain directory, so those tests skipped themselves.
bind "$root" "$root"
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
bind /sys "$root/sys"
bind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run" && mounted+=("$root/run")
bind "$cache" "$root$cache"
git clone -q --no-local "$PWD" "$root/root/ddplaunch"
git -C "$root/root/ddplaunch" checkout -q "$commit"

(while :; do echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg)"; sleep 15; done) >"$logs/load" &
sampler=$!
start=$(date +%s)
status=0
/usr/bin/time -f '%e s wall, %U s user, %S s system' -o "$logs/time" \
  chroot "$root" env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 TERM=dumb CCACHE_DISABLE=1 "${passed[@]}" bash -c 'cd /root/ddplaunch && scripts/test.sh' \
  >"$logs/output" 2>&1 || status=$?
end=$(date +%s)
kill "$sampler" 2>/dev/null
sampler=
grep '^test.sh: ' "$logs/output" || true
echo "cold_test.sh: $commit exit $status, $(cat "$logs/time" 2>/dev/null || echo "$((end - start)) s wall")"
awk '{ print $2 }' "$logs/load" | sort -n |
  awk '{ v[NR] = $1 } END { if (NR) printf "cold_test.sh: load average (1 min) %s-%s, median %s\n", v[1], v[NR], v[int((NR + 1) / 2)] }'
exit "$status"
