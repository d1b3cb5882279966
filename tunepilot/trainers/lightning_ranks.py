"""A Lightning fit's epochs reported to the search, from one process or from several ranks.

`ReportEpochs` (the callback) reads each validation loss on rank 0 and asks `Epochs` (the
search's side: divergence check, report to the pruner) whether to go on.

One trial over several devices (DDP, FSDP, ...) runs each rank in a process started here.

Lightning would start the ranks itself, in ways a search cannot use: `strategy="ddp"` runs the
script again for each rank (a second `tune run`, a second search), `ddp_spawn` pickles the whole
trainer, tunepilot's callback and its study included. Here each rank is a fresh process (spawn:
safe with CUDA) that Lightning sees as launched outside it, as under torchrun, and builds its own
Trainer from the user's settings. Only rank 0 talks to the search: after each validation it
sends the epoch's loss here, where it is reported to the study (pruner, divergence check) once,
and the answer (go on or stop) goes back; rank 0 broadcasts it so every rank stops at the same
epoch. An exception on any rank fails the trial with its kind (an out-of-memory stays `oom`);
the other ranks are stopped, not left waiting in a collective.

What a rank receives is pickled: the module, the data (or data module) and the callbacks must be
instances of classes defined in an importable module, not in a notebook cell or a function.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import pickle
import queue
import re
import socket
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch

from tunepilot.errors import ChildError, ConfigError, Diverged, TrialCrashed, describe
from tunepilot.trainers.base import PeakMemory, Report
from tunepilot.trainers.ctr_config import EXPLODED

ValLoss = Callable[[pl.Trainer, pl.LightningModule], float]

_SPAWNING = re.compile(r"^ddp_(spawn|fork|notebook)")
_POLL_S = 0.2
_GRACE_S = 30.0  # for the ranks to exit once rank 0 said it is done


class Epochs:
    """The search's side of a fit: each epoch's validation loss goes to `report` (the pruner)
    after the divergence check; `go_on` answers whether the fit should continue, and `stopped`
    keeps why not (TrialPruned, Diverged) to raise once Lightning has wound down."""

    def __init__(self, report: Report, explode_at: float = math.inf):
        self.report = report
        self.explode_at = explode_at
        self.curve: list[float] = []
        self.stopped: Exception | None = None

    def go_on(self, loss: float) -> bool:
        self.curve.append(loss)
        epoch = len(self.curve)
        try:
            if loss > self.explode_at:
                raise Diverged(epoch, loss, f", over {self.explode_at:.3g} ({EXPLODED} x the "
                               "base rate's): the training blew up")
            self.report(epoch, loss)
        except Exception as e:
            self.stopped = e
            return False
        return True


class ReportEpochs(pl.Callback):
    """Reads each epoch's validation loss on rank 0 and asks `decide` whether to go on; with
    several ranks, rank 0 broadcasts the answer so every rank stops at the same epoch (`decide`
    is None on the others). Counts the time spent in training steps."""

    def __init__(self, val_loss: ValLoss, decide: Callable[[float], bool] | None):
        self.val_loss = val_loss
        self.decide = decide
        self.error: Exception | None = None  # reading the loss failed (nothing logged)
        self.train_time = 0.0
        self._t0 = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_validation_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        # Lightning validates inside the training epoch; count training steps only.
        if not trainer.sanity_checking:
            self.train_time += time.perf_counter() - self._t0

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        # on_validation_end, not ..._epoch_end: only now are logged epoch metrics aggregated.
        if trainer.sanity_checking:
            return
        go = True
        if self.decide is not None:
            try:
                loss = float(self.val_loss(trainer, module))
            except Exception as e:
                self.error, go = e, False
            else:
                go = self.decide(loss)
        if trainer.world_size > 1:
            go = trainer.strategy.broadcast(go, src=0)
        if not go:  # pruned, diverged: let Lightning wind down first
            trainer.should_stop = True


def quiet_lightning() -> None:
    """Silences Lightning's per-fit banners and hints; a search runs hundreds of fits."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"lightning(\.|$)")
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")


@dataclass
class _Job:
    """What every rank needs to run the fit."""

    module: pl.LightningModule
    settings: dict[str, Any]  # the Trainer's, without callbacks
    callbacks: list[pl.Callback]  # the user's
    val_loss: ValLoss
    fit_args: dict[str, Any]


