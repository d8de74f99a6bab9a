"""Record what real PyTorch TCPStore clients and servers say to each other.

Run it under the python of the PyTorch release to record (stdlib + torch only):

    /var/cache/ddplaunch/venvs/torch-2.5.1/bin/python tests/store/golden/record.py \
        --release 2.5.1 --out tests/store/golden/transcripts

For each scenario and each server backend the release has (classic; libuv where TCPStore takes
`use_libuv`), it starts PyTorch's OWN TCPStore server (is_master=True, on a free loopback port),
puts a recording TCP proxy in front of it (a process of its own: see Proxy), and points one or
more client TCPStores (is_master=False) at the proxy. The proxy forwards and records every
chunk it reads, per connection and direction, in the order they happened (a chunk is recorded
before it is forwarded, so a reply is always recorded after the request that caused it, across
connections too). The result is one JSON-lines transcript per (release, backend, scenario):
<out>/<release>/<backend>/<scenario>.jsonl; README.md in this folder describes the format,
tests/store/golden/replay.py replays it against ddpstore.

The master TCPStore's own client connection goes straight to its server (not through the
proxy) and does nothing that changes the store (wait_for_workers=False), so a fresh ddpstore
holds the same keys as PyTorch's server did when a transcript starts.
"""
import argparse
import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
from datetime import timedelta

# torch is imported in main(): the proxy process (--proxy) is stdlib only.
torch = dist = None

FORMAT = 1
HOST = "127.0.0.1"
# A client request followed by the same client's next request with no reply in between, this
# long apart, is recorded as a silence the replay asserts (a wait that timed out).
SILENCE_GAP_S = 0.15
SILENCE_MAX_MS = 400


def printable(data):
    return "".join(chr(b) if 32 <= b < 127 else "." for b in data)


class Proxy:
    """The proxy itself (stdlib only): runs in its own process, because a client TCPStore may
    hold the GIL while it waits for a reply (1.13's constructor does), and a proxy thread in
    the client's process could then never forward it. The recorder drives it through a line
    protocol on stdin/stdout (step / result / count / dump)."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.events = []
        self.lock = threading.Lock()
        self.next_conn = 0
        self.last = {}  # conn -> (dir, monotonic time) of its last recorded chunk
        self.stopping = False
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((HOST, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((HOST, self.upstream_port))
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                conn = self.next_conn
                self.next_conn += 1
                self.events.append({"conn": conn, "open": True})
            for src, dst, direction in ((client, upstream, "c2s"), (upstream, client, "s2c")):
                threading.Thread(target=self._pump, args=(conn, src, dst, direction),
                                 daemon=True).start()

    def _pump(self, conn, src, dst, direction):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            with self.lock:
                now = time.monotonic()
                prev = self.last.get(conn)
                if data:
                    if (direction == "c2s" and prev is not None and prev[0] == "c2s"
                            and now - prev[1] >= SILENCE_GAP_S):
                        # The server said nothing on this connection between two requests of
                        # its client that were this far apart (a wait that timed out).
                        ms = min(int((now - prev[1]) * 1000 * 0.8), SILENCE_MAX_MS)
                        self.events.append({"conn": conn, "silence_ms": ms})
                    self.events.append({"conn": conn, "dir": direction, "hex": data.hex(),
                                        "ascii": printable(data)})
                    self.last[conn] = (direction, now)
                elif not self.stopping:
                    self.events.append({"conn": conn, "dir": direction, "eof": True})
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def serve_control(self):
        out = sys.stdout
        out.write(f"port {self.port}\n")
        out.flush()
        for line in sys.stdin:
            cmd, _, arg = line.rstrip("\n").partition(" ")
            with self.lock:
                if cmd == "step":
                    self.events.append(json.loads(arg))
                    reply = str(len(self.events) - 1)
                elif cmd == "result":
                    index, _, extra = arg.partition(" ")
                    self.events[int(index)].update(json.loads(extra))
                    reply = "ok"
                elif cmd == "count":
                    reply = str(len(self.events))
                elif cmd == "dump":
                    self.stopping = True
                    reply = json.dumps(self.events)
                else:
                    reply = "?"
            out.write(reply + "\n")
            out.flush()


class Recorder:
    """The recorder's handle on a proxy process in front of upstream_port."""

    def __init__(self, upstream_port):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--proxy",
                                      str(upstream_port)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        word, port = self.proc.stdout.readline().split()
        assert word == "port"
        self.port = int(port)

    def _ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().rstrip("\n")

    def step(self, name, call):
        """Marks the start of an API call; returns a handle for note()."""
        return int(self._ask("step " + json.dumps({"step": name, "call": call})))

    def note(self, index, **fields):
        self._ask(f"result {index} " + json.dumps(fields))

    def settle(self, quiet_s=0.3):
        """Wait until no chunk has been recorded for quiet_s."""
        n = -1
        while True:
            cur = int(self._ask("count"))
            if cur == n:
                return
            n = cur
            time.sleep(quiet_s)

    def close(self):
        events = json.loads(self._ask("dump"))
        self.proc.stdin.close()
        self.proc.kill()
        self.proc.wait()
        return events


