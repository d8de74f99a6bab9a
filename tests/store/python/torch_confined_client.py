"""A PyTorch TCPStore client on a store with a job secret: it has no secret, so every key it
names is stored under the worker namespace of the attempt it connected in (docs/store.md,
"Attempt scopes"), and nothing else is within its reach.

Usage: torch_confined_client.py HOST PORT ATTEMPT
Prints INSIDE OK once its namespace works, then UNREACHABLE <what> for each key outside it
that it cannot see, and OUTSIDE UNREACHABLE when none could be.
"""
import sys
from datetime import timedelta

import torch.distributed as dist


def expect(what, got, want):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, expected {want!r}")


def present(store, key):
    """CHECK where the client has it (2.x); 1.13's binding has none: a short WAIT instead,
    on a connection of its own (1.13 cannot cancel a timed-out wait)."""
    if hasattr(store, "check"):
        return store.check([key])
    try:
        store.wait([key], timedelta(milliseconds=300))
        return True
    except RuntimeError:
        return False


def unreachable(what, got):
    if got:
        raise SystemExit(f"{what}: reached a key outside the worker namespace")
    print(f"UNREACHABLE {what}", flush=True)


def main():
    host, port, attempt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    timeout = timedelta(seconds=10)

    def connect():
        # What init_process_group("env://") builds under TORCHELASTIC_USE_AGENT_STORE=True.
        return dist.TCPStore(host, port, None, False, timeout)

    store = dist.PrefixStore(f"/worker/attempt_{attempt}", connect())
    store.set("key", "value")
    expect("get", store.get("key"), b"value")
    expect("add", store.add("counter", 2), 2)
    store.wait(["key"], timedelta(seconds=5))
    expect("num_keys >= 2", store.num_keys() >= 2, True)
    expect("delete_key", store.delete_key("counter"), True)
    print("INSIDE OK", flush=True)

    outside = connect()
    unreachable("the rendezvous state", present(connect(), "/torchelastic/rdzv/state"))
    outside.set("/torchelastic/rdzv/state", "x")  # its own copy; the agent's is untouched
    expect("its own copy", outside.get("/torchelastic/rdzv/state"), b"x")
    unreachable("another attempt's key",
                present(dist.PrefixStore("/worker/attempt_99", connect()), "key"))
    expect("delete of its own copy", outside.delete_key("/torchelastic/rdzv/state"), True)
    unreachable("the rendezvous state, to delete",
                outside.delete_key("/torchelastic/rdzv/state"))
    print("OUTSIDE UNREACHABLE", flush=True)


if __name__ == "__main__":
    main()