def fit_ranks(world_size: int, module: pl.LightningModule, settings: Mapping[str, Any],
              callbacks: Sequence[pl.Callback], val_loss: ValLoss, epochs: Epochs,
              fit_args: Mapping[str, Any]) -> tuple[float, str, float]:
    """Runs the fit on `world_size` ranks; `epochs` hears each epoch's loss from rank 0.
    Returns rank 0's training time, its device (with the number of ranks) and the peak memory
    of rank 0's process (MB)."""
    settings = dict(settings)
    if isinstance(settings.get("strategy"), str):
        # Lightning's spawn/fork flavours of DDP would start ranks again inside each rank.
        settings["strategy"] = _SPAWNING.sub("ddp", settings["strategy"])
    job = _Job(module, settings, list(callbacks), val_loss, dict(fit_args))
    _check_picklable(job, world_size)
    context = multiprocessing.get_context("spawn")
    losses, answers = context.Queue(), context.Queue()
    port = _free_port()
    ranks = [context.Process(target=_rank, name=f"tunepilot-rank-{rank}",
                             args=(rank, world_size, port, job, losses,
                                   answers if rank == 0 else None))  # rank 0 alone asks
             for rank in range(world_size)]
    try:
        for process in ranks:
            process.start()
        while True:
            try:
                kind, *payload = losses.get(timeout=_POLL_S)
            except queue.Empty:
                dead = next((p for p in ranks if p.exitcode not in (None, 0)), None)
                if dead is not None:
                    raise TrialCrashed.of_exit(dead.exitcode, f"rank {ranks.index(dead)} of the "
                                               "trial") from None
                if all(p.exitcode == 0 for p in ranks):
                    raise TrialCrashed("the trial's ranks exited without a result") from None
                continue
            if kind == "epoch":
                answers.put(epochs.go_on(payload[0]))
            elif kind == "done":
                train_time, device, peak_mb = payload
                _wait(ranks)
                return train_time, f"{device} ({world_size} ranks)", peak_mb
            else:  # "error": the first rank to fail says why
                rank, what = payload
                if what["kind"] == "config":  # the person's to fix: stops the search
                    raise ConfigError(what["message"])
                raise ChildError(what["kind"], f"rank {rank}: {what['message']}"
                                 + (f" (at {what['where']})" if what["where"] else ""))
    finally:
        for process in ranks:
            if process.is_alive():
                process.kill()
            process.join(5)
        losses.close()
        answers.close()


def _rank(rank: int, world_size: int, port: int, job: _Job, losses: Any, answers: Any) -> None:
    """One rank's process: Lightning sees a rank launched outside it (torchrun's variables)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the search's process decides what Ctrl-C does
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NODE_RANK="0",
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    if "OMP_NUM_THREADS" not in os.environ:  # the ranks share this machine's cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    quiet_lightning()
    peak = PeakMemory()

    def ask(loss: float) -> bool:
        losses.put(("epoch", loss))
        return bool(answers.get())

    callback = ReportEpochs(job.val_loss, ask if answers is not None else None)
    try:
        trainer = pl.Trainer(**job.settings, callbacks=[*job.callbacks, callback])
        if getattr(trainer.strategy, "_start_method", "popen") != "popen":
            raise ConfigError(
                "A trial over several devices starts its ranks itself; give the strategy as "
                "strategy='ddp' (or DDPStrategy() with its default start_method), not a "
                "spawning one.")
        trainer.fit(job.module, **job.fit_args)
        if callback.error is not None:
            raise callback.error
        if rank == 0:
            losses.put(("done", callback.train_time, f"torch:{trainer.strategy.root_device}",
                        peak.mb()))
    except Exception as e:
        losses.put(("error", rank, describe(e)))
    finally:
        losses.close()
        losses.join_thread()  # what was put is sent before the process ends


def _wait(ranks: list[Any]) -> None:
    deadline = time.monotonic() + _GRACE_S
    for process in ranks:
        process.join(max(0.0, deadline - time.monotonic()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check_picklable(job: _Job, world_size: int) -> None:
    try:
        pickle.dumps(job)
    except Exception as e:
        raise ConfigError(
            f"A trial over {world_size} devices runs each rank in a process of its own, so the "
            f"module, its data and the callbacks must pickle, and they do not ({e}). Define "
            "their classes in a module (a .py file) rather than in a notebook cell or inside a "
            "function; or run the trial on one device (devices=1)."
        ) from None
