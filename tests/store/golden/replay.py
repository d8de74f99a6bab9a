"""Replay recorded PyTorch TCPStore transcripts against ddpstore and compare its replies byte
for byte (stdlib only: no PyTorch needed).

    /usr/bin/python3 tests/store/golden/replay.py --ddpstore build/ddpstore \
        tests/store/golden/transcripts            # every *.jsonl below it
    ... replay.py --ddpstore build/ddpstore tests/store/golden/transcripts/2.5.1/libuv/basic.jsonl

Each transcript gets a fresh ddpstore (loopback, a free port). The events are replayed in the
recorded order: "open" connects, a c2s chunk is sent as recorded, an s2c chunk is read (exactly
that many bytes, 5 s at most) and must equal the recorded bytes, a c2s "eof" shuts the
connection's write side, an s2c "eof" must be the server closing, a "silence_ms" must pass with
no byte from the server on that connection. Before a request is sent on a connection whose
earlier replies were all read, nothing else may have arrived on it. After the last event no
connection may hold unread bytes. The first mismatch ends a transcript's replay (the server's
state no longer follows the recording) and is reported with the step (the Python call being
recorded), the connection, the request that preceded it and both byte strings.

Exit status: 0 when every transcript replayed identically, 1 otherwise (each failing transcript
named with its first mismatch), 2 on a usage or setup error.
"""
import argparse
import json
import os
import select
import socket
import subprocess
import sys
import time

REPLY_TIMEOUT_S = 5.0
EOF_TIMEOUT_S = 3.0
# After a request, how long to wait for its reply before moving on to the next event when the
# reply is the next thing recorded on that connection. Reading replies as soon as they come
# keeps the server's order of requests across connections the recorded one (an ADD's reply
# depends on which connection's ADD ran first); a reply that needs another connection's later
# request (a wait) simply is not there yet, and is read at its own turn.
EAGER_REPLY_S = 0.5
# Before a request on another connection, give the server this long to have read a request
# that gets no reply (a SET), so it runs before the next one as it did when recorded.
SETTLE_S = 0.005


# 2.2+: VALIDATE (0) with its magic number starts every connection; LIST_KEYS is 17 there.
VALIDATE = bytes.fromhex("00cef7853c")
LIST_KEYS = bytes([17])


def parse_key_list(data):
    """A LIST_KEYS reply: uint64 count, then count x (uint64 length + bytes); None if not."""
    if len(data) < 8:
        return None
    n, pos, keys = int.from_bytes(data[:8], "little"), 8, []
    for _ in range(n):
        if pos + 8 > len(data):
            return None
        k = int.from_bytes(data[pos:pos + 8], "little")
        keys.append(data[pos + 8:pos + 8 + k])
        pos += 8 + k
    return keys if pos == len(data) else None


def same_keys(got, want):
    a, b = parse_key_list(got), parse_key_list(want)
    return a is not None and b is not None and sorted(a) == sorted(b)


class Mismatch(Exception):
    pass


def short(data, limit=96):
    h = data.hex()
    return h if len(h) <= limit else f"{h[:limit]}... ({len(data)} bytes)"


class Conn:
    def __init__(self, index, port):
        self.index = index
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=REPLY_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.buf = bytearray()
        self.eof = False
        self.last_request = b""  # the bytes sent since the last reply read (for messages)
        self.last_chunk = b""
        self.fresh = True  # no byte sent since the last reply read
        self.replies_done = True  # every reply recorded so far on it has been read
        self.handshake = None  # whether its first request was 2.2+'s VALIDATE (None: none yet)

    def pump(self, want, timeout):
        """Read until buf holds want bytes, the server closes, or timeout passes."""
        deadline = time.monotonic() + timeout
        while len(self.buf) < want and not self.eof:
            left = max(0.0, deadline - time.monotonic())
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                break
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
            self.buf += data

    def send(self, data):
        self.sock.setblocking(True)
        try:
            self.sock.sendall(data)
        finally:
            self.sock.setblocking(False)


