"""Hugging Face accelerate under a launcher: Accelerator() prepares a model, an optimizer and
a dataloader, runs a few steps, and gathers something rank-dependent. Each rank writes what it
saw to $OUT_DIR/accelerate_<RANK>.json, so torchrun2_frameworks_test can compare the runs of
two launchers.
"""
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.utils import set_seed  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from framework_exit import exit_without_teardown  # noqa: E402


def main():
    # cpu=True: on CPUs, Accelerator() only runs distributed when told so (accelerate launch
    # --cpu sets ACCELERATE_USE_CPU); the test workers share the machine's CPUs, not GPUs.
    accelerator = Accelerator(cpu=True)
    set_seed(11)
    x = torch.randn(32, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    steps = 0
    for batch_x, batch_y in loader:
        loss = torch.nn.functional.mse_loss(model(batch_x), batch_y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
    rank = accelerator.process_index
    gathered = accelerator.gather(torch.tensor([rank * 10.0 + 1.0, float(steps)]))
    weights = torch.cat([p.detach().flatten() for p in accelerator.unwrap_model(model).parameters()])
    result = {
        "env_rank": int(os.environ["RANK"]),
        "process_index": rank,
        "local_process_index": accelerator.local_process_index,
        "num_processes": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "gathered": [round(v, 6) for v in gathered.tolist()],
        "weights_sum": round(float(weights.sum()), 6),
        "steps": steps,
    }
    path = os.path.join(os.environ["OUT_DIR"], "accelerate_%d.json" % rank)
    with open(path, "w") as f:
        json.dump(result, f, sort_keys=True)
    accelerator.end_training()



if __name__ == "__main__":
    main()
    exit_without_teardown()
