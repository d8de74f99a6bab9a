"""Brings the loopback interface up in a fresh network namespace without iproute2.

`unshare -n` gives a namespace whose `lo` is down; scripts/bench/netns_exec.sh brings it up
with `ip link set lo up`, and with this where `ip` is missing (the GPU machine's image has none:
docs/gpu.md). Two ioctls, SIOCGIFFLAGS then SIOCSIFFLAGS with IFF_UP, as `ip` does.
"""

import fcntl
import socket
import struct
import sys

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def main() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sh", b"lo", 0))
        flags = struct.unpack("16sh", got[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
    return 0


if __name__ == "__main__":
    sys.exit(main())
