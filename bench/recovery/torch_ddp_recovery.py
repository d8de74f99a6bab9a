"""PyTorch reference worker for scripts/bench/recovery.sh: the same MLP and data
shape as build/train's defaults (64-256-256-10 on synthetic rows, batch 64 per rank, AdamW),
DistributedDataParallel on gloo, written the way torchelastic asks a script to be: rank 0
checkpoints every --checkpoint_every steps (torch.save to a temp file, then os.replace) and
every start resumes from the checkpoint, so a restart by torchrun (--max_restarts) redoes at
most checkpoint_every - 1 steps.

Data order is kept as a global sample position, so a resume at another world size continues
where the job was: each step takes the next batch_size * world samples of the epoch's
permutation and rank r trains on every world-th of them (as build/train resumes).

Rank 0 prints one line per completed step, and one when it starts, to stderr: torchrun 1.13
on Python 3.11 needs `-r 1 -t 1`, which sends stdout through a file that its tee thread polls
(lines arrive late and in bursts); stderr goes straight to the agent's.
  start restart=<TORCHELASTIC_RESTART_COUNT> world=<W> samples=<global samples done>
  step=<S> samples=<global samples done> world=<W>
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=140000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--hidden", type=str, default="256,256")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--max_steps", type=int, default=100000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--checkpoint_dir", type=str, required=True)
    p.add_argument("--checkpoint_every", type=int, default=1)
    args = p.parse_args()

    torch.set_num_threads(1)  # one core per worker, as build/train (--blas_threads 1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    g = torch.Generator().manual_seed(0)
    centres = (torch.randn(args.classes, args.features, generator=g) * 6.0
               / (2 * args.features) ** 0.5)
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
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    samples = 0  # global samples trained on (all ranks, all epochs)
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    if os.path.exists(path):
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        samples = ckpt["samples"]
    model = DDP(model)
    loss_fn = nn.CrossEntropyLoss()
    if rank == 0:
        print(f"start restart={os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} world={world} "
              f"samples={samples}", file=sys.stderr, flush=True)

    global_batch = args.batch_size * world
    step = samples // global_batch
    perm_epoch, perm = -1, None
    while step < args.max_steps:
        epoch, pos = divmod(samples, n_train)
        if pos + global_batch > n_train:  # the epoch's tail is dropped, as drop_last does
            samples = (epoch + 1) * n_train
            continue
        if epoch != perm_epoch:
            perm = torch.randperm(n_train, generator=torch.Generator().manual_seed(epoch))
            perm_epoch = epoch
        idx = perm[pos:pos + global_batch][rank::world]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        samples += global_batch
        step += 1
        if rank == 0:
            # Print, then checkpoint, in build/train's order (log_progress, then the save).
            print(f"step={step} samples={samples} world={world}", file=sys.stderr, flush=True)
            if step % args.checkpoint_every == 0:
                tmp = f"{path}.tmp.{os.getpid()}"
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                            "samples": samples}, tmp)
                os.replace(tmp, path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
