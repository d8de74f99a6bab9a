"""A real torch.distributed.TCPStore client against our server, any PyTorch from 1.13 on.

Usage: torch_store_client.py HOST PORT
Runs every operation this PyTorch's TCPStore has, first against PyTorch's own server (a
TCPStore master on a free port: the reference, so every expectation below is PyTorch's
behaviour, checked on each run) and then against HOST:PORT. Prints "REFERENCE OK", then
"OK <ops>" naming the operations checked; exits non-zero at the first difference.
Keys are left behind for the caller to read: "key" = "value", "counter" = "3", "cas" = "second".
"""
import sys
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=30)


def expect(what, got, want):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, expected {want!r}")


def raises(what, op, error=RuntimeError):
    try:
        op()
    except error:
        return
    raise SystemExit(f"{what} did not raise {error.__name__}")


def run(host, port):
    """Every operation on a fresh server at host:port; returns the names of those checked."""
    store = dist.TCPStore(host, port, None, False, TIMEOUT)
    other = dist.TCPStore(host, port, None, False, TIMEOUT)
    has = lambda op: hasattr(store, op)  # what this version's client exposes
    done = []
    keys0 = store.num_keys()  # PyTorch's own server may hold a key of its own

    store.set("key", "value")
    expect("get", store.get("key"), b"value")
    store.set("bin", b"\x00\xff\x00")
    expect("binary get", store.get("bin"), b"\x00\xff\x00")
    done += ["set", "get"]

    expect("add new", store.add("counter", 5), 5)
    expect("add again", store.add("counter", -2), 3)
    expect("add stores ASCII", store.get("counter"), b"3")
    done.append("add")

    expect("compare_set missing+empty", store.compare_set("cas", "", "first"), b"first")
    expect("compare_set mismatch", store.compare_set("cas", "nope", "x"), b"first")
    expect("compare_set match", store.compare_set("cas", "first", "second"), b"second")
    expect("compare_set missing+expected", store.compare_set("nokey", "e", "d"), b"e")
    expect("compare_set stored nothing", store.num_keys(), keys0 + 4)
    done.append("compare_set")

    if has("check"):
        expect("check present", store.check(["key", "counter"]), True)
        expect("check one missing", store.check(["key", "absent"]), False)
        done.append("check")

    expect("num_keys", store.num_keys(), keys0 + 4)
    expect("delete existing", store.delete_key("bin"), True)
    expect("delete missing", store.delete_key("bin"), False)
    expect("num_keys after delete", store.num_keys(), keys0 + 3)
    done += ["num_keys", "delete_key"]

    store.wait(["key", "counter"])
    store.wait(["key"], timedelta(seconds=5))
    # A wait that times out leaves the connection usable: set and get on it go on.
    raises("wait on a missing key", lambda: store.wait(["never"], timedelta(milliseconds=200)))
    store.set("after_timeout", "still here")
    expect("get after a timed-out wait", store.get("after_timeout"), b"still here")
    expect("the timed-out key was not created", other.num_keys(), keys0 + 4)
    # A wait is released by another client's set.
    setter = threading.Timer(0.2, lambda: other.set("late_wait", "x"))
    setter.start()
    store.wait(["late_wait"], timedelta(seconds=10))
    setter.join()
    done.append("wait")

    # get of a missing key waits for it: it times out, then another client's key arrives.
    store.set_timeout(timedelta(milliseconds=300))
    raises("get of a missing key", lambda: store.get("absent"))
    other.set("late", "arrived")
    expect("get after another client set", store.get("late"), b"arrived")
    store.set_timeout(TIMEOUT)

    if has("append"):
        store.append("log", "po")
        store.append("log", "tato")
        expect("append", store.get("log"), b"potato")
        done.append("append")
    if has("multi_set"):
        store.multi_set(["m1", "m2", "m3"], ["a", "", "c"])
        expect("multi_get", store.multi_get(["m3", "m1", "m2"]), [b"c", b"a", b""])
        expect("multi_get one key", other.multi_get(["key"]), [b"value"])
        done += ["multi_set", "multi_get"]

    if has("queue_push"):
        expect("queue_len missing", store.queue_len("q"), 0)
        store.queue_push("q", "one")
        store.queue_push("q", "two")
        expect("queue_len", store.queue_len("q"), 2)
        expect("queue_pop first in", store.queue_pop("q"), b"one")
        expect("queue_pop", other.queue_pop("q", False), b"two")
        expect("queue_len drained", store.queue_len("q"), 0)
        raises("queue_pop on an empty queue", lambda: store.queue_pop("q", False),
               dist.QueueEmptyError)
        # A blocking pop waits for a push from another client.
        pusher = threading.Timer(0.2, lambda: other.queue_push("q", "three"))
        pusher.start()
        expect("blocking queue_pop", store.queue_pop("q"), b"three")
        pusher.join()
        done += ["queue_push", "queue_pop", "queue_len"]

    if has("list_keys"):
        listed = store.list_keys()
        for key in ("key", "counter", "cas", "log"):
            expect(f"list_keys has {key}", key in listed, True)
        expect("list_keys without the deleted key", "bin" in listed, False)
        expect("list_keys counts as num_keys", len(listed), store.num_keys())
        done.append("list_keys")

    if has("barrier"):
        store.barrier("b1", 1)
        # Two clients: neither leaves before both arrived.
        left = []
        peer = threading.Thread(target=lambda: (other.barrier("b2", 2), left.append("peer")))
        peer.start()
        store.barrier("b2", 2, timedelta(seconds=10))
        peer.join(10)
        expect("the peer left the barrier", left, ["peer"])
        raises("a barrier nobody else joins",
               lambda: store.barrier("b3", 2, timedelta(milliseconds=300)))
        done.append("barrier")

    # The connection that timed out above still works.
    expect("get at the end", store.get("key"), b"value")
    return done


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    reference = dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT)
    run("127.0.0.1", reference.port)
    print("REFERENCE OK", flush=True)
    done = run(host, port)
    print(f"torch {torch.__version__}: OK {' '.join(done)}", flush=True)


if __name__ == "__main__":
    main()
