# PyTorch worker for the blip e2e test (netns_blip_e2e_test.cpp): env:// init over the agent
# store, then gloo all_reduces in a loop for $LOOP_SECONDS, each checked; a stalled network
# only slows it down.
import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"TORCH LOOP rank={rank} world={world} pid={os.getpid()}", flush=True)
end = time.monotonic() + float(os.environ.get("LOOP_SECONDS", "10"))
steps = 0
while time.monotonic() < end:
    t = torch.ones(1024)
    dist.all_reduce(t)
    assert t[0].item() == world, t[0].item()
    steps += 1
    time.sleep(0.05)
# Both ranks agree on the step count before leaving, so neither exits while the other reduces.
n = torch.tensor([steps])
dist.all_reduce(n, op=dist.ReduceOp.MAX)
for _ in range(int(n.item()) - steps):
    dist.all_reduce(torch.ones(1024))
print(f"TORCH DONE rank={rank} steps={steps}", flush=True)
dist.destroy_process_group()
# PyTorch 2.15 sometimes aborts in the interpreter's teardown after a gloo job ("terminate
# called without an active exception"; tests/launcher/workers/framework_exit.py): the run is
# done and its result printed, so leave without it.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
