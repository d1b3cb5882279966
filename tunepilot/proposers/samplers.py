"""Optuna's samplers by name: one registry the config, the CLI, `tune init`, the tuner and a
reviewing model all read.

A sampler is one `SamplerKind` entry: its name, how it is built for a trial (seed, space, trial
number), a few words for `--help`, what a reviewing model calls it and what it is told about
the sampler's state. A new sampler is one `register(SamplerKind(...))` call; nothing else
names it.

Example:
    >>> from tunepilot.proposers import samplers
    >>> samplers.register(samplers.SamplerKind(
    ...     "qmc", lambda seed, space, number: optuna.samplers.QMCSampler(seed=seed),
    ...     help="Sobol points (Optuna's QMCSampler)"))  # doctest: +SKIP

Optuna is imported when a sampler is built, not before: `tune --help` lists the names.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunepilot.errors import ConfigError, did_you_mean
from tunepilot.proposers import sampler_state
from tunepilot.space import Categorical, SearchSpace

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler

Build = Callable[[int | None, SearchSpace | None, int], "BaseSampler"]
Describe = Callable[[Any, "optuna.Study", SearchSpace, Mapping[str, "BaseDistribution"],
                     Mapping[str, Any] | None], list[str]]


@dataclass(frozen=True)
class SamplerKind:
    """One sampler known by name.

    `build(seed, space, number)` makes the sampler that draws trial `number` of a study over
    `space` (seeded per trial; `space` may be None for a study of plain Optuna). `owns(sampler)`
    tells whether a built sampler is this kind's (how a reviewer's view is found for the
    sampler that drew a candidate); `label` is what a reviewing model reads it as, and
    `describe` what it is shown of the sampler's state (none: only the candidate). `line`: the
    first lines' word on it when the run starts, if more than its name. `redraw`: the kind that
    draws again when a draw repeats a trial's config (a sampler whose draw costs a model fit
    names a cheap one).
    """

    name: str
    build: Build
    help: str
    label: str = ""
    owns: Callable[[Any], bool] = lambda sampler: False
    describe: Describe | None = None
    line: Callable[[SearchSpace], str] | None = None
    redraw: str | None = None  # the kind that draws again after a repeat (None: this one)


REGISTRY: dict[str, SamplerKind] = {}


def register(kind: SamplerKind) -> SamplerKind:
    """Adds (or replaces) a sampler by its name; the config and the CLI accept it from now on."""
    REGISTRY[kind.name] = kind
    return kind


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: str) -> SamplerKind:
    kind = REGISTRY.get(name.lower())
    if kind is None:
        raise ConfigError(f"Unknown sampler {name!r}; expected one of {', '.join(REGISTRY)}."
                          f"{did_you_mean(name, list(REGISTRY))}")
    return kind


def kind_of(sampler: Any) -> SamplerKind | None:
    """The registered kind a built sampler belongs to (None: a sampler of the user's); the
    default's, the kind it picked for the trial."""
    sampler = getattr(sampler, "inner", None) or sampler  # `auto.Auto`, once it has picked
    return next((k for k in REGISTRY.values() if k.owns(sampler)), None)


def label(sampler: Any) -> str:
    """What a reviewing model calls `sampler` ("TPE", "CMA-ES"...)."""
    kind = kind_of(sampler)
    return kind.label if kind is not None and kind.label else type(sampler).__name__


def describe(sampler: Any, study: optuna.Study, space: SearchSpace,
             search_space: Mapping[str, BaseDistribution],
             candidate: Mapping[str, Any] | None = None) -> list[str]:
    """What `sampler` has learned, in a few lines for a reviewing model (none for a kind that
    declares no view of its state)."""
    kind = kind_of(sampler)
    if kind is None or kind.describe is None:
        return []
    return kind.describe(getattr(sampler, "inner", None) or sampler, study, space, search_space,
                         candidate)


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
    kind = get(name)

    def per_trial(number: int) -> BaseSampler:
        return kind.build(None if base is None else (base + number) % 2**32, space, number)

    return per_trial


def optuna_sampler(name: str, seed: int | None = None, *, space: SearchSpace | None = None,
                   number: int = 0) -> BaseSampler:
    """The sampler `name` builds for trial `number` of a study over `space`."""
    return get(name).build(seed, space, number)


def sampler_line(name: str, space: SearchSpace) -> str:
    """The first lines' word on the sampler: which, and why."""
    kind = get(name)
    return kind.line(space) if kind.line is not None else f"sampler: {name} (--sampler {name})"


def mostly_numeric(space: SearchSpace) -> bool:
    """At least half the tuned parameters are floats or ints (CMA-ES's ground; choices are
    TPE's)."""
    numeric = sum(not isinstance(p, Categorical) for p in space.params.values())
    return numeric * 2 >= len(space.params)


def _is(class_name: str) -> Callable[[Any], bool]:
    def owns(sampler: Any) -> bool:
        import optuna

        return isinstance(sampler, getattr(optuna.samplers, class_name))

    return owns


# The built-in kinds.

def _tpe(seed: int | None, space: SearchSpace | None, number: int) -> BaseSampler:
    import optuna

    # multivariate: lr and batch size interact; independent TPE misses that. constant_liar:
    # trials running on other workers count as bad, so workers spread out.
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)


