# A 2-worker gloo DDP training run, initialised the torchrun way (env://), which under
# ddplaunch reuses the agent's store (TORCHELASTIC_USE_AGENT_STORE=True).
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from framework_exit import exit_without_teardown  # noqa: E402

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
secret = "set" if os.environ.get("DDPLAUNCH_SECRET") else "none"
print(f"rank {rank}/{world} agent_store={os.environ.get('TORCHELASTIC_USE_AGENT_STORE')} "
      f"secret={secret} torch={torch.__version__}", flush=True)

torch.manual_seed(rank)  # different data per rank; DDP keeps the parameters identical
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 20
for _ in range(steps):
    x = torch.randn(16, 8)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

flat = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(flat) for _ in range(world)]
dist.all_gather(gathered, flat)
assert all(torch.allclose(gathered[0], g) for g in gathered), "parameters diverged"
if rank == 0:
    print(f"params in sync after {steps} steps", flush=True)
dist.barrier()
exit_without_teardown()  # framework_exit.py: PyTorch 2.15 may abort in its teardown
