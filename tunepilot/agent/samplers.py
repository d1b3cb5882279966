"""Optuna's samplers and pruners by the names the config and the CLI use (`tunepilot.config`
holds the lists)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import optuna
from optuna.samplers import BaseSampler

from tunepilot.config import PRUNERS, SAMPLERS
from tunepilot.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from tunepilot.space import SearchSpace


def study_seed(study: str, seed: int) -> int:
    """The base seed of a study's samplers: its name and the run's seed. Trial N draws with
    base + N, so two studies with the same `--seed` never replay each other's draws, and seed 1
    is not seed 0 shifted by one trial."""
    return (zlib.crc32(study.encode()) * 65_537 + seed * 1_000_003) % 2**32


def per_trial_sampler(name: str, study: str, seed: int | None,
                      space: SearchSpace) -> Callable[[int], BaseSampler]:
    """Trial number -> the sampler that draws it, seeded by the trial's number (a resumed
    search does not replay its proposals, nor parallel workers with one seed each other's) and
    by the study's name (a new study does not replay an old one's)."""
    base = None if seed is None else study_seed(study, seed)

    def per_trial(number: int) -> BaseSampler:
        return optuna_sampler(name, None if base is None else (base + number) % 2**32,
                              space=space, number=number)

    return per_trial


def optuna_sampler(name: str, seed: int | None = None, *, space: SearchSpace | None = None,
                   number: int = 0) -> BaseSampler:
    """An Optuna sampler by name: auto, tpe, random, cmaes, gp. `auto` picks by the space and
    the trial's `number` (see `auto_kind`)."""
    name = name.lower()
    if name == "auto":
        name = auto_kind(space, number)
        if name == "cmaes":
            # Choices are drawn by TPE's model of them (CMA-ES models numbers only), modelled
            # from the first finished trial (TPE's own 10 random start-up draws would leave
            # them to chance for the whole CMA-ES phase).
            return optuna.samplers.CmaEsSampler(
                seed=seed, warn_independent_sampling=False,
                independent_sampler=optuna.samplers.TPESampler(
                    seed=seed, n_startup_trials=CHOICES_STARTUP))
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


# `auto` (bench/README.md, "Samplers"): on HPOBench's MLP tables (20 seeds) CMA-ES, from the
# first trial, led Optuna's default TPE (10 random start-up trials) at 5 and 10 trials, while
# GP after 4 Sobol points and TPE after the same did not; alone it fell behind TPE by 50
# trials, and handing over to TPE at trial 10 kept its lead and did better at 20 and 50 than
# CMA-ES throughout. So: CMA-ES on a mostly numeric space before trial CMAES_UNTIL, then TPE,
# which models the CMA-ES trials; TPE alone on spaces of choices (CMA-ES models no choices).
CMAES_UNTIL = 10
# Under `auto`'s CMA-ES, the trials after which TPE models the choices (bench/README.md, "Time
# to a target").
CHOICES_STARTUP = 1


def auto_kind(space: SearchSpace | None, number: int) -> str:
    """"cmaes" or "tpe": what `auto` draws trial `number` of a study over `space` with."""
    if number < CMAES_UNTIL and space is not None and mostly_numeric(space):
        return "cmaes"
    return "tpe"


def mostly_numeric(space: SearchSpace) -> bool:
    """At least half the tuned parameters are floats or ints (CMA-ES's ground; choices are
    TPE's)."""
    from tunepilot.space import Categorical

    numeric = sum(not isinstance(p, Categorical) for p in space.params.values())
    return numeric * 2 >= len(space.params)


def sampler_line(name: str, space: SearchSpace) -> str:
    """The first lines' word on the sampler: which, and why."""
    if name != "auto":
        return f"sampler: {name} (--sampler {name})"
    if not mostly_numeric(space):
        return ("sampler: auto: TPE, as most parameters are choices (CMA-ES models numbers "
                "only)")
    return (f"sampler: auto: CMA-ES from the first trial (choices by TPE) to trial "
            f"{CMAES_UNTIL - 1}, then TPE: ahead of Optuna's default TPE at 5-20 trials on "
            "HPOBench (bench/README.md, Samplers)")


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
