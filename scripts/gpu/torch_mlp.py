"""PyTorch reference for the GPU run (docs/gpu.md): the same MLP, data file, optimizer and LR
schedule as build/train, one process on one device, no DDP (the native side runs alone too).

  python3 scripts/gpu/torch_mlp.py make-data --out /tmp/mlp.npy --rows 140000
  build/train --data /tmp/mlp.npy --hidden 256,256 --batch_size 64 --max_steps 2000
  python3 scripts/gpu/torch_mlp.py train --data /tmp/mlp.npy --hidden 256,256 \
      --batch_size 64 --max_steps 2000 --device cuda

What matches build/train: the .npy file (features, label in the last column); an 80/20 split
shuffled by --seed; features standardized with the training split's mean and standard
deviation; Linear layers with ReLU between, He-uniform weights (bound sqrt(6 / in)) and zero
biases; softmax cross-entropy, mean over the batch; AdamW (0.9, 0.999, 1e-8, weight decay 0)
or SGD with momentum; linear warm-up then cosine decay over epochs x steps per epoch; full
batches of a fresh permutation each epoch. What does not: the random streams (split,
initialisation and shuffling draw from different generators), so the loss curves agree in
shape and level, not value by value.

Prints build/train's progress line every --log_every steps, so one parser reads both:
  [train] epoch E step S loss L acc A lr R samples/s N
and `[val] epoch E accuracy A loss L` after each epoch, and writes the same records as
JSON lines to --metrics. Runs with PyTorch 1.13 (the dry run, on CPU) and 2.x.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch


def make_data(args):
    """Gaussian clusters, one per class, float32; label in the last column."""
    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((args.classes, args.features)) * args.separation / math.sqrt(
        2 * args.features)
    labels = rng.integers(0, args.classes, args.rows)
    x = centres[labels] + rng.standard_normal((args.rows, args.features))
    data = np.concatenate([x, labels[:, None]], axis=1).astype(np.float32)
    np.save(args.out, data)
    print(f"make-data: {args.rows} rows x {args.features} features, {args.classes} classes "
          f"-> {args.out}")


def lr_at(step, args, total_steps):
    """build/train's schedule: linear warm-up, then cosine to lr * min_lr_ratio."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    span = max(1, total_steps - args.warmup_steps)
    progress = min(1.0, (step - args.warmup_steps) / span)
    low = args.lr * args.min_lr_ratio
    return low + (args.lr - low) * (1 + math.cos(math.pi * progress)) / 2


def build_model(sizes, device, seed):
    g = torch.Generator().manual_seed(seed)
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        bound = math.sqrt(6.0 / sizes[i])
        with torch.no_grad():
            lin.weight.copy_(torch.rand(lin.weight.shape, generator=g) * 2 * bound - bound)
            lin.bias.zero_()
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device)


def train(args):
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    data = torch.from_numpy(np.load(args.data))
    x_all, y_all = data[:, :-1].contiguous(), data[:, -1].long()
    rows = x_all.shape[0]
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(args.seed))
    n_val = round(args.val_fraction * rows)
    train_idx, val_idx = order[n_val:], order[:n_val]
    mean = x_all[train_idx].mean(0)
    std = x_all[train_idx].std(0, unbiased=False)
    std = torch.where(std > 1e-6, std, torch.ones_like(std))
    x_all = (x_all - mean) / std
    x_train, y_train = x_all[train_idx].to(device), y_all[train_idx].to(device)
    x_val, y_val = x_all[val_idx].to(device), y_all[val_idx].to(device)
    classes = int(y_all.max()) + 1
    sizes = [x_all.shape[1]] + [int(h) for h in args.hidden.split(",") if h] + [classes]
    model = build_model(sizes, device, args.seed)
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=args.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                              weight_decay=args.weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps_per_epoch = x_train.shape[0] // args.batch_size
    total_steps = args.epochs * steps_per_epoch
    params = sum(p.numel() for p in model.parameters())
    print(f"[train] 1 rank(s), torch {torch.__version__} on {device}, model {params} parameters, "
          f"{x_train.shape[0]} train / {x_val.shape[0]} validation rows, {steps_per_epoch} "
          f"steps/epoch", flush=True)
    metrics = open(args.metrics, "a") if args.metrics else None

    def record(rec):
        if metrics:
            metrics.write(json.dumps(rec) + "\n")

    step = 0
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    count = 0
    last_t, last_step = time.perf_counter(), 0
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    done = False
    for epoch in range(args.epochs):
        perm = torch.randperm(x_train.shape[0], generator=gen).to(device)
        for b in range(steps_per_epoch):
            idx = perm[b * args.batch_size:(b + 1) * args.batch_size]
            xb, yb = x_train[idx], y_train[idx]
            lr = lr_at(step, args, total_steps)
            for group in opt.param_groups:
                group["lr"] = lr
            logits = model(xb)
            loss = loss_fn(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            loss_sum += loss.detach() * yb.shape[0]
            correct += (logits.argmax(1) == yb).sum()
            count += yb.shape[0]
            if step % args.log_every == 0:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                now = time.perf_counter()
                rate = (step - last_step) * args.batch_size / max(1e-9, now - last_t)
                last_t, last_step = now, step
                mean_loss = float(loss_sum) / count
                acc = float(correct) / count
                print(f"[train] epoch {epoch} step {step} loss {mean_loss:.4f} acc {acc:.4f} "
                      f"lr {lr:.3e} samples/s {rate:.0f}", flush=True)
                record({"kind": "train", "epoch": epoch, "step": step, "loss": mean_loss,
                        "accuracy": acc, "lr": lr, "samples_per_s": rate})
                loss_sum.zero_()
                correct.zero_()
                count = 0
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        with torch.no_grad():
            logits = model(x_val)
            val_loss = float(loss_fn(logits, y_val))
            val_acc = float((logits.argmax(1) == y_val).float().mean())
        print(f"[val] epoch {epoch} step {step} accuracy {val_acc:.4f} loss {val_loss:.4f}",
              flush=True)
        record({"kind": "val", "epoch": epoch, "step": step, "loss": val_loss,
                "accuracy": val_acc})
        last_t = time.perf_counter()  # validation time stays out of the next rate
        if done:
            break
    print(f"[train] done: {step} steps, validation accuracy {val_acc:.4f}", flush=True)
    if metrics:
        metrics.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make-data", help="write the synthetic data set both trainers read")
    m.add_argument("--out", required=True)
    m.add_argument("--rows", type=int, default=140000)
    m.add_argument("--features", type=int, default=64)
    m.add_argument("--classes", type=int, default=10)
    m.add_argument("--separation", type=float, default=6.0)
    m.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train", help="train the MLP (flags named as build/train's)")
    t.add_argument("--data", required=True)
    t.add_argument("--hidden", default="256,256")
    t.add_argument("--epochs", type=int, default=10)
    t.add_argument("--batch_size", type=int, default=64)
    t.add_argument("--max_steps", type=int, default=0)
    t.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--warmup_steps", type=int, default=0)
    t.add_argument("--min_lr_ratio", type=float, default=0.0)
    t.add_argument("--momentum", type=float, default=0.9)
    t.add_argument("--weight_decay", type=float, default=0.0)
    t.add_argument("--val_fraction", type=float, default=0.2)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--log_every", type=int, default=50)
    t.add_argument("--metrics", default="")
    t.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    t.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    args = p.parse_args(argv)
    if args.command == "make-data":
        make_data(args)
    else:
        train(args)


if __name__ == "__main__":
    sys.exit(main())
