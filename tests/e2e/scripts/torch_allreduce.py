# PyTorch worker for the multi-node e2e test: env:// init over the agent store, one
# all-reduce, prints the result.
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank())])
dist.all_reduce(t)
print(f"TORCH rank={dist.get_rank()} world={dist.get_world_size()} sum={t.item():.0f}", flush=True)
dist.destroy_process_group()
# PyTorch 2.15 sometimes aborts in the interpreter's teardown after a gloo job ("terminate
# called without an active exception"; tests/launcher/workers/framework_exit.py): the run is
# done and its result printed, so leave without it.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
