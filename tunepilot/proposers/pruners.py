"""Optuna's pruners by name (the config's `pruner`, `--pruner`): one registry.

A pruner is one entry: its name, how it is built from the trials' epoch budget, and a few words
for `--help`. Optuna is imported when one is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

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


register(PrunerKind("median", _median, "stop a trial below the median of others at its epoch"))
register(PrunerKind("none", _none, "train every trial to its end"))
register(PrunerKind("successive-halving", _successive_halving,
                    "a third of the trials go on at epochs 1, 3, 9..."))
register(PrunerKind("hyperband", _hyperband, "brackets of successive halving"))
