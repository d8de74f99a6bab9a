#!/usr/bin/python3
"""Reference for bench/rdzv: PyTorch's own c10d dynamic rendezvous (DynamicRendezvousHandler
over C10dRendezvousBackend, as torchrun uses it) with N simulated nodes as threads in one
process against one TCPStore, min = max = N. Prints "| N | median s | min | max |" rows
(--rows: without the table's header, for a driver that runs one size per process).

    /usr/bin/python3 scripts/bench/rdzv_torch_reference.py 8 32 64

Any PyTorch: next_rendezvous() returns a (store, rank, world_size) tuple up to 2.3 and a
RendezvousInfo from 2.4 on (which also makes rank 0 start the workers' TCPStore, as torchrun
does); the header names the version.
"""
import statistics
import sys
import threading
import time
from datetime import timedelta

from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler, RendezvousTimeout)

REPEATS = int(__import__("os").environ.get("REPEATS", "3"))


def one_round(port, nodes, run_id):
    handlers = []
    for i in range(nodes):
        store = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=600))
        backend = C10dRendezvousBackend(store, run_id)
        handlers.append(DynamicRendezvousHandler.from_backend(
            run_id, store, backend, min_nodes=nodes, max_nodes=nodes,
            timeout=RendezvousTimeout(join=timedelta(seconds=600),
                                      last_call=timedelta(seconds=1))))
    ranks = [None] * nodes
    go = threading.Event()

    def join(i):
        go.wait()
        info = handlers[i].next_rendezvous()
        ranks[i] = info.rank if hasattr(info, "rank") else info[1]

    threads = [threading.Thread(target=join, args=(i,)) for i in range(nodes)]
    for t in threads:
        t.start()
    start = time.monotonic()
    go.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    assert sorted(ranks) == list(range(nodes)), ranks
    for h in handlers:
        h.shutdown()
    return elapsed


def main():
    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=600))
    import torch
    version = torch.__version__.split("+")[0]
    if "--rows" not in sys.argv:
        print(f"| nodes | torch {version} c10d median (s) | min | max |")
        print("| ---: | ---: | ---: | ---: |")
    for nodes in [int(a) for a in sys.argv[1:] if a != "--rows"] or [8, 32, 64]:
        times = [one_round(server.port, nodes, f"ref-{nodes}-{r}") for r in range(REPEATS)]
        print(f"| {nodes} | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |",
              flush=True)


if __name__ == "__main__":
    main()
