"""Hosts made of network namespaces behind one bridge, as tests/support/netns.hpp builds them.

N hosts are N+1 namespaces: host i has `lo` and `eth0` up, eth0 holding 10.X.Y.(i+1)/24;
eth0 is one end of a veth pair whose other end, `h<i>`, is a port of the bridge `br0` in a
switch namespace of its own. A cut downs the switch port: every packet to or from the host
is dropped silently, both ways (a failed switch port). Nothing is added to the machine's own
network. Names carry the driver's pid, so concurrent runs do not meet; a crashed run's
leftovers (names of a pid that no longer runs) are deleted by the next cluster made.
"""
import os
import re
import shutil
import subprocess

PREFIX = "ddpchaos-"


class Unavailable(RuntimeError):
    """The machine cannot make namespaces (not root, no `ip`, the kernel refuses)."""


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise Unavailable("ip %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                   (r.stderr or r.stdout).strip()))
    return r


def _namespaces():
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _remove_leftovers():
    for name in _namespaces():
        m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            _ip("netns", "delete", name, check=False)


class Cluster:
    def __init__(self, hosts):
        if os.geteuid() != 0:
            raise Unavailable("not root: network namespaces need root")
        if shutil.which("ip") is None:
            raise Unavailable("no `ip` (iproute2) on PATH")
        _remove_leftovers()
        pid = os.getpid()
        self.prefix = "%s%d-" % (PREFIX, pid)
        self.net = "10.%d.%d." % (200 + (pid >> 16) % 50, (pid >> 8) & 0xff)
        self.switch = self.prefix + "sw"
        self.names = []
        self.addrs = []
        self._made = []
        try:
            _ip("netns", "add", self.switch)
            self._made.append(self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for i in range(hosts):
                name = "%sh%d" % (self.prefix, i)
                addr = "%s%d" % (self.net, i + 1)
                _ip("netns", "add", name)
                self._made.append(name)
                _ip("-n", self.switch, "link", "add", "h%d" % i, "type", "veth", "peer", "name",
                    "eth0", "netns", name)
                _ip("-n", self.switch, "link", "set", "h%d" % i, "master", "br0", "up")
                _ip("-n", name, "link", "set", "lo", "up")
                _ip("-n", name, "addr", "add", addr + "/24", "dev", "eth0")
                _ip("-n", name, "link", "set", "eth0", "up")
                self.names.append(name)
                self.addrs.append(addr)
        except Unavailable:
            self.close()
            raise

    def set_rto_max(self, ms):
        """Caps TCP's resend interval in every host (Linux 6.15 on): a connection sending into
        a blip tries again within `ms` of its end instead of after a doubled back-off."""
        for name in self.names:
            r = subprocess.run(["ip", "netns", "exec", name, "sysctl", "-qw",
                                "net.ipv4.tcp_rto_max_ms=%d" % ms], capture_output=True, text=True)
            if r.returncode != 0:
                raise Unavailable("sysctl net.ipv4.tcp_rto_max_ms in %s: %s" % (name, r.stderr))

    def exec_prefix(self, i):
        """The argv prefix that runs a command on host i (`ip netns exec` execs in place, so
        the pid of the command is the pid of the process started)."""
        return ["ip", "netns", "exec", self.names[i]]

    def cut(self, i):
        _ip("-n", self.switch, "link", "set", "h%d" % i, "down")

    def restore(self, i):
        _ip("-n", self.switch, "link", "set", "h%d" % i, "up")

    def pids(self, i):
        """Every process living in host i's network namespace."""
        r = _ip("netns", "pids", self.names[i], check=False)
        return [int(p) for p in r.stdout.split()]

    def close(self):
        for name in reversed(self._made):
            _ip("netns", "delete", name, check=False)
        self._made = []
