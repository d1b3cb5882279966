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

    Raises `optuna.TrialPruned` when the pruner stops the trial, and `Diverged` when the loss is
    NaN or infinite. Epochs count from 1.
    """

    def __call__(self, epoch: int, val_loss: float, /) -> None: ...


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
