"""PyTorch reference for bench/train: the same MLP, data shape and loop as build/train, with
DistributedDataParallel on gloo. Run under torchrun (Debian's 1.13 needs `-r 1 -t 1`):

  /usr/bin/python3 -m torch.distributed.run -r 1 -t 1 --standalone --nproc_per_node=2 \
      bench/train/torch_ddp_mlp.py --max_steps 400

Prints "samples/s <rate>" every --log_every steps (global samples over wall time), like
build/train's progress lines, so one parser reads both.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def batches(args, sampler, x, y):
    """(features, labels) batches of this rank's share of one epoch; full batches only."""
    if args.loader == "dataloader":
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                             batch_size=args.batch_size, sampler=sampler,
                                             drop_last=True)
        yield from loader
        return
    idx = torch.tensor(list(iter(sampler)))
    for off in range(0, len(idx) - args.batch_size + 1, args.batch_size):
        b = idx[off:off + args.batch_size]
        yield x[b], y[b]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=70000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--hidden", type=str, default="256,256")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--max_steps", type=int, default=400)
    p.add_argument("--log_every", type=int, default=50)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--loader", choices=["index", "dataloader"], default="index",
                   help="index: gather each batch from the tensors directly (fastest); "
                        "dataloader: torch.utils.data.DataLoader over a TensorDataset, "
                        "as most DDP scripts are written")
    args = p.parse_args()

    torch.set_num_threads(1)  # one core per worker, as build/train (--blas_threads 1)
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1

    g = torch.Generator().manual_seed(0)
    centres = torch.randn(args.classes, args.features, generator=g) * 6.0 / (2 * args.features) ** 0.5
    labels = torch.randint(0, args.classes, (args.rows,), generator=g)
    feats = centres[labels] + torch.randn(args.rows, args.features, generator=g)
    n_train = args.rows - int(round(0.2 * args.rows))
    x, y = feats[:n_train].contiguous(), labels[:n_train].contiguous()

    sizes = [args.features] + [int(h) for h in args.hidden.split(",")] + [args.classes]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    torch.manual_seed(0)
    model = nn.Sequential(*layers)
    if distributed:
        model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    loss_fn = nn.CrossEntropyLoss()
    sampler = DistributedSampler(range(n_train), num_replicas=world, rank=rank, shuffle=True, seed=0)

    step = 0
    epoch = 0
    last_t = time.perf_counter()
    while step < args.max_steps:
        sampler.set_epoch(epoch)
        for xb, yb in batches(args, sampler, x, y):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            step += 1
            if step % args.log_every == 0:
                now = time.perf_counter()
                if rank == 0:
                    rate = args.log_every * args.batch_size * world / (now - last_t)
                    print(f"step {step} loss {loss.item():.4f} samples/s {rate:.0f}", flush=True)
                last_t = now
            if step >= args.max_steps:
                break
        epoch += 1
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
