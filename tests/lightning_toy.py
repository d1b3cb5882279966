"""A user's small LightningModule for the tests: linear regression on 256 fixed rows (200 to
train in 4 batches of 50, 56 to validate). Imported inside tests: Lightning takes seconds."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

_rng = np.random.default_rng(0)
X = torch.from_numpy(_rng.normal(size=(256, 4)).astype(np.float32))
Y = X.sum(1)


class Regression(pl.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.lr, self.net = lr, torch.nn.Linear(4, 1)

    def step(self, batch):
        return torch.nn.functional.mse_loss(self.net(batch[0])[:, 0], batch[1])

    def training_step(self, batch, i):
        return self.step(batch)

    def validation_step(self, batch, i):
        self.log("val_loss", self.step(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        return DataLoader(TensorDataset(X[:200], Y[:200]), batch_size=50)

    def val_dataloader(self):
        return DataLoader(TensorDataset(X[200:], Y[200:]), batch_size=56)


class MarkRanks(pl.Callback):
    """A user's callback for a trial over several processes: each rank leaves a file saying who
    it was and how many optimizer steps it took (the parent cannot see the ranks' objects)."""

    def __init__(self, folder):
        self.folder = folder

    def on_train_end(self, trainer, module):
        name = f"rank{trainer.global_rank}-of-{trainer.world_size}"
        (self.folder / name).write_text(str(trainer.global_step))


class OutOfMemoryOnRank1(Regression):
    """Runs out of device memory on rank 1 only, as a CUDA card would (torch's own class)."""

    def training_step(self, batch, i):
        if self.global_rank == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return self.step(batch)
