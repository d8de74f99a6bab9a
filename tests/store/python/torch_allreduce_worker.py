"""One rank of a 2-process gloo job that rendezvouses through our store as the agent's store.

Env: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, TORCHELASTIC_USE_AGENT_STORE=True,
TORCHELASTIC_RESTART_COUNT=0 (what ddplaunch hands a PyTorch worker).
Prints "RESULT <sum>" after an all_reduce of (rank + 1).
"""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print(f"RESULT {int(t.item())}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