def start_ddpstore(path, io):
    cmd = [path, "--host", "127.0.0.1", "--port", "0"]
    if io:
        cmd += ["--io", io]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.isdigit():
        proc.kill()
        err = proc.stderr.read()
        raise RuntimeError(f"{path} printed {line!r} instead of its port: {err.strip()}")
    return proc, int(line)


# Where ddpstore differs from PyTorch's server on purpose, each (release, backend, scenario,
# step) with the reply PyTorch sends there and ddpstore does not. Nothing else is excused.
#
# A 1.13/2.0 client abandons a timed-out WAIT without CANCEL_WAIT (it has none) and goes on
# with the same connection. PyTorch's server keeps that WAIT parked and answers it when the key
# appears, later, in the middle of other replies: the client reads that stale 0x00 as the reply
# to its next request and fails ("get('never')" raises Socket Timeout in the recording).
# ddpstore drops a parked WAIT when the connection's next WAIT arrives (docs/store.md, "Server
# specifics"), so the stale byte never comes and the connection stays in step.
ABANDONED_WAIT = "PyTorch's server answers a WAIT the client abandoned; ddpstore dropped it"
DIVERGENCES = {
    ("1.13", "classic", "wait_timeout", "set_never"): (b"\x00", ABANDONED_WAIT),
    ("2.0.1", "classic", "wait_timeout", "set_never"): (b"\x00", ABANDONED_WAIT),
}
DIVERGENCE_SILENCE_S = 0.3


