# A restarted group must not read the keys of the attempt before it (PyTorch issue 135712: a
# stale /default_pg/0 would hand NCCL an old unique id). Run with --max_restarts 1.
# Attempt 0: every rank sets a key on the store its process group uses, waits until all are
# there, and rank 1 exits 1 (the others wait to be stopped). Attempt 1: every rank checks that
# none of attempt 0's keys is visible, that its own new key is (so the check can see keys),
# then trains a few DDP steps and exits 0.
# The store is dist.distributed_c10d._get_default_store(): from torch 2.6 a bare TCPStore on
# the agent's store (keys like /default_pg/0), before that the /worker/attempt_<n> PrefixStore.
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from framework_exit import exit_without_teardown  # noqa: E402

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = dist.distributed_c10d._get_default_store()


def key(attempt, rank):
    return f"restart_probe/attempt_{attempt}/rank_{rank}"


def visible(k):
    """Whether k is in the store, by every means this version's client has."""
    if hasattr(store, "check"):  # 2.x
        found = store.check([k])
    else:
        try:
            store.wait([k], timedelta(milliseconds=200))
            found = True
        except RuntimeError:
            found = False
    if found:
        return True
    try:  # a short wait must time out too
        store.wait([k], timedelta(milliseconds=200))
        return True
    except RuntimeError:
        return False


if attempt == 0:
    store.set(key(0, rank), f"rank {rank} of attempt 0")
    store.wait([key(0, r) for r in range(world)], timedelta(seconds=60))
    print(f"ATTEMPT 0 rank {rank}: wrote {key(0, rank)}, saw all {world}", flush=True)
    if rank == 1:
        sys.exit(1)
    time.sleep(120)  # stopped by the agent
    sys.exit(2)

stale = [key(0, r) for r in range(world) if visible(key(0, r))]
assert not stale, f"attempt {attempt} reads keys of attempt 0: {stale}"
store.set(key(attempt, rank), "new")
assert visible(key(attempt, rank)), "the check cannot see a key just set"

torch.manual_seed(rank)
model = DDP(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    x = torch.randn(8, 4)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.barrier()
print(f"ATTEMPT {attempt} rank {rank}: no key of attempt 0 visible; trained 5 DDP steps",
      flush=True)
exit_without_teardown()  # framework_exit.py: PyTorch 2.15 may abort in its teardown
