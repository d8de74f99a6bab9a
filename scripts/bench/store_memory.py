"""Server memory per connection: RSS of a store server before and after N clients connect and
each sends one request (so every connection has been read at least once).

Usage: /usr/bin/python3 scripts/bench/store_memory.py BUILD/ddpstore [N=4096] [more binaries...]
A binary may carry flags, quoted as one argument: "build/ddpstore --io epoll".
Prints one line per binary; docs/benchmarks.md (section Store memory) shows the result.
"""
import os
import resource
import socket
import subprocess
import sys
import time


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def measure(binary, n):
    # Every client comes from 127.0.0.1: lift the per-address connection limit.
    os.environ.setdefault("DDPLAUNCH_STORE_MAX_CONNS_PER_PEER", "1000000")
    server = subprocess.Popen(binary.split() + ["--host", "127.0.0.1", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    socks = []
    try:
        port = int(server.stdout.readline())
        before = rss_mib(server.pid)
        add = bytes([3]) + (1).to_bytes(8, "little") + b"k" + (1).to_bytes(8, "little", signed=True)
        for _ in range(n):  # legacy-dialect ADD k 1
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(add)
            socks.append(s)
        for s in socks:
            if len(s.recv(8)) != 8:
                raise RuntimeError("short ADD reply")
        time.sleep(0.5)
        after = rss_mib(server.pid)
        print(f"{binary}: {n} connections: RSS {before:.1f} MiB -> {after:.1f} MiB "
              f"({(after - before) * 1024 * 1024 / n:,.0f} bytes per connection)")
    finally:
        for s in socks:
            s.close()
        server.terminate()
        server.wait()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binaries = [a for a in sys.argv[1:] if not a.isdigit()]
    counts = [int(a) for a in sys.argv[1:] if a.isdigit()]
    n = counts[0] if counts else 4096
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 256)), hard))
    for binary in binaries:
        measure(binary, n)


if __name__ == "__main__":
    main()