def has_libuv_kwarg():
    doc = dist.TCPStore.__init__.__doc__ or ""
    return "use_libuv" in doc


def start_master(backend, world_size=2):
    kw = dict(world_size=world_size, is_master=True, timeout=timedelta(seconds=30),
              wait_for_workers=False)
    if has_libuv_kwarg():
        kw["use_libuv"] = backend == "libuv"
    master = dist.TCPStore(HOST, 0, **kw)
    actual = getattr(master, "libuvBackend", False) and "libuv" or "classic"
    if actual != backend:
        raise RuntimeError(f"asked for the {backend} backend, the server runs {actual}")
    return master


def client(rec, world_size=2, timeout_s=10):
    return dist.TCPStore(HOST, rec.port, world_size, False, timedelta(seconds=timeout_s))


def run_op(rec, name, call, fn):
    step = rec.step(name, call)
    try:
        result = fn()
        if not isinstance(result, (type(None), bool, int, str, bytes, list, tuple)):
            result = f"<{type(result).__name__}>"  # no addresses in a transcript
        rec.note(step, result=repr(result) if not isinstance(result, str) else result)
    except Exception as e:  # the exception is part of what is recorded
        rec.note(step, raised=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    rec.settle(0.1)
    return step


def has(name):
    return hasattr(dist.TCPStore, name) or hasattr(dist.Store, name)


# --- scenarios: each gets a fresh server, a fresh proxy, and its own client(s) ---------------


def construct(rec):
    """The scenario's client, made as its first recorded step."""
    made = []
    run_op(rec, "construct", "TCPStore(host, port, 2, False, 10s)",
           lambda: made.append(client(rec)))
    return made[0] if made else None

def sc_construct(rec):
    """Only the client's construction (world_size=2: it ADDs init/), then it goes away."""
    run_op(rec, "construct", "TCPStore(host, port, 2, False, 10s)", lambda: client(rec))
    return True


def sc_construct_no_world(rec):
    """Construction with world_size=None: the client does not count itself in (no init/ ADD)."""
    run_op(rec, "construct", "TCPStore(host, port, None, False, 10s)",
           lambda: client(rec, world_size=None))
    return True


def sc_basic(rec):
    c = construct(rec)
    run_op(rec, "set", "set('key', 'value')", lambda: c.set("key", "value"))
    run_op(rec, "get", "get('key')", lambda: c.get("key"))
    run_op(rec, "add_new", "add('counter', 5)", lambda: c.add("counter", 5))
    run_op(rec, "add_neg", "add('counter', -2)", lambda: c.add("counter", -2))
    run_op(rec, "get_counter", "get('counter')", lambda: c.get("counter"))
    run_op(rec, "compare_set_missing_empty", "compare_set('cs', '', 'first')",
           lambda: c.compare_set("cs", "", "first"))
    run_op(rec, "compare_set_match", "compare_set('cs', 'first', 'second')",
           lambda: c.compare_set("cs", "first", "second"))
    run_op(rec, "compare_set_mismatch", "compare_set('cs', 'wrong', 'third')",
           lambda: c.compare_set("cs", "wrong", "third"))
    run_op(rec, "compare_set_missing_nonempty", "compare_set('nocs', 'x', 'y')",
           lambda: c.compare_set("nocs", "x", "y"))
    if has("check"):
        run_op(rec, "check_present", "check(['key', 'counter'])",
               lambda: c.check(["key", "counter"]))
        run_op(rec, "check_missing", "check(['key', 'missing'])",
               lambda: c.check(["key", "missing"]))
    run_op(rec, "wait_present", "wait(['key', 'counter'])", lambda: c.wait(["key", "counter"]))
    run_op(rec, "wait_present_timeout", "wait(['key'], 5s)",
           lambda: c.wait(["key"], timedelta(seconds=5)))
    run_op(rec, "num_keys", "num_keys()", c.num_keys)
    run_op(rec, "delete_present", "delete_key('key')", lambda: c.delete_key("key"))
    run_op(rec, "delete_missing", "delete_key('key')", lambda: c.delete_key("key"))
    run_op(rec, "num_keys_after_delete", "num_keys()", c.num_keys)
    run_op(rec, "set_binary", "set('bin', b'\\x00\\xff\\x01')",
           lambda: c.set("bin", b"\x00\xff\x01"))
    run_op(rec, "get_binary", "get('bin')", lambda: c.get("bin"))
    run_op(rec, "set_empty", "set('empty', '')", lambda: c.set("empty", ""))
    run_op(rec, "get_empty", "get('empty')", lambda: c.get("empty"))
    del c
    return True


def sc_wait_timeout(rec):
    c = construct(rec)
    run_op(rec, "wait_times_out", "wait(['never'], 300ms)",
           lambda: c.wait(["never"], timedelta(milliseconds=300)))
    # The same connection, used again after the timeout.
    run_op(rec, "set_after", "set('after', 'x')", lambda: c.set("after", "x"))
    run_op(rec, "get_after", "get('after')", lambda: c.get("after"))
    run_op(rec, "set_timeout", "set_timeout(300ms)",
           lambda: c.set_timeout(timedelta(milliseconds=300)))
    run_op(rec, "get_times_out", "get('nothing') (store timeout 300ms)", lambda: c.get("nothing"))
    run_op(rec, "set_after_get", "set('after2', 'y')", lambda: c.set("after2", "y"))
    run_op(rec, "get_after_get", "get('after2')", lambda: c.get("after2"))
    # The key the timed-out wait asked for appears: nothing may reach this client now.
    run_op(rec, "set_never", "set('never', 'late')", lambda: c.set("never", "late"))
    run_op(rec, "get_never", "get('never')", lambda: c.get("never"))
    run_op(rec, "num_keys", "num_keys()", c.num_keys)
    del c
    return True


def sc_wait_wake(rec):
    """A wait on one client woken by a set on another; a get woken by an add."""
    st = {}

    def make(n):
        def f():
            st[n] = client(rec)
        return f
    run_op(rec, "construct_a", "TCPStore(host, port, 2, False, 10s)", make("a"))
    run_op(rec, "construct_b", "TCPStore(host, port, 2, False, 10s)", make("b"))
    a, b = st["a"], st["b"]
    res = {}
    step = rec.step("a_wait", "a.wait(['late']) in a thread")

    def waiter():
        try:
            a.wait(["late"])
            res["wait"] = "ok"
        except Exception as e:
            res["wait"] = f"{type(e).__name__}: {e}"
    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.4)
    run_op(rec, "b_set", "b.set('late', 'v')", lambda: b.set("late", "v"))
    t.join()
    rec.note(step, result=res["wait"])
    rec.settle(0.1)
    step = rec.step("a_get", "a.get('counted') in a thread")

    def getter():
        res["get"] = repr(a.get("counted"))
    t = threading.Thread(target=getter)
    t.start()
    time.sleep(0.4)
    run_op(rec, "b_add", "b.add('counted', 3)", lambda: b.add("counted", 3))
    t.join()
    rec.note(step, result=res["get"])
    rec.settle(0.1)
    return True


