# A torch.distributed.launch-era script: it takes --local_rank on its command line.
import argparse
import os

import torch.distributed as dist
from framework_exit import exit_without_teardown  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, required=True)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
assert args.local_rank == int(os.environ["LOCAL_RANK"]), "--local_rank disagrees with LOCAL_RANK"
dist.init_process_group("gloo", init_method="env://")
print(f"local_rank={args.local_rank} lr={args.lr} world={dist.get_world_size()}")
dist.barrier()
exit_without_teardown()  # framework_exit.py: PyTorch 2.15 may abort in its teardown
