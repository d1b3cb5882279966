"""Optuna's pruners by name (the config's `pruner`, `--pruner`): one registry.

A pruner is one entry: its name, how it is built from the trials' epoch budget, and a few words
for `--help`. Optuna is imported when one is built.

`auto`, the default, is the median pruner where the goal is a trial budget, and successive
halving where it is the clock (a `--target` or a `--timeout`, as for `cost.rule_for`): on the
built-in task's time to a target, successive halving reached it sooner than the median pruner
on more seeds (bench/README.md#pruners). `Tuner.run` tells it the goal (`for_goal`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunepilot.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class PrunerKind:
    name: str
    build: Callable[[int | None], optuna.pruners.BasePruner]  # the trials' epochs -> pruner
    help: str


REGISTRY: dict[str, PrunerKind] = {}


def register(kind: PrunerKind) -> PrunerKind:
    REGISTRY[kind.name] = kind
    return kind


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def make_pruner(pruner: str | optuna.pruners.BasePruner,
                epochs: int | None = None) -> optuna.pruners.BasePruner:
    """An Optuna pruner by name, or the pruner given. `epochs`, the trials' epoch budget, is
    Hyperband's largest resource."""
    if not isinstance(pruner, str):
        return pruner
    kind = REGISTRY.get(pruner)
    if kind is None:
        raise ConfigError(f"Unknown pruner {pruner!r}; expected one of {', '.join(REGISTRY)}."
                          f"{did_you_mean(pruner, list(REGISTRY))}")
    return kind.build(epochs)


def for_goal(pruner: Any, target: float | None, timeout: float | None) -> str | None:
    """Tells an `auto` pruner the run's goal; the first lines' word on it (None: not `auto`)."""
    if not isinstance(pruner, _auto_class()):
        return None
    pruner.clock = target is not None or bool(timeout)
    if not pruner.clock:
        return None
    return ("pruner: the goal is the clock, so trials are pruned by successive halving (a "
            "third go on at epochs 1, 3, 9...; the median pruner with a trial budget alone): "
            "bench/README.md#pruners")


@functools.cache
def _auto_class() -> Any:
    """`AutoPruner`, made on first use (Optuna is imported when a pruner is built)."""
    import optuna

    class AutoPruner(optuna.pruners.BasePruner):
        """The median pruner, or successive halving where `clock` (set by `for_goal`)."""

        def __init__(self, epochs: int | None):
            self.median, self.halving = _median(epochs), _successive_halving(epochs)
            self.clock = False

        def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
            return (self.halving if self.clock else self.median).prune(study, trial)

    return AutoPruner


def _auto(epochs: int | None) -> optuna.pruners.BasePruner:
    return _auto_class()(epochs)


def _median(epochs: int | None) -> optuna.pruners.BasePruner:
    import optuna

    # Judge a trial only after 5 complete trials and from its 2nd epoch: the first epoch of a
    # CTR model says little about where it ends.
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2)


def _none(epochs: int | None) -> optuna.pruners.BasePruner:
    import optuna

    return optuna.pruners.NopPruner()


def _successive_halving(epochs: int | None) -> optuna.pruners.BasePruner:
    import optuna

    # Rungs at epochs 1, 3, 9...: a third of the trials go on at each.
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)


def _hyperband(epochs: int | None) -> optuna.pruners.BasePruner:
    import optuna

    # Brackets of successive halving from 1 epoch to the whole budget (the trials' epochs).
    return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs or "auto",
                                          reduction_factor=3)


register(PrunerKind("auto", _auto, "median; successive halving where the goal is the clock "
                    "(a target or a timeout)"))
register(PrunerKind("median", _median, "stop a trial below the median of others at its epoch"))
register(PrunerKind("none", _none, "train every trial to its end"))
register(PrunerKind("successive-halving", _successive_halving,
                    "a third of the trials go on at epochs 1, 3, 9..."))
register(PrunerKind("hyperband", _hyperband, "brackets of successive halving"))