def _random(seed: int | None, space: SearchSpace | None, number: int) -> BaseSampler:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _cmaes(seed: int | None, space: SearchSpace | None, number: int) -> BaseSampler:
    import optuna

    # Categorical parameters (batch size, precision) fall back to random sampling.
    return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)


def _gp(seed: int | None, space: SearchSpace | None, number: int) -> BaseSampler:
    from tunepilot.proposers.gp import GP

    return GP(seed=seed)


def _lhs(seed: int | None, space: SearchSpace | None, number: int) -> BaseSampler:
    from tunepilot.proposers.auto import build

    return build("lhs", seed, space, number)


def _local(seed: int | None, space: SearchSpace | None, number: int) -> BaseSampler:
    from tunepilot.proposers.auto import build

    return build("local", seed, space, number)


def _is_near_best(sampler: Any) -> bool:
    from tunepilot.proposers.auto import NearBest

    return isinstance(sampler, NearBest)


def _is_latin(sampler: Any) -> bool:
    from tunepilot.proposers.auto import Latin

    return isinstance(sampler, Latin)


def _qmc(seed: int | None, number: int) -> BaseSampler:
    from tunepilot.proposers.auto import build

    return build("qmc", seed, None, number)


# `cmaes-tpe`, the default until 2026-12-04 (bench/README.md#the-default-sampler): CMA-ES on a
# mostly numeric space before trial CMAES_UNTIL, then TPE, which models the CMA-ES trials; TPE
# alone on spaces of choices (CMA-ES models no choices).
CMAES_UNTIL = 10
# Under its CMA-ES, the trials after which TPE models the choices
# (bench/README.md#the-default-sampler).
CHOICES_STARTUP = 1


def auto_kind(space: SearchSpace | None, number: int) -> str:
    """"cmaes" or "tpe": what `cmaes-tpe` draws trial `number` of a study over `space` with."""
    if number < CMAES_UNTIL and space is not None and mostly_numeric(space):
        return "cmaes"
    return "tpe"


def _cmaes_tpe(seed: int | None, space: SearchSpace | None, number: int) -> BaseSampler:
    import optuna

    if auto_kind(space, number) == "cmaes":
        # Choices are drawn by TPE's model of them (CMA-ES models numbers only), modelled
        # from the first finished trial (TPE's own 10 random start-up draws would leave
        # them to chance for the whole CMA-ES phase).
        return optuna.samplers.CmaEsSampler(
            seed=seed, warn_independent_sampling=False,
            independent_sampler=optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=CHOICES_STARTUP))
    return _tpe(seed, space, number)


def _auto(seed: int | None, space: SearchSpace | None, number: int) -> BaseSampler:
    from tunepilot.proposers.auto import Auto

    return Auto(seed, space, number)


def _auto_line(space: SearchSpace) -> str:
    from tunepilot.proposers.auto import LOCAL_EVERY, startup

    n = startup(space)
    return (f"sampler: auto: a Latin hypercube of {n} trials, then Gaussian-process BO while its "
            "draws fit in a share of the search's time (10% beside 1-second trials, more beside "
            f"longer ones), TPE's draws where they would not, and from trial {2 * n} on one "
            f"trial in {LOCAL_EVERY} drawn near the trial the GP rates best: ahead of Optuna's "
            "TPE and level with or ahead of its GP sampler on four families of problems "
            "(bench/README.md#the-default-sampler)")


register(SamplerKind("auto", _auto, "by the space and the trials' length, named with its "
                     "reason when a run starts", line=_auto_line, redraw="random"))
register(SamplerKind("cmaes-tpe", _cmaes_tpe, "CMA-ES to trial 9 (choices by TPE), then TPE: "
                     "the default until 2026-12-04"))
register(SamplerKind("tpe", _tpe, "Optuna's TPE (multivariate, constant liar)", label="TPE",
                     owns=_is("TPESampler"), describe=sampler_state.describe_tpe))
register(SamplerKind("random", _random, "uniform random draws", label="random search",
                     owns=_is("RandomSampler"), describe=sampler_state.describe_random))
register(SamplerKind("cmaes", _cmaes, "Optuna's CMA-ES (choices drawn at random)",
                     label="CMA-ES", owns=_is("CmaEsSampler"),
                     describe=sampler_state.describe_cmaes))
register(SamplerKind("gp", _gp, "Optuna's Gaussian-process BO (GPSampler)", label="GP",
                     owns=_is("GPSampler"), redraw="random",
                     describe=sampler_state.describe_gp))
register(SamplerKind("lhs", _lhs, "Latin hypercubes of one more point than the parameters, one "
                     "after another (the default's start-up)", label="Latin hypercube",
                     owns=_is_latin, describe=sampler_state.describe_lhs))
register(SamplerKind("local", _local, "draws near the finished trial a GP fitted to the losses "
                     "rates best: each number moved by a tenth of its (log) range, each choice "
                     "kept 4 times in 5 (the default's local search)", label="local search",
                     owns=_is_near_best, redraw="random", describe=sampler_state.describe_local))
register(SamplerKind("qmc", lambda seed, space, number: _qmc(seed, number),
                     "a scrambled Sobol sequence (Optuna's QMCSampler)", label="Sobol points",
                     owns=_is("QMCSampler"), describe=sampler_state.describe_qmc))
