"""A PyTorch DDP script that survives a lost or joining node in place (docs/recovery.md).

    ddplaunch --nnodes 2:4 --nproc_per_node 1 --rdzv_backend c10d \\
        --rdzv_endpoint head:29400 --in_place_recovery \\
        examples/pytorch_in_place/train.py --epochs 3 --checkpoint_dir /tmp/ckpt

It also runs unchanged under torchrun (no recovery channel: a plain DDP loop). What it has:
a model, SGD with momentum, an LR scheduler, a DataLoader with worker processes, sharding
that follows the current world (ddplaunch_recovery.ResumableSampler), rank-0 checkpoints.
The --fault_* and --sample_log flags are for ddplaunch's tests (tests/e2e).
"""

import argparse
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

# ddplaunch's .deb and wheel put the module on the path; from a source tree, it is here:
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                             "worker_runtime", "python"))
import ddplaunch_recovery as dr  # noqa: E402


class Synthetic(Dataset):
    """rows x features of seeded noise, labelled by a fixed random linear map."""

    def __init__(self, rows, features, classes, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(rows, features, generator=g)
        self.y = (self.x @ torch.randn(features, classes, generator=g)).argmax(dim=1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index], index


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=960)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=16, help="per rank")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max_steps", type=int, default=0, help="stop after this many (0: no limit)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--lr_step_size", type=int, default=10, help="steps per LR decay by 0.9")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    p.add_argument("--device", default="cpu",
                   help="cpu (gloo) or cuda (NCCL; this rank's GPU is cuda:$LOCAL_RANK)")
    p.add_argument("--checkpoint_dir", default="")
    p.add_argument("--checkpoint_every", type=int, default=0, help="steps (0: at epoch ends)")
    p.add_argument("--out", default="", help="rank 0 writes the final parameters here (text)")
    p.add_argument("--sample_log", default="", help="folder: the indices each step trained")
    p.add_argument("--step_lines", action="store_true",
                   help="rank 0 prints step=S samples=N world=W round=R to stderr after "
                        "every step (bench/recovery)")
    p.add_argument("--chaos_fields", action="store_true",
                   help="--sample_log lines also carry t= (wall time) world= pos= (the epoch's "
                        "position before the step) params= (a checksum of the parameters after "
                        "it): bench/chaos")
    p.add_argument("--slow_step_ms", type=int, default=0)
    p.add_argument("--fault_kill_node_at_step", type=int, default=0)
    p.add_argument("--fault_hang_at_step", type=int, default=0)
    p.add_argument("--fault_crash_at_step", type=int, default=0,
                   help="this rank exits 3 after this step (once: a marker in --sample_log)")
    p.add_argument("--fault_rank", type=int, default=-1, help="default: the last rank")
    p.add_argument("--hold_at_step", type=int, action="append", default=[],
                   help="after this step every rank waits until <--hold_file>.<step> exists (a "
                        "test does something to the job meanwhile); may be given again")
    p.add_argument("--hold_file", default="")
    p.add_argument("--no_recovery", action="store_true",
                   help="never open ddplaunch's recovery channel (as a script without the "
                        "module: restarted at a change)")
    return p.parse_args()


def save_checkpoint(elastic, directory):
    """Rank 0, atomically: a reader never sees half a file."""
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, "ckpt.pt.tmp")
    torch.save(elastic.state_dict(), tmp)
    os.replace(tmp, os.path.join(directory, "ckpt.pt"))