def sc_append_multi(rec):
    if not (has("append") and has("multi_get")):
        return False
    c = construct(rec)
    run_op(rec, "append_new", "append('ap', 'a')", lambda: c.append("ap", "a"))
    run_op(rec, "append_more", "append('ap', 'bc')", lambda: c.append("ap", "bc"))
    run_op(rec, "get_ap", "get('ap')", lambda: c.get("ap"))
    run_op(rec, "multi_set", "multi_set(['m1', 'm2'], ['v1', 'v22'])",
           lambda: c.multi_set(["m1", "m2"], ["v1", "v22"]))
    run_op(rec, "multi_get", "multi_get(['m1', 'm2', 'ap'])",
           lambda: c.multi_get(["m1", "m2", "ap"]))
    run_op(rec, "num_keys", "num_keys()", c.num_keys)
    return True


def sc_queue(rec):
    if not has("queue_push"):
        return False
    if rec.backend == "classic":
        # The classic server has no queue commands: it closes the connection at the first
        # QUEUE_LEN and the client reconnects and fails op after op. Not a reply to copy.
        return False
    st = {}

    def make(n):
        def f():
            st[n] = client(rec)
        return f
    run_op(rec, "construct", "TCPStore(host, port, 2, False, 10s)", make("a"))
    c = st["a"]
    run_op(rec, "queue_len_missing", "queue_len('q')", lambda: c.queue_len("q"))
    run_op(rec, "queue_push_1", "queue_push('q', 'one')", lambda: c.queue_push("q", "one"))
    run_op(rec, "queue_push_2", "queue_push('q', 'two')", lambda: c.queue_push("q", "two"))
    run_op(rec, "queue_len", "queue_len('q')", lambda: c.queue_len("q"))
    if has("check"):
        run_op(rec, "check_queue", "check(['q'])", lambda: c.check(["q"]))
    run_op(rec, "queue_pop", "queue_pop('q')", lambda: c.queue_pop("q"))
    run_op(rec, "queue_pop_nonblock", "queue_pop('q', block=False)",
           lambda: c.queue_pop("q", block=False))
    run_op(rec, "queue_pop_empty_nonblock", "queue_pop('q', block=False)",
           lambda: c.queue_pop("q", block=False))
    run_op(rec, "queue_len_empty", "queue_len('q')", lambda: c.queue_len("q"))
    run_op(rec, "num_keys", "num_keys()", c.num_keys)
    # A blocking pop woken by another client's push.
    run_op(rec, "construct_b", "TCPStore(host, port, 2, False, 10s)", make("b"))
    b = st["b"]
    res = {}
    step = rec.step("a_queue_pop_blocking", "a.queue_pop('w') in a thread")

    def popper():
        try:
            res["pop"] = repr(c.queue_pop("w"))
        except Exception as e:
            res["pop"] = f"{type(e).__name__}: {e}"
    t = threading.Thread(target=popper)
    t.start()
    time.sleep(0.4)
    run_op(rec, "b_queue_push", "b.queue_push('w', 'woken')", lambda: b.queue_push("w", "woken"))
    t.join()
    rec.note(step, result=res["pop"])
    rec.settle(0.1)
    run_op(rec, "set_timeout", "set_timeout(300ms)",
           lambda: c.set_timeout(timedelta(milliseconds=300)))
    run_op(rec, "queue_pop_times_out", "queue_pop('w') (store timeout 300ms)",
           lambda: c.queue_pop("w"))
    run_op(rec, "queue_len_after", "queue_len('w')", lambda: c.queue_len("w"))
    return True