def load(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, events = lines[0], lines[1:]
    if header.get("format") != 1:
        raise RuntimeError(f"{path}: unknown transcript format {header.get('format')!r}")
    return header, events


def replay(header, events, port):
    conns = {}
    step = {"step": "(before the first step)", "call": ""}

    def where(c):
        req = short(c.last_request, 64) if c.last_request else "none"
        return (f"step '{step['step']}' ({step['call']}), conn {c.index}, "
                f"after request {req}")

    def next_own(i, conn):
        for e in events[i + 1:]:
            if e.get("conn") == conn and "dir" in e:
                return e
        return None

    for i, e in enumerate(events):
        if "step" in e:
            step = e
            continue
        c = conns.get(e["conn"])
        if e.get("open"):
            conns[e["conn"]] = Conn(e["conn"], port)
            continue
        if "silence_ms" in e:
            c.pump(len(c.buf) + 1, e["silence_ms"] / 1000)
            if c.buf:
                raise Mismatch(f"{where(c)}: expected no reply for {e['silence_ms']} ms "
                               f"(PyTorch's server stayed silent), got {short(bytes(c.buf))}")
            continue
        if e["dir"] == "c2s":
            if c.replies_done and not c.buf:
                c.pump(1, 0)
            if c.replies_done and c.buf:
                raise Mismatch(f"{where(c)}: unexpected bytes before the next request "
                               f"{short(bytes.fromhex(e.get('hex', '')), 64)}: "
                               f"{short(bytes(c.buf))}")
            if e.get("eof"):
                try:
                    c.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                continue
            data = bytes.fromhex(e["hex"])
            if c.handshake is None:
                c.handshake = data.startswith(VALIDATE)
            c.send(data)
            c.last_request = data if c.fresh else c.last_request + data
            c.last_chunk, c.fresh = data, False
            nxt = next_own(i, e["conn"])
            if nxt is not None and nxt["dir"] == "s2c" and "hex" in nxt:
                c.replies_done = False
                c.pump(len(c.buf) + len(nxt["hex"]) // 2, EAGER_REPLY_S)
            later = events[i + 1] if i + 1 < len(events) else None
            if later is not None and later.get("conn") not in (None, e["conn"]):
                time.sleep(SETTLE_S)
            continue
        # s2c
        if e.get("eof"):
            c.pump(len(c.buf) + 1, EOF_TIMEOUT_S)
            if c.buf:
                raise Mismatch(f"{where(c)}: expected the server to close, got "
                               f"{short(bytes(c.buf))}")
            if not c.eof:
                raise Mismatch(f"{where(c)}: expected the server to close the connection "
                               f"(as PyTorch's did), it stayed open {EOF_TIMEOUT_S} s")
            continue
        want = bytes.fromhex(e["hex"])
        divergence = DIVERGENCES.get(
            (header["release"], header["backend"], header["scenario"], step["step"]))
        if divergence is not None and divergence[0] == want:
            # Checked, not skipped: the reply PyTorch sends here must not come from ddpstore.
            c.pump(len(c.buf) + 1, DIVERGENCE_SILENCE_S)
            if c.buf:
                raise Mismatch(f"{where(c)}: expected no reply ({divergence[1]}), got "
                               f"{short(bytes(c.buf))}")
            nxt = next_own(i, e["conn"])
            c.replies_done = nxt is None or nxt["dir"] == "c2s"
            c.fresh = True
            continue
        c.pump(len(want), REPLY_TIMEOUT_S)
        got = bytes(c.buf[:len(want)])
        if got != want and c.handshake and c.last_chunk == LIST_KEYS and same_keys(got, want):
            # LIST_KEYS: PyTorch's server lists its keys in the order of its hash map
            # (std::unordered_map), which is no order at all; the same keys in another order
            # are the same reply. Only this request, only a well-formed list of the same keys.
            got = want
        if got != want:
            more = bytes(c.buf[len(want):len(want) + 16])
            detail = f"got {short(got)}" if got else "got nothing"
            if len(got) < len(want):
                detail += (" (the server closed the connection)" if c.eof
                           else f" (then nothing for {REPLY_TIMEOUT_S} s)")
            elif more:
                detail += f", then {short(more)}"
            raise Mismatch(f"{where(c)}: expected {short(want)}, {detail}")
        del c.buf[:len(want)]
        nxt = next_own(i, e["conn"])
        c.replies_done = nxt is None or nxt["dir"] == "c2s"
        c.fresh = True
    for c in conns.values():
        if not c.eof:
            c.pump(len(c.buf) + 1, 0.05)
        if c.buf:
            raise Mismatch(f"conn {c.index}: {len(c.buf)} bytes more than PyTorch's server "
                           f"sent after the last step: {short(bytes(c.buf))}")
    for c in conns.values():
        c.sock.close()


def transcripts(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in sorted(os.walk(p)):
                for f in sorted(files):
                    if f.endswith(".jsonl"):
                        yield os.path.join(root, f)
        else:
            yield p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ddpstore", default="build/ddpstore")
    ap.add_argument("--io", choices=["auto", "epoll", "io_uring"])
    ap.add_argument("paths", nargs="+", help="transcripts, or folders to search for *.jsonl")
    args = ap.parse_args()
    if not os.access(args.ddpstore, os.X_OK):
        print(f"replay: {args.ddpstore} is not an executable", file=sys.stderr)
        return 2
    files = list(transcripts(args.paths))
    if not files:
        print("replay: no transcripts found", file=sys.stderr)
        return 2
    failed = []
    for path in files:
        header, events = load(path)
        name = f"{header['release']}/{header['backend']}/{header['scenario']}"
        proc, port = start_ddpstore(args.ddpstore, args.io)
        t0 = time.monotonic()
        try:
            replay(header, events, port)
            print(f"PASS {name} ({time.monotonic() - t0:.1f} s)", flush=True)
        except (Mismatch, OSError) as e:
            print(f"FAIL {name}: {e}", flush=True)
            failed.append(name)
        finally:
            proc.terminate()
            try:
                _, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if name in failed and err.strip():
                tail = err.strip().splitlines()[-3:]
                print("  ddpstore said: " + "\n  ".join(tail), flush=True)
    if failed:
        print(f"{len(failed)} of {len(files)} transcripts differ: " + ", ".join(failed))
        return 1
    print(f"all {len(files)} transcripts replayed identically (where ddpstore differs on purpose, DIVERGENCES, it was checked that it does)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
