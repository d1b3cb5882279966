"""Optuna's samplers and pruners by the names the config and the CLI use (`tunepilot.config`
holds the lists)."""

from __future__ import annotations

import optuna

from tunepilot.config import PRUNERS, SAMPLERS
from tunepilot.errors import ConfigError, did_you_mean


def optuna_sampler(name: str, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """An Optuna sampler by name: tpe (default), random, cmaes, gp."""
    name = name.lower()
    if name == "tpe":
        # multivariate: lr and batch size interact; independent TPE misses that. constant_liar:
        # trials running on other workers count as bad, so workers spread out.
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        # Categorical parameters (batch size, precision) fall back to random sampling.
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    raise ConfigError(f"Unknown sampler {name!r}; expected one of {', '.join(SAMPLERS)}."
                      f"{did_you_mean(name, SAMPLERS)}")


def make_pruner(pruner: str | optuna.pruners.BasePruner,
                epochs: int | None = None) -> optuna.pruners.BasePruner:
    """An Optuna pruner by name (median, none, successive-halving, hyperband), or the pruner
    given. `epochs`, the trials' epoch budget, is Hyperband's largest resource."""
    if not isinstance(pruner, str):
        return pruner
    if pruner == "median":
        # Judge a trial only after 5 complete trials and from its 2nd epoch: the first epoch of
        # a CTR model says little about where it ends.
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2)
    if pruner == "none":
        return optuna.pruners.NopPruner()
    if pruner == "successive-halving":
        # Rungs at epochs 1, 3, 9...: a third of the trials go on at each.
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    if pruner == "hyperband":
        # Brackets of successive halving from 1 epoch to the whole budget (the trials' epochs).
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs or "auto",
                                              reduction_factor=3)
    raise ConfigError(f"Unknown pruner {pruner!r}; expected one of {', '.join(PRUNERS)}."
                      f"{did_you_mean(pruner, PRUNERS)}")
