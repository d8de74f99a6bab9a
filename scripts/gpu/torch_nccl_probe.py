"""The PyTorch worker the GPU run launches under ddplaunch and under torchrun (docs/gpu.md).

Records, per rank and attempt, into --out_dir:
  env-<tag>-r<RANK>-a<attempt>.json   the environment the launcher gave it
  times-<tag>.jsonl                   {"rank", "attempt", "start", "init", "allreduce", "exit"}:
                                      wall-clock seconds (time.time(), comparable across
                                      processes) when the interpreter started this file, when
                                      init_process_group returned, when the first all_reduce
                                      finished, and just before it exits
Then init_process_group("env://") on nccl when a GPU is visible (gloo otherwise, or --backend),
one all_reduce of RANK + 1 checked against the expected sum, and a barrier.
--fail_once: attempt 0 exits with status 1 after its all_reduce (restart timing).
--same_device: every rank uses cuda:0 (several ranks on one GPU: NCCL refuses it since 2.5).
"""
import time

START = time.time()

import argparse  # noqa: E402  (the start time is taken before anything is imported)
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out_dir", required=True)
    p.add_argument("--tag", required=True, help="names this launcher in the file names")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    p.add_argument("--fail_once", action="store_true")
    p.add_argument("--same_device", action="store_true")
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, f"env-{args.tag}-r{rank}-a{attempt}.json"), "w") as f:
        json.dump(dict(sorted(os.environ.items())), f, indent=1)
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        device = torch.device("cuda", 0 if args.same_device else local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    init = time.time()
    x = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    reduced = time.time()
    expect = world * (world + 1) / 2
    if float(x[0]) != expect:
        raise SystemExit(f"rank {rank}: all_reduce gave {float(x[0])}, expected {expect}")
    dist.barrier()
    fail = args.fail_once and attempt == 0
    record = {"rank": rank, "attempt": attempt, "world": world, "backend": backend,
              "torch": torch.__version__, "start": START, "init": init, "allreduce": reduced,
              "failing": fail, "exit": time.time()}
    with open(os.path.join(args.out_dir, f"times-{args.tag}.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"probe: rank {rank}/{world} attempt {attempt} backend {backend} on {device}: "
          f"init {init - START:.3f} s, all_reduce ok", flush=True)
    if fail:
        sys.stdout.flush()
        os._exit(1)  # no teardown: the launcher sees a plain failure at once
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
