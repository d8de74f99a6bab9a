"""PyTorch's own TCPStore server (Debian's torch 1.13) for the store benchmark.

Prints the bound port on the first line, then serves until stdin closes or SIGTERM/SIGINT.
Usage: /usr/bin/python3 store_torch_server.py [PORT]
"""
import signal
import sys
from datetime import timedelta

import torch.distributed as dist


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    store = dist.TCPStore("127.0.0.1", port, None, True, timedelta(seconds=600),
                          wait_for_workers=False)
    print(store.port, flush=True)
    signal.sigwait([signal.SIGTERM, signal.SIGINT])
    del store


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM, signal.SIGINT])
    main()
