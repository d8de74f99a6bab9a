"""PyTorch gloo all_reduce (any version) on the same sizes as allreduce_bench (run by allreduce.sh).

Usage: PYTHON allreduce_torch.py BUDGET_S BYTES... (env: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT). Rank 0 prints "allreduce <bytes> <median_ms> <min_ms> <iters>".
"""
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main():
    budget_s = float(sys.argv[1])
    sizes = [int(s) for s in sys.argv[2:]]
    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    if rank == 0:
        print("init\tgloo\t%.1f" % ((time.perf_counter() - t0) * 1000.0), flush=True)
    for nbytes in sizes:
        buf = torch.ones(nbytes // 4, dtype=torch.float32)
        dist.all_reduce(buf)
        dist.all_reduce(buf)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        one = (time.perf_counter() - t0) * 1000.0
        iters = torch.tensor([min(2000, max(5, int(budget_s * 1000.0 / max(one, 1e-3))))])
        dist.broadcast(iters, 0)  # same iteration count on both ranks
        times = []
        for _ in range(int(iters.item())):
            start = time.perf_counter()
            dist.all_reduce(buf)
            times.append((time.perf_counter() - start) * 1000.0)
        if rank == 0:
            print("allreduce\t%d\t%.4f\t%.4f\t%d" % (nbytes, statistics.median(times), min(times),
                                                     len(times)), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
