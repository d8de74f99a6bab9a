"""What ddplaunch_recovery costs per step when nothing fails (docs/benchmarks.md):
the same model, data and batch trained by a plain DDP loop (DistributedSampler, DataLoader,
DDP) and by the module's loop (Elastic.batches, Elastic.step, ResumableSampler), alternated
in rounds on one process group, each round a fixed number of steps; rank 0 prints the median
ms per step of each. Run it under ddplaunch --in_place_recovery (the channel open) or torchrun:
    ddplaunch --standalone --nproc_per_node 2 --in_place_recovery \\
        bench/recovery/pt_step_cost.py [--steps 200 --rounds 5 --hidden 256]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

here = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(here, "..", "..", "worker_runtime", "python"))
import ddplaunch_recovery as dr  # noqa: E402


def model_of(args):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(),
                               torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                               torch.nn.Linear(args.hidden, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch_size", type=int, default=64)
    args = p.parse_args()
    rows = args.steps * args.batch_size * 8  # more than a round needs at any world size
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(rows, 64, generator=g), torch.randint(0, 10, (rows,)))
    loss_fn = torch.nn.CrossEntropyLoss()

    module = model_of(args)
    opt = torch.optim.SGD(module.parameters(), lr=0.01)
    elastic = dr.Elastic(module, opt, backend="gloo")  # also the plain loop's group
    elastic.start()
    sampler = dr.ResumableSampler(rows, args.batch_size, elastic)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    plain_module = model_of(args)
    plain = DistributedDataParallel(plain_module)
    plain_opt = torch.optim.SGD(plain_module.parameters(), lr=0.01)
    plain_loader = DataLoader(data, batch_size=args.batch_size, drop_last=True,
                              sampler=DistributedSampler(data, shuffle=True, seed=0))

    def plain_round():
        done = 0
        for x, y in plain_loader:
            plain_opt.zero_grad(set_to_none=True)
            loss_fn(plain(x), y).backward()
            plain_opt.step()
            done += 1
            if done == args.steps:
                return

    def module_round():
        done = 0
        elastic.position = 0
        for x, y in elastic.batches(loader):
            with elastic.step():
                opt.zero_grad(set_to_none=True)
                loss_fn(elastic.model(x), y).backward()
                opt.step()
            done += 1
            if done == args.steps:
                return

    times = {"plain DDP loop": [], "ddplaunch_recovery loop": []}
    for _ in range(args.rounds):
        for name, fn in (("plain DDP loop", plain_round), ("ddplaunch_recovery loop",
                                                           module_round)):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            dist.barrier()
            times[name].append(1e3 * (time.perf_counter() - t0) / args.steps)
    if dist.get_rank() == 0:
        channel = "open" if elastic.channel else "none"
        for name, ms in times.items():
            print("%s: %.3f ms/step median of %d rounds (min %.3f, max %.3f); world %d, "
                  "recovery channel %s" % (name, statistics.median(ms), len(ms), min(ms),
                                           max(ms), dist.get_world_size(), channel),
                  flush=True)
    elastic.close()


if __name__ == "__main__":
    main()
