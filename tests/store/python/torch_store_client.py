"""A real torch.distributed.TCPStore client (PyTorch 1.13, legacy dialect) against our server.

Usage: torch_store_client.py HOST PORT
Exits 0 and prints OK when every operation behaved as PyTorch's own server would.
"""
import sys
from datetime import timedelta

import torch.distributed as dist


def expect(what, got, want):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, expected {want!r}")


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    store = dist.TCPStore(host, port, None, False, timedelta(seconds=30))

    store.set("key", "value")
    expect("get", store.get("key"), b"value")
    store.set("bin", b"\x00\xff\x00")
    expect("binary get", store.get("bin"), b"\x00\xff\x00")

    expect("add new", store.add("counter", 5), 5)
    expect("add again", store.add("counter", -2), 3)
    expect("add stores ASCII", store.get("counter"), b"3")

    expect("compare_set missing+empty", store.compare_set("cas", "", "first"), b"first")
    expect("compare_set mismatch", store.compare_set("cas", "nope", "x"), b"first")
    expect("compare_set match", store.compare_set("cas", "first", "second"), b"second")
    expect("compare_set missing+expected", store.compare_set("nokey", "e", "d"), b"e")

    # The client prefixes nothing here; every key counts, as with PyTorch's server.
    expect("num_keys", store.num_keys(), 4)
    expect("delete existing", store.delete_key("bin"), True)
    expect("delete missing", store.delete_key("bin"), False)
    expect("num_keys after delete", store.num_keys(), 3)

    store.wait(["key", "counter"])
    store.wait(["key"], timedelta(seconds=5))
    try:
        store.wait(["never"], timedelta(milliseconds=200))
        raise SystemExit("wait on a missing key did not time out")
    except RuntimeError:
        pass

    # get of a missing key waits for it (the 1.13 client sends WAIT first): a second
    # client sets it, the first one's get returns it.
    other = dist.TCPStore(host, port, None, False, timedelta(seconds=30))
    store.set_timeout(timedelta(milliseconds=300))
    try:
        store.get("absent")
        raise SystemExit("get of a missing key did not time out")
    except RuntimeError:
        pass
    other.set("late", "arrived")
    expect("get after another client set", store.get("late"), b"arrived")
    print("OK")


if __name__ == "__main__":
    main()