def sc_list_keys(rec):
    if not has("list_keys"):
        return False
    c = construct(rec)
    run_op(rec, "list_keys_initial", "list_keys()", c.list_keys)
    run_op(rec, "set_b", "set('b/2', 'x')", lambda: c.set("b/2", "x"))
    run_op(rec, "set_a", "set('a/1', 'y')", lambda: c.set("a/1", "y"))
    run_op(rec, "list_keys", "list_keys()", c.list_keys)
    run_op(rec, "num_keys", "num_keys()", c.num_keys)
    return True


def sc_barrier(rec):
    if not has("barrier"):
        return False
    st = {}

    def make(n):
        def f():
            st[n] = client(rec)
        return f
    run_op(rec, "construct_a", "TCPStore(host, port, 2, False, 10s)", make("a"))
    a = st["a"]
    run_op(rec, "barrier_1", "barrier('solo', 1)", lambda: a.barrier("solo", 1))
    run_op(rec, "construct_b", "TCPStore(host, port, 2, False, 10s)", make("b"))
    b = st["b"]
    res = {}
    step = rec.step("a_barrier_2", "a.barrier('pair', 2) in a thread")

    def first():
        try:
            a.barrier("pair", 2)
            res["a"] = "ok"
        except Exception as e:
            res["a"] = f"{type(e).__name__}: {e}"
    t = threading.Thread(target=first)
    t.start()
    time.sleep(0.4)
    run_op(rec, "b_barrier_2", "b.barrier('pair', 2)", lambda: b.barrier("pair", 2))
    t.join()
    rec.note(step, result=res["a"])
    rec.settle(0.1)
    run_op(rec, "barrier_times_out", "a.barrier('lonely', 2, 300ms)",
           lambda: a.barrier("lonely", 2, timedelta(milliseconds=300)))
    run_op(rec, "set_after", "a.set('after', 'x')", lambda: a.set("after", "x"))
    run_op(rec, "get_after", "a.get('after')", lambda: a.get("after"))
    # What the barriers left behind under their keys.
    run_op(rec, "get_solo", "a.get('solo')", lambda: a.get("solo"))
    run_op(rec, "get_pair", "a.get('pair')", lambda: a.get("pair"))
    run_op(rec, "get_lonely", "a.get('lonely')", lambda: a.get("lonely"))
    run_op(rec, "num_keys", "a.num_keys()", a.num_keys)
    if has("list_keys"):
        run_op(rec, "list_keys", "a.list_keys()", a.list_keys)
    return True


