"""The built-in CTR task on PyTorch Lightning: embeddings + MLP + dropout -> one logit.

Lightning stays inside this file. Importing it costs seconds (torch, lightning), so the rest of
tunepilot imports this module only when a Lightning trial is about to run.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import lightning.pytorch as pl
import torch
from torch import nn

from tunepilot.errors import ConfigError, Diverged
from tunepilot.trainers.base import PeakMemory, Report, TrainResult
from tunepilot.trainers.ctr_config import EXPLODED, CTRConfig, parse_config
from tunepilot.trainers.data.ctr import CTRData, Split
from tunepilot.trainers.lightning_ranks import (
    Epochs,
    ReportEpochs,
    ValLoss,
    fit_ranks,
    quiet_lightning,
)


class CTRNet(nn.Module):
    """One embedding table per field (stored as one tensor), concatenated with dense features."""

    def __init__(self, n_fields: int, buckets: int, n_dense: int, emb_dim: int,
                 hidden: tuple[int, ...], dropout: float, sparse: bool = False):
        super().__init__()
        # sparse=True: the gradient holds only the rows of the batch, not a dense 27M-entry copy.
        self.embedding = nn.Embedding(n_fields * buckets, emb_dim, sparse=sparse)
        nn.init.normal_(self.embedding.weight, std=0.01)
        self.register_buffer("offsets", torch.arange(n_fields) * buckets, persistent=False)
        layers: list[nn.Module] = []
        width = n_fields * emb_dim + n_dense
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, dense: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        emb = self.embedding(cat + self.offsets).flatten(1)
        return self.mlp(torch.cat([emb, dense], dim=1)).squeeze(-1)


class CTRModule(pl.LightningModule):
    def __init__(self, data: CTRData, cfg: CTRConfig):
        super().__init__()
        self.cfg = cfg
        self.net = CTRNet(data.n_fields, data.buckets, data.n_dense, cfg.emb_dim, cfg.hidden,
                          cfg.dropout, sparse=cfg.sparse_embeddings)
        # Two optimizers (lazy Adam for the table, fused Adam for the MLP) need manual steps.
        self.automatic_optimization = not cfg.sparse_embeddings
        self._val_sum = torch.zeros(())
        self._val_n = 0

    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        dense, cat, y = batch
        logits = self.net(dense, cat).float()
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y)
        if not self.automatic_optimization:
            optimizers = self.optimizers()
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            self.manual_backward(loss)
            for opt in optimizers:
                opt.step()
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        self._val_n = 0

    def validation_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> None:
        dense, cat, y = batch
        logits = self.net(dense, cat).float()
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="sum")
        self._val_sum += loss.double()  # stays on the device: one host sync per epoch
        self._val_n += len(y)

    def epoch_val_loss(self) -> float:
        return float(self._val_sum) / max(self._val_n, 1)

    def configure_optimizers(self) -> Any:
        # fused=True: one kernel over all parameters (bench/README.md#trainers)
        # (bench/trainers.py), most of all on the big embedding table.
        cfg = self.cfg
        if not cfg.sparse_embeddings:
            return torch.optim.Adam(self.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                    fused=True)
        return [torch.optim.SparseAdam([self.net.embedding.weight], lr=cfg.lr),
                torch.optim.Adam(self.net.mlp.parameters(), lr=cfg.lr,
                                 weight_decay=cfg.weight_decay, fused=True)]


class Batches:
    """Batches sliced from tensors; reshuffled each epoch when `seed` is given.

    A plain iterable with `__len__` is all Lightning needs, and slicing a permutation is far
    cheaper than a DataLoader over a TensorDataset for data that fits in memory
    (bench/README.md#trainers).
    """

    def __init__(self, split: Split, batch_size: int, seed: int | None = None):
        self.tensors = (torch.from_numpy(split.dense), torch.from_numpy(split.cat).long(),
                        torch.from_numpy(split.y))
        self.batch_size = batch_size
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return math.ceil(len(self.tensors[0]) / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        n = len(self.tensors[0])
        if self.generator is None:
            for start in range(0, n, self.batch_size):
                yield tuple(t[start:start + self.batch_size] for t in self.tensors)
        else:
            for idx in torch.randperm(n, generator=self.generator).split(self.batch_size):
                yield tuple(t[idx] for t in self.tensors)


class Fit(NamedTuple):
    curve: tuple[float, ...]
    train_time_s: float
    wall_time_s: float
    device: str
    rank0_peak_mb: float | None = None  # a fit over several ranks: rank 0's process's peak


def fit(module: pl.LightningModule, report: Report, *, epochs: int, precision: str,
        val_loss: ValLoss, explode_at: float = math.inf,
        trainer_kwargs: Mapping[str, Any] | None = None,
        callbacks: Sequence[pl.Callback] = (), **fit_args: Any) -> Fit:
    """`Trainer.fit` with no progress bar, logger or checkpoints, reporting every epoch.
    `trainer_kwargs` (the user's: devices, strategy, accumulate_grad_batches, a logger...)
    override those defaults; `callbacks` run beside tunepilot's own.

    Raises what `report` raised (pruning), `Diverged`, or KeyboardInterrupt on Ctrl-C.
    """
    if precision == "16-mixed" and not torch.cuda.is_available():
        raise ConfigError(
            "precision '16-mixed' needs a CUDA GPU and none is available; use 'bf16-mixed' or "
            "'32-true' on the CPU (remove '16-mixed' from the precision choices)."
        )
    quiet_lightning()
    settings: dict[str, Any] = {
        "max_epochs": epochs,
        "accelerator": "auto",  # the GPU when there is one
        "devices": 1,
        "precision": precision,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        **(trainer_kwargs or {}),
    }
    own = list(settings.pop("callbacks", None) or [])
    epochs_seen = Epochs(report, explode_at)
    callback = ReportEpochs(val_loss, epochs_seen.go_on)
    trainer = pl.Trainer(**settings, callbacks=[*own, *callbacks, callback])  # ours beside theirs
    start = time.perf_counter()
    if launches_ranks(trainer):
        train_time, device, peak_mb = fit_ranks(
            trainer.world_size, module, settings, [*own, *callbacks], val_loss, epochs_seen,
            fit_args)
    else:
        with _ctrl_c_raises(trainer):
            trainer.fit(module, **fit_args)
        if callback.error is not None:
            raise callback.error
        train_time, device = callback.train_time, f"torch:{trainer.strategy.root_device}"
        peak_mb = None
    wall = time.perf_counter() - start
    if epochs_seen.stopped is not None:
        raise epochs_seen.stopped
    if not epochs_seen.curve:
        raise ConfigError("Lightning finished without a validation epoch; give the module (or "
                          "data module) a val_dataloader.")
    curve = tuple(epochs_seen.curve)
    if not all(math.isfinite(v) for v in curve):
        raise Diverged(len(curve), curve[-1])
    return Fit(curve, train_time, wall, device, peak_mb)


def launches_ranks(trainer: pl.Trainer) -> bool:
    """Whether `fit` would start processes for several ranks (DDP, FSDP... over 2+ devices on
    this machine). Lightning would start them by running the script again (`ddp`: a second
    search) or by pickling the trainer (`ddp_spawn`: tunepilot's callback and its study with
    it); `lightning_ranks` starts them instead. Under torchrun or SLURM the ranks already exist
    and Lightning's own path runs."""
    strategy = trainer.strategy
    return (trainer.world_size > 1 and getattr(strategy, "launcher", None) is not None
            and not strategy.cluster_environment.creates_processes_externally)


def train_ctr(config: Mapping[str, Any], report: Report, *, data: CTRData) -> TrainResult:
    """Trains the CTR model on `data` with `config`; returns the best validation log-loss."""
    cfg = parse_config(config)
    peak = PeakMemory()
    torch.manual_seed(cfg.seed)
    module = CTRModule(data, cfg)
    result = fit(module, report, epochs=cfg.epochs, precision=cfg.precision,
                 val_loss=lambda trainer, m: m.epoch_val_loss(),
                 explode_at=EXPLODED * data.base_logloss,
                 train_dataloaders=Batches(data.train, cfg.batch_size, seed=cfg.seed),
                 val_dataloaders=Batches(data.val, 8192))
    return TrainResult(
        best_val_loss=min(result.curve),
        curve=result.curve,
        wall_time_s=result.wall_time_s,
        samples_per_s=len(data.train) * len(result.curve) / max(result.train_time_s, 1e-9),
        peak_memory_mb=peak.mb(),
        extra={"device": result.device},
    )


PerTrial = Callable[[Mapping[str, Any]], Any]


def user_module(module_factory: Callable[[Mapping[str, Any]], pl.LightningModule],
                datamodule_factory: Callable[[Mapping[str, Any]], Any] | None = None, *,
                monitor: str = "val_loss",
                trainer_kwargs: Mapping[str, Any] | PerTrial | None = None,
                callbacks: Sequence[pl.Callback] | PerTrial | None = None,
                ) -> Callable[[Mapping[str, Any], Report], TrainResult]:
    """A trainer for your own LightningModule; see `tunepilot.trainers.lightning`."""

    def train(config: Mapping[str, Any], report: Report) -> TrainResult:
        peak = PeakMemory()
        torch.manual_seed(int(config.get("seed", 0)))
        module = module_factory(config)
        fit_args: dict[str, Any] = {}
        if datamodule_factory is not None:
            fit_args["datamodule"] = datamodule_factory(config)
        kwargs = trainer_kwargs(config) if callable(trainer_kwargs) else trainer_kwargs
        extra = callbacks(config) if callable(callbacks) else callbacks
        result = fit(module, report, epochs=int(config.get("epochs", 1)),
                     precision=str(config.get("precision", "32-true")),
                     val_loss=_Logged(monitor), trainer_kwargs=kwargs,
                     callbacks=list(extra or ()), **fit_args)
        return TrainResult(min(result.curve), result.curve, result.wall_time_s,
                           peak_memory_mb=result.rank0_peak_mb or peak.mb(),
                           extra={"device": result.device})

    train.__name__ = getattr(module_factory, "__name__", "lightning")
    return train


class _Logged:
    """Reads the metric the module logged (a class, not a closure: ranks in other processes
    receive it pickled)."""

    def __init__(self, monitor: str):
        self.monitor = monitor

    def __call__(self, trainer: pl.Trainer, module: pl.LightningModule) -> float:
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            logged = sorted(trainer.callback_metrics) or ["nothing"]
            raise ConfigError(
                f"The LightningModule logged no {self.monitor!r} after validation (it logged "
                f"{', '.join(logged)}). Call self.log({self.monitor!r}, loss) in "
                "validation_step, or pass monitor= with the name you log."
            )
        return float(value)


@contextlib.contextmanager
def _ctrl_c_raises(trainer: pl.Trainer) -> Iterator[None]:
    """Ctrl-C inside `fit` raises KeyboardInterrupt, as everywhere else.

    Lightning turns it into `sys.exit(1)` (and ignores SIGINT while it tears down), which would
    leave the trial RUNNING and end the search with the wrong exit code.
    """
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if in_main else None
    try:
        yield
    except SystemExit as e:
        if not trainer.interrupted:
            raise
        if in_main and previous is not None:
            signal.signal(signal.SIGINT, previous)
        original = e.__context__  # what Lightning caught: KeyboardInterrupt, or our Terminated
        raise (original if isinstance(original, KeyboardInterrupt)
               else KeyboardInterrupt()) from None

