"""PyTorch Lightning under a launcher: Trainer(strategy="ddp", accelerator="cpu", devices=2,
max_epochs=1) on a tiny model and synthetic data. Each rank writes what it saw (rank, world
size, the trainer's final loss and a checksum of the weights) to $OUT_DIR/lightning_<RANK>.json,
so torchrun2_frameworks_test can compare the runs of two launchers.
"""
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from framework_exit import exit_without_teardown  # noqa: E402


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    L.seed_everything(7, verbose=False)
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True)
    model = Tiny()
    trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_epochs=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=8))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    result = {
        "env_rank": int(os.environ["RANK"]),
        "global_rank": trainer.global_rank,
        "local_rank": trainer.local_rank,
        "world_size": trainer.world_size,
        "num_nodes": trainer.num_nodes,
        "cluster_environment": type(trainer.strategy.cluster_environment).__name__,
        "train_loss": round(float(trainer.callback_metrics["train_loss"]), 6),
        "weights_sum": round(float(weights.sum()), 6),
        "steps": trainer.global_step,
    }
    path = os.path.join(os.environ["OUT_DIR"], "lightning_%d.json" % trainer.global_rank)
    with open(path, "w") as f:
        json.dump(result, f, sort_keys=True)
    # Lightning leaves the gloo group to the interpreter's exit, where PyTorch 2.15 sometimes
    # aborts ("terminate called without an active exception", SIGABRT) under torchrun and
    # ddplaunch alike; ending it here, as a script should, exits 0.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()



if __name__ == "__main__":
    main()
    exit_without_teardown()