def main():
    args = parse_args()
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = torch.nn.Sequential(
        torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.classes))
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_step_size, gamma=0.9)

    # Everything that does not depend on the rank comes before Elastic(): a hot spare's worker
    # (docs/recovery.md, "Spares") has it done while it waits to be admitted.
    dataset = Synthetic(args.rows, args.features, args.classes, args.seed)
    loss_fn = torch.nn.CrossEntropyLoss()

    if args.no_recovery:
        os.environ.pop(dr.ENV_FD, None)
    # 1. The process group, the recovery channel and the state, in one object.
    elastic = dr.Elastic(model, optimizer, scheduler,
                         backend="nccl" if device.type == "cuda" else "gloo")
    ckpt = os.path.join(args.checkpoint_dir, "ckpt.pt") if args.checkpoint_dir else ""

    def resume():  # only when no rank holds live state (a first start or a full restart)
        if ckpt and os.path.exists(ckpt):
            elastic.load_state_dict(torch.load(ckpt, weights_only=False))

    elastic.start(resume=resume)  # 2. the checkpoint, or the survivors' state
    print("rank %d/%d pid %d starts at epoch %d step %d" % (elastic.rank, elastic.world_size,
          os.getpid(), elastic.epoch, elastic.global_step), flush=True)

    # 3. Sharding that follows the world and the position in the epoch.
    sampler = dr.ResumableSampler(len(dataset), args.batch_size, elastic, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, drop_last=True,
                        persistent_workers=args.workers > 0)  # kept through recoveries
    log = None
    if args.sample_log:
        os.makedirs(args.sample_log, exist_ok=True)
        log = open(os.path.join(args.sample_log, "pid%d" % os.getpid()), "a", buffering=1)

    done = False
    for epoch in elastic.epochs(args.epochs):
        for x, y, index in elastic.batches(loader):  # 4. rebuilt after a change
            with elastic.step():                    # 5. a change ends the step here
                optimizer.zero_grad(set_to_none=True)
                # elastic.device, not device: a standby learns its GPU in Elastic().
                x, y = x.to(elastic.device), y.to(elastic.device)
                loss = loss_fn(elastic.model(x), y)
                loss.backward()                     # the gradient all-reduce
                optimizer.step()                    # only after it completed
                scheduler.step()
                if log:  # the step is done once optimizer.step() ran
                    log.write("round=%d epoch=%d step=%d rank=%d idx=%s" % (
                        elastic.round, epoch, elastic.global_step + 1, elastic.rank,
                        ",".join(str(int(i)) for i in index)) + chaos_fields(args, elastic))
            if not elastic.step_done:  # aborted by a change: the new group redoes it
                continue
            step = elastic.global_step
            if args.step_lines and elastic.rank == 0:
                print("step=%d samples=%d world=%d round=%d" % (
                      step, elastic.epoch * args.rows + elastic.position, elastic.world_size,
                      elastic.round), file=sys.stderr, flush=True)
            if elastic.rank == 0 and step % 5 == 0:
                print("epoch %d step %d loss %.4f world %d" % (epoch, step, loss.item(),
                      elastic.world_size), flush=True)
            if ckpt and args.checkpoint_every and step % args.checkpoint_every == 0 \
                    and elastic.rank == 0:
                save_checkpoint(elastic, args.checkpoint_dir)
            fault(args, elastic, ckpt)
            if step in args.hold_at_step:
                while not os.path.exists("%s.%d" % (args.hold_file, step)):
                    time.sleep(0.01)
            if args.slow_step_ms:
                time.sleep(args.slow_step_ms / 1000)
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        if done:
            break
        if ckpt and not args.checkpoint_every and elastic.rank == 0:
            save_checkpoint(elastic, args.checkpoint_dir)

    # Every rank ends with the same parameters (a rank that received the state included).
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    gathered = [torch.zeros_like(flat) for _ in range(elastic.world_size)]
    torch.distributed.all_gather_object(gathered, flat)
    if not all(torch.equal(gathered[0], g) for g in gathered):
        sys.exit("rank %d: the ranks' parameters differ after training" % elastic.rank)
    if elastic.rank == 0:
        print("params in sync on %d ranks" % elastic.world_size, flush=True)
    if args.out and elastic.rank == 0:  # repr of a float32 as a Python float: exact
        with open(args.out + ".tmp", "w") as out:
            for p in model.parameters():
                out.writelines("%r\n" % v for v in p.detach().flatten().tolist())
        os.replace(args.out + ".tmp", args.out)
    print("rank %d done: %d steps, %d in-place recoveries" % (elastic.rank, elastic.global_step,
          elastic.recoveries), flush=True)
    elastic.close()


def chaos_fields(args, elastic):
    """The end of a --sample_log line under --chaos_fields ("\\n" alone without it)."""
    if not args.chaos_fields:
        return "\n"
    flat = torch.cat([p.detach().flatten() for p in elastic.model.parameters()]).cpu()
    checksum = int(flat.view(torch.int32).to(torch.int64).sum())  # any bit differs: it differs
    return " t=%.6f world=%d pos=%d params=%d\n" % (time.time(), elastic.world_size,
                                                    elastic.position, checksum)


def fault(args, elastic, ckpt):
    """Test faults: this node dies, or this rank crashes or hangs (once), after a given step."""
    rank = args.fault_rank if args.fault_rank >= 0 else elastic.world_size - 1
    if elastic.rank != rank:
        return
    step = elastic.global_step
    first_run = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0" and \
        not elastic.recoveries
    if args.fault_kill_node_at_step and step == args.fault_kill_node_at_step and first_run:
        if ckpt and args.checkpoint_every:  # rank 0's checkpoint of this step is written
            while not (os.path.exists(ckpt) and torch.load(ckpt, weights_only=False)
                       ["progress"]["global_step"] == step):
                time.sleep(0.01)
        print("rank %d: killing this node (agent pid %d) after step %d" % (
            elastic.rank, os.getppid(), step), flush=True)
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    if args.fault_crash_at_step and step == args.fault_crash_at_step:
        marker = os.path.join(args.sample_log or "/tmp", ".crashed")
        if not os.path.exists(marker):
            open(marker, "w").close()
            print("rank %d: crashing (exit 3) after step %d" % (elastic.rank, step), flush=True)
            os._exit(3)
    if args.fault_hang_at_step and step == args.fault_hang_at_step:
        marker = os.path.join(args.sample_log or "/tmp", ".hung")
        if not os.path.exists(marker):
            open(marker, "w").close()
            print("rank %d: hanging after step %d" % (elastic.rank, step), flush=True)
            while True:
                time.sleep(1)


if __name__ == "__main__":
    main()
