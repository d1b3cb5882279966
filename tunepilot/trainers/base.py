"""The trainer seam: ``train(config, report) -> TrainResult``.

A trainer is any callable with that signature. Model and data are bound beforehand with a
closure or `functools.partial`, so the tuner only ever passes the config of one trial.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tunepilot.errors import Diverged


class Report(Protocol):
    """Called by a trainer after each epoch with that epoch's validation loss.

    Raises `optuna.TrialPruned` when the pruner stops the trial, `StoppedEarly` when the loss
    has not improved for the search's epoch patience or has reached its target (`TargetReached`;
    the trial is kept with its best epoch),
    and `Diverged` when the loss is NaN or infinite. Epochs count from 1. A trainer lets them
    all through: the search reads what it needs from the epochs already reported.
    """

    def __call__(self, epoch: int, val_loss: float, /) -> None: ...


class StoppedEarly(Exception):  # not an error: a trial done sooner
    """Raised by `report`: the validation loss has not improved for `patience` epochs. The
    trial completes with its best epoch's loss (Lightning's EarlyStopping, for every trainer)."""

    def __init__(self, epoch: int, best_epoch: int, patience: int):
        super().__init__(f"stopped after epoch {epoch}: no better validation loss in {patience} "
                         f"epochs since epoch {best_epoch}")
        self.epoch, self.best_epoch = epoch, best_epoch


class TargetReached(StoppedEarly):
    """Raised by `report`: this epoch's validation loss reached the search's target, so the
    trial's value (its best epoch) is already at the target and the search is over: no reason
    to train its remaining epochs (Lightning's `EarlyStopping(stopping_threshold=...)`)."""

    def __init__(self, epoch: int, val_loss: float, target: float):
        Exception.__init__(self, f"stopped after epoch {epoch}: validation loss {val_loss:.4g} "
                           f"reached the target {target:g}")
        self.epoch, self.best_epoch = epoch, epoch


def auto_epoch_patience(epochs: int | None) -> int:
    """The epoch patience when the user sets none: a third of the trial's epochs, at least 1 and
    at most 3 (Lightning's EarlyStopping default); 2 when the trainer's epochs are unknown.
    A short trial that has turned up rarely comes back (bench/README.md#the-epoch-patience)."""
    if epochs is None:
        return 2
    return min(3, max(1, epochs // 3))


@dataclass(frozen=True)
class TrainResult:
    """What a trial produced. `best_val_loss` is the best epoch, not the last one."""

    best_val_loss: float
    curve: tuple[float, ...] = ()  # validation loss after each epoch
    wall_time_s: float = 0.0
    samples_per_s: float | None = None
    peak_memory_mb: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class Trainer(Protocol):
    def __call__(self, config: Mapping[str, Any], report: Report, /) -> TrainResult: ...


class PeakMemory:
    """The peak memory of one trial, from its start (not the process's lifetime peak): the
    CUDA device's when torch uses one, else the process's resident set (Linux resets its peak
    through /proc/self/clear_refs; elsewhere the process's peak, as the OS reports it).

    Example:
        >>> peak = PeakMemory()  # at the trial's start
        >>> _ = bytearray(10 * 2**20)
        >>> peak.mb() >= 10
        True
    """

    def __init__(self) -> None:
        self._cuda = _cuda()
        if self._cuda is not None:
            self._cuda.reset_peak_memory_stats()
            return
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM, the peak resident set, to the current one
        except OSError:
            pass

    def mb(self) -> float:
        if self._cuda is not None:
            return self._cuda.max_memory_allocated() / 2**20
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cuda() -> Any:
    import sys

    if "torch" not in sys.modules:
        return None
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def release_device_memory() -> None:
    """After an out-of-memory trial: give back what the frameworks this process loaded still
    cache, so the next trial starts on a clean device (no new imports)."""
    import gc
    import sys

    gc.collect()
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if "jax" in sys.modules:
        import jax

        jax.clear_caches()  # compiled executables hold device buffers too


def no_report(epoch: int, val_loss: float) -> None:
    """A `Report` for running a trainer outside a study (notebooks, benchmarks)."""
    check_finite(epoch, val_loss)


def check_finite(epoch: int, val_loss: float) -> None:
    if not math.isfinite(val_loss):
        raise Diverged(epoch, val_loss)


def from_callable(fn: Callable[[Mapping[str, Any], Report], float]) -> Trainer:
    """Wraps ``fn(config, report) -> float`` (the validation loss to minimise) as a trainer.

    Example:
        >>> def quadratic(config, report):
        ...     return (config["x"] - 2.0) ** 2
        >>> from_callable(quadratic)({"x": 1.0}, no_report).best_val_loss
        1.0
    """

    def train(config: Mapping[str, Any], report: Report) -> TrainResult:
        curve: list[float] = []

        def recording_report(epoch: int, val_loss: float) -> None:
            curve.append(float(val_loss))
            report(epoch, val_loss)

        start = time.perf_counter()
        value = fn(config, recording_report)
        if isinstance(value, TrainResult):  # a trainer object named on the command line
            return value
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"{getattr(fn, '__name__', fn)!s} returned {value!r}; a trainer function must "
                "return the validation loss as a float"
            ) from None
        check_finite(len(curve), value)
        best = min([value, *curve])
        return TrainResult(best, tuple(curve), time.perf_counter() - start)

    train.__name__ = getattr(fn, "__name__", "callable")
    train.__qualname__ = train.__name__
    return train
