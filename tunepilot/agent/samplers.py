"""Optuna's samplers and pruners by the names the config and the CLI use (`tunepilot.config`
holds the lists)."""

from __future__ import annotations

import warnings
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


def per_trial_sampler(name: str, study: str, seed: int | None, space: SearchSpace,
                      trial_s: Callable[[], float | None]) -> Callable[[int], BaseSampler]:
    """Trial number -> the sampler that draws it, seeded by the trial's number (a resumed
    search does not replay its proposals, nor parallel workers with one seed each other's) and
    by the study's name (a new study does not replay an old one's)."""
    base = None if seed is None else study_seed(study, seed)

    def per_trial(number: int) -> BaseSampler:
        return optuna_sampler(name, None if base is None else (base + number) % 2**32,
                              space=space, number=number, sequence_seed=base, trial_s=trial_s)

    return per_trial


def optuna_sampler(name: str, seed: int | None = None, *, space: SearchSpace | None = None,
                   number: int = 0, sequence_seed: int | None = None,
                   trial_s: Callable[[], float | None] = lambda: None,
                   ) -> optuna.samplers.BaseSampler:
    """An Optuna sampler by name: auto, tpe, random, cmaes, gp. `auto` picks per trial from the
    space and the trial's `number` (see `auto_sampler`); `sequence_seed` seeds what must stay one
    sequence over a study (the quasi-random start-up)."""
    name = name.lower()
    if name == "auto":
        return auto_sampler(space, number, seed, sequence_seed, trial_s)
    if name == "tpe":
        return tpe(seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        # Categorical parameters (batch size, precision) fall back to random sampling.
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    raise ConfigError(f"Unknown sampler {name!r}; expected one of {', '.join(SAMPLERS)}."
                      f"{did_you_mean(name, SAMPLERS)}")


def tpe(seed: int | None, startup: int = 10) -> optuna.samplers.BaseSampler:
    # multivariate: lr and batch size interact; independent TPE misses that. constant_liar:
    # trials running on other workers count as bad, so workers spread out.
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                      n_startup_trials=startup)


# `auto` (bench/README.md, "Samplers"): the default config at trial 0, a few quasi-random
# (Sobol) start-up trials, then GP-based Bayesian optimisation where it pays: a mostly numeric
# space, a study of fewer than GP_UNTIL trials (GP's own time grows with them), and trials long
# enough that GP's own time (seconds a trial, measured in bench/samplers.py) stays under a tenth
# of a trial's. Elsewhere TPE, started after the same few trials instead of Optuna's ten.
AUTO_STARTUP = 5  # trials before a model: the default config (trial 0) and 4 Sobol points
GP_UNTIL = 100
GP_MIN_TRIAL_S = 15.0  # median training time a trial under which GP's time is not worth it


def auto_sampler(space: SearchSpace | None, number: int, seed: int | None,
                 sequence_seed: int | None,
                 trial_s: Callable[[], float | None] = lambda: None) -> optuna.samplers.BaseSampler:
    """The sampler `auto` draws trial `number` with (see `auto_kind`)."""
    kind = auto_kind(space, number, trial_s)
    if kind == "sobol":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=sequence_seed,
                                              warn_independent_sampling=False,
                                              warn_asynchronous_seeding=False)
    if kind == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=AUTO_STARTUP,
                                         warn_independent_sampling=False)
    return tpe(seed, AUTO_STARTUP)


def auto_kind(space: SearchSpace | None, number: int,
              trial_s: Callable[[], float | None] = lambda: None) -> str:
    """"sobol", "gp" or "tpe": what `auto` draws trial `number` of a study over `space` with.
    `trial_s()`: the median training time of the study's trials so far (None: none yet)."""
    if number < AUTO_STARTUP:
        return "sobol"
    if number < GP_UNTIL and space is not None and mostly_numeric(space):
        seconds = trial_s()
        if seconds is None or seconds >= GP_MIN_TRIAL_S:
            return "gp"
    return "tpe"


def mostly_numeric(space: SearchSpace) -> bool:
    """At least half the tuned parameters are floats or ints (GP's ground; TPE's is choices)."""
    from tunepilot.space import Categorical

    numeric = sum(not isinstance(p, Categorical) for p in space.params.values())
    return numeric * 2 >= len(space.params)


def sampler_line(name: str, space: SearchSpace) -> str:
    """The first lines' word on the sampler: which, and why."""
    if name != "auto":
        return f"sampler: {name} (--sampler {name})"
    start = (f"sampler: auto: the first {AUTO_STARTUP} trials quasi-random (Sobol; trial 0 the "
             "space's defaults where it declares them), then ")
    if not mostly_numeric(space):
        return (start + "TPE, as most parameters are choices, where GP measured no better "
                "(bench/README.md, Samplers)")
    return (start + f"Gaussian-process Bayesian optimisation (GP) while a trial trains "
            f"{GP_MIN_TRIAL_S:g} s or more (GP's own second or two a trial is then under a tenth "
            f"of it) up to trial {GP_UNTIL}, else TPE: both ahead of Optuna's default TPE at "
            "10-20 trials (bench/README.md, Samplers)")


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
