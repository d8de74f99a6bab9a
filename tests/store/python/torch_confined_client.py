"""A PyTorch 1.13 TCPStore client on a store with a job secret: it has no secret, so it may
use the worker namespace of the current attempt and nothing else.

Usage: torch_confined_client.py HOST PORT ATTEMPT
Prints INSIDE OK once its namespace works, then REFUSED <what> for each refused operation,
and exits 0 when every outside operation was refused.
"""
import sys
from datetime import timedelta

import torch.distributed as dist


def expect(what, got, want):
    if got != want:
        raise SystemExit(f"{what}: got {got!r}, expected {want!r}")


def refused(what, op):
    # The server closes the connection: each try needs a connection of its own.
    try:
        op()
    except RuntimeError as e:
        print(f"REFUSED {what}: {e}", flush=True)
        return
    raise SystemExit(f"{what} was allowed outside the worker namespace")


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

    refused("get of the rendezvous state", lambda: connect().get("/torchelastic/rdzv/state"))
    # SET has no reply: the refusal shows on the next request of that connection.
    def set_then_ask(store, key):
        store.set(key, "x")
        store.num_keys()

    refused("set of the rendezvous state",
            lambda: set_then_ask(connect(), "/torchelastic/rdzv/state"))
    refused("another attempt's key",
            lambda: set_then_ask(dist.PrefixStore("/worker/attempt_99", connect()), "key"))
    refused("delete of a foreign key", lambda: connect().delete_key("/torchelastic/rdzv/state"))
    print("OUTSIDE REFUSED", flush=True)


if __name__ == "__main__":
    main()
