"""PyTorch's own TCPStore server for the store benchmarks (store.sh, init.sh).

Prints the bound port on the first line, then serves until SIGTERM/SIGINT. On PyTorch 2.4 and
later the server is its libuv one (the default there, asked for explicitly); on 1.13 the only
one it has. Which one serves is said on stderr.
Usage: PYTHON store_torch_server.py [PORT]
"""
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    args = ("127.0.0.1", port, None, True, timedelta(seconds=600))
    try:
        store = dist.TCPStore(*args, wait_for_workers=False, use_libuv=True)
    except TypeError:  # before 2.2: no use_libuv
        store = dist.TCPStore(*args, wait_for_workers=False)
    backend = "libuv" if getattr(store, "libuvBackend", False) else "legacy"
    print(f"store_torch_server: torch {torch.__version__}, {backend} server", file=sys.stderr)
    print(store.port, flush=True)
    signal.sigwait([signal.SIGTERM, signal.SIGINT])
    del store


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM, signal.SIGINT])
    main()