def sc_clone(rec):
    if not has("clone"):
        return False
    c = construct(rec)
    st2 = [None]

    def do_clone():
        st2[0] = c.clone()
    run_op(rec, "clone", "clone()", do_clone)
    run_op(rec, "clone_set", "clone.set('k', 'v')", lambda: st2[0].set("k", "v"))
    run_op(rec, "get", "get('k')", lambda: c.get("k"))
    return True


WORKER = r"""
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
dist.barrier()
print("RESULT", int(t.item()), flush=True)
dist.destroy_process_group()
"""


def sc_agent_pg(rec):
    """Two ranks of init_process_group('gloo', 'env://') under an agent store, as
    torch.distributed.run starts them (TORCHELASTIC_USE_AGENT_STORE=True): every rank is a
    client of the store the agent (here: this recorder) hosts."""
    step = rec.step("agent_pg", "2 processes: init_process_group('gloo', init_method='env://'); "
                    "all_reduce; barrier; destroy_process_group")
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR=HOST, MASTER_PORT=str(rec.port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", GROUP_RANK="0",
                   TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0",
                   TORCHELASTIC_RUN_ID="golden", GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        # Rank 0 first: its connection is conn 0 in every recording.
        time.sleep(1.0 if rank == 0 else 0)
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        outs.append((p.returncode, out.decode(errors="replace").strip().splitlines()[-3:]))
    rec.note(step, result=repr(outs))
    rec.settle(0.5)
    return all(rc == 0 for rc, _ in outs)


SCENARIOS = {
    "construct": sc_construct,
    "construct_no_world": sc_construct_no_world,
    "basic": sc_basic,
    "wait_timeout": sc_wait_timeout,
    "wait_wake": sc_wait_wake,
    "append_multi": sc_append_multi,
    "queue": sc_queue,
    "list_keys": sc_list_keys,
    "barrier": sc_barrier,
    "clone": sc_clone,
    "agent_pg": sc_agent_pg,
}


def record(release, backend, name, out_dir):
    master = start_master(backend)
    rec = Recorder(master.port)
    rec.backend = backend
    ok = False
    try:
        ok = SCENARIOS[name](rec)
    except Exception:
        traceback.print_exc()
        ok = False
    rec.settle(0.3)
    gc.collect()  # drop the clients: their connections' ends are recorded as eof
    rec.settle(0.3)
    events = rec.close()
    if ok is False:
        return None
    header = {"format": FORMAT, "release": release, "torch": torch.__version__,
              "backend": backend, "scenario": name, "python": sys.version.split()[0],
              "recorded_ok": bool(ok)}
    path = os.path.join(out_dir, release, backend, name + ".jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for e in events:
            f.write(json.dumps(e) + "\n")
    del master
    return path


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--proxy":
        Proxy(int(sys.argv[2])).serve_control()
        return
    global torch, dist
    import torch
    import torch.distributed as dist
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", required=True, help="the release name used in the path")
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", action="append", choices=["classic", "libuv"])
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    backends = args.backend or (["classic", "libuv"] if has_libuv_kwarg() else ["classic"])
    for backend in backends:
        try:
            start_master(backend)
        except Exception as e:  # e.g. 2.1's wheels take use_libuv but have no libuv
            print(f"{backend}: not recorded: {e}", flush=True)
            continue
        for name in args.scenario or list(SCENARIOS):
            try:
                path = record(args.release, backend, name, args.out)
            except Exception as e:
                print(f"{backend}/{name}: not recorded: {e}", flush=True)
                continue
            print(f"{backend}/{name}: "
                  + (path or "skipped (not in this release or on this backend)"), flush=True)


if __name__ == "__main__":
    main()
