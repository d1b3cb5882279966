"""`--sampler auto`, tunepilot's default: which sampler draws each trial, and why.

The rule (measured on four families of problems beside every peer:
bench/README.md#the-default-sampler):

1. The first trials (one more than the parameters, 4 to 10; the space's declared default among
   them) are a Latin hypercube: each parameter's range cut into as many strata as trials, one
   trial in each, so they cover every parameter evenly where random draws clump. (A scrambled
   Sobol sequence's first handful of points in many dimensions share a lattice between
   parameters that misled the GP fitted on them: bench/README.md#the-default-sampler.)
2. Then Gaussian-process BO (Optuna's `GPSampler`), which models the trials so far (pruned ones
   at their last loss, ones the config broke at the study's worst, those still running on
   other workers as Optuna does), for as long as its own time fits the time share below.
3. From twice the start-up on, every third trial the GP would draw is a draw near the trial
   the GP rates best instead (`NearBest`: each number moved by a normal step of a tenth of its
   (log) range, each choice kept 4 times in 5): a local search beside the GP's model, which on
   its own spends late trials on the space's edges. It goes near the finished trial whose loss
   a GP fitted to the losses predicts lowest, not the lowest loss seen: on a noisy objective
   the luckiest trial is often a config whose neighbours disagree with it.
4. The sampler's time follows the trials': it may spend `share(trial)` of the search's time,
   10% beside 1-second trials and more beside long ones (`share`). A draw whose expected cost
   would take the sampler past that share is TPE's instead (milliseconds), so short trials get
   GP draws now and then and long ones every time. The cost of a GP draw is the last one's,
   grown with the trials since; before any, `FIRST_GP_DRAW_S`.

5. Where the goal is the clock (the run was given `--target` or `--timeout`: `cost`), the GP
   draws weigh what each config is expected to buy (the chance of the target; with a time
   budget, expected improvement) against the seconds a second GP expects it to take
   (bench/README.md#hours-not-trials); with a trial budget alone, as above.

Each trial records which sampler drew it and in how long (`records.sampler`), so a resume and
every worker apply the rule from the same figures.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from optuna.samplers import BaseSampler, QMCSampler

from tunepilot.memory import History, records
from tunepilot.proposers import cost
from tunepilot.proposers.gp import GP, model_best
from tunepilot.space import SearchSpace

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial, TrialState

# What a first GP draw is expected to cost before one is measured
# (bench/README.md#the-samplers-own-time).
FIRST_GP_DRAW_S = 0.5
# From trial 2 x the start-up on, every LOCAL_EVERY-th trial the GP would draw is drawn near the
# trial the GP rates best (`NearBest`): each number moved by a normal step of LOCAL_SD of its
# (log) range, each choice redrawn with probability LOCAL_FLIP
# (bench/README.md#the-default-sampler).
LOCAL_EVERY, LOCAL_SD, LOCAL_FLIP = 3, 0.1, 0.2


def share(trial_s: float) -> float:
    """The share of the search's time the sampler may spend, beside trials of `trial_s`
    seconds: 10% at 1 s or less, 10 points more for each factor of ten, at most 50%."""
    return min(0.5, 0.1 * (1.0 + math.log10(max(trial_s, 1.0))))


def startup(space: SearchSpace | None) -> int:
    """Trials of the start-up design: one more than the parameters, 4 to 10."""
    return min(10, max(4, len(space.params) + 1)) if space is not None else 10


def choose(history: History, space: SearchSpace | None, number: int,
           first: int | None = None, every: int = LOCAL_EVERY) -> tuple[str, str]:
    """("lhs" | "gp" | "local" | "tpe", why) for trial `number` of a study with `history`;
    `first`: the start-up trials (default: `startup`); `every`: from trial 2 x `first` on,
    every `every`-th trial the GP would draw is drawn near the trial the GP rates best ("local";
    0: never)."""
    first = startup(space) if first is None else first
    if number < first:
        return "lhs", f"the first {first} trials are a Latin hypercube, an even cover"
    done = [t for t in history if t.state in ("complete", "pruned", "fail")
            and t.duration_s is not None]
    trial_s = statistics.median(t.own_s for t in done) if done else 0.0
    spent = sum(float((t.sampler or {}).get("s") or 0.0) for t in history)
    work = sum(t.own_s for t in done)
    gp = [(t.number, float(t.sampler["s"])) for t in history
          if t.sampler and t.sampler.get("kind") == "GP" and t.sampler.get("s") is not None]
    expected = (gp[-1][1] * max(1.0, number / max(gp[-1][0], 1)) if gp else FIRST_GP_DRAW_S)
    allowed = share(trial_s)
    if not done or spent + expected <= allowed * (work + trial_s):
        if every and space is not None and number >= 2 * first and number % every == 0:
            return "local", (f"from trial {2 * first} on, one trial in {every} is drawn near "
                             "the trial the GP rates best (a local search beside its model)")
        fits = (f"its draws fit in {allowed:.0%} of the search's time beside trials of "
                f"{trial_s:.2g} s")
        if (rule := cost.rule_for(history.goal)) is not None:
            return "gp-cost", f"{fits}; the goal is the clock: {cost.RULES[rule]}"
        return "gp", fits
    return "tpe", (f"a GP draw (~{expected:.2g} s) would take the sampler past {allowed:.0%} of "
                   f"the search's time beside trials of {trial_s:.2g} s")


class Auto(BaseSampler):
    """The default sampler for one trial: it reads the study when the trial starts, picks the
    sampler the rule names (`choose`), and is that sampler from then on."""

    def __init__(self, seed: int | None, space: SearchSpace | None, number: int,
                 first: int | None = None,
                 start: str | Callable[..., BaseSampler] = "lhs", every: int = LOCAL_EVERY,
                 local: str = "local"):
        self.seed, self.space, self.number, self.start = seed, space, number, start
        self.local = local  # the kind a local draw is built as (`build`)
        self.first = startup(space) if first is None else first
        self.every = every
        self.inner: BaseSampler | None = None
        self.why = ""
        self.warm = False

    def _pick(self, study: optuna.Study) -> BaseSampler:
        if self.inner is None:
            history = History.from_study(study, this_trial=True)
            # The model's opening configs take trials of their own, not the design's points: a
            # design missing one (its first trial taken) left a stratum of every parameter
            # empty (bench/README.md#what-a-models-knowledge-buys-and-its-trust).
            design = self.number - sum(1 for t in history
                                       if t.opening is not None and t.number < self.number)
            kind, self.why = choose(history, self.space, design, self.first, self.every)
            budget = history.goal.get("n_trials")
            # The start-up's draws need no GP, but the trials after them will: what a GP draw
            # imports is imported meanwhile, while this trial trains.
            self.warm = kind == "lhs" and (budget is None or budget > self.first)
            if kind == "lhs" and callable(self.start):  # a benchmark's other start-up
                self.inner = self.start(self.seed, self.space, self.number, self.first)
            else:
                kind = self.start if kind == "lhs" and isinstance(self.start, str) else kind
                kind = self.local if kind == "local" else kind
                self.inner = build(kind, self.seed, self.space, self.number, self.first,
                                   goal=history.goal, row=design)
        return self.inner

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._pick(study).infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._pick(study).sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._pick(study).sample_independent(study, trial, param_name,
                                                      param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._pick(study).before_trial(study, trial)
        if self.warm:
            from tunepilot.proposers.gp import warm_up

            warm_up()

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Any) -> None:
        if self.inner is not None:
            self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        if self.inner is not None:
            self.inner.reseed_rng()


class NearBest(BaseSampler):
    """A draw near one of the study's finished trials (`best`): each number moved by a normal
    step of `LOCAL_SD` of its (log) range (kept inside it), each choice redrawn with probability
    `LOCAL_FLIP`. Before any trial has finished, or without a space, uniform random draws."""

    def __init__(self, seed: int | None, space: SearchSpace | None, anchor: str = "seen"):
        from optuna.samplers import RandomSampler

        self.anchor = anchor  # "seen": the best loss seen; "model": the GP's posterior mean's
        self._rng = np.random.default_rng(seed)
        self._space = space.distributions() if space is not None else None
        self._random = RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._space or {})

    def best(self, study: optuna.Study,
             search_space: Mapping[str, BaseDistribution]) -> FrozenTrial | None:
        """The trial a draw goes near: of the finished ones with a finite loss and every
        parameter of `search_space`, the best seen, or with `anchor="model"` the one a GP
        fitted to them rates best (None before there is one)."""
        from optuna.study import StudyDirection
        from optuna.trial import TrialState

        done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.value is not None and math.isfinite(t.value)
                and all(n in t.params for n in search_space)]
        if not done:
            return None
        if self.anchor == "model" and len(done) >= 3:
            return done[model_best(study, done, search_space)]
        return (min if study.direction == StudyDirection.MINIMIZE else max)(
            done, key=lambda t: float(t.value or 0.0))

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        from optuna._transform import _SearchSpaceTransform
        from optuna.distributions import CategoricalDistribution

        best = self.best(study, search_space)
        if best is None or not search_space:
            return {}
        unit = _SearchSpaceTransform(search_space, transform_0_1=True)
        x = unit.transform({n: best.params[n] for n in search_space})
        for dist, cols in zip(search_space.values(), unit.column_to_encoded_columns,
                              strict=True):
            if isinstance(dist, CategoricalDistribution):  # one column a choice
                if self._rng.random() < LOCAL_FLIP:
                    x[cols] = 0.0
                    x[cols[self._rng.integers(len(cols))]] = 1.0
            else:
                x[cols] = np.clip(x[cols] + self._rng.normal(0.0, LOCAL_SD, len(cols)), 0.0, 1.0)
        return unit.untransform(x)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)


class _Told(QMCSampler):
    """Optuna's QMC sampler told the space. Alone, it reads the space off the study's first
    trial, and before one has finished off the trials running; with several workers starting
    at once those hold half-drawn configs, and it warned of a conditional space on every
    worker's terminal. tunepilot's spaces have no conditions: the whole space is known."""

    def __init__(self, space: SearchSpace | None, **kw: Any):
        super().__init__(**kw)
        self._space = space.distributions() if space is not None else None

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self._space is None:
            return super().infer_relative_search_space(study, trial)
        return dict(self._space)


class Latin(_Told):
    """Latin hypercubes of `n` points, one after another, for the study (its seed): each
    parameter's range cut into `n` strata, one point in each, with no lattice shared between
    parameters. Which point a trial gets is its number's (unique in the study; Optuna's QMC
    counter is not atomic, and two MySQL workers read one count and drew one config)."""

    def __init__(self, space: SearchSpace | None, n: int, number: int = 0, **kw: Any):
        super().__init__(space, **kw)
        self._n, self._number = n, number
        self._unseeded = kw.get("seed") is None  # Optuna drew one for this sampler alone

    def _sample_qmc(self, study: optuna.Study,
                    search_space: dict[str, BaseDistribution]) -> Any:
        block, row = divmod(self._number, self._n)
        if self._unseeded:  # one design for the study all the same
            self._seed = records.design_seed(study)
        return self.design(block, len(search_space))[row][None, :]

    def design(self, block: int, d: int) -> Any:
        """The study's `block`-th hypercube: `n` points in [0, 1)^d, as SciPy's
        `qmc.LatinHypercube(d, seed=...).random(n)` draws them, number for number
        (tests/test_default_search.py compares the two), without importing `scipy.stats`,
        the largest import of a worker's start before its first trial."""
        if block == 0:
            rng = np.random.default_rng(self._seed)
        else:  # SciPy spawns its own child of a Generator it is handed
            parent = np.random.default_rng([self._seed, block]).bit_generator
            seeds: Any = parent.seed_seq  # a SeedSequence: default_rng makes one
            rng = np.random.Generator(type(parent)(seeds.spawn(1)[0]))
        jitter = rng.uniform(size=(self._n, d))
        strata = np.tile(np.arange(1, self._n + 1), (d, 1))
        for column in strata:
            rng.shuffle(column)
        return (strata.T - jitter) / self._n


def build(kind: str, seed: int | None, space: SearchSpace | None, number: int,
          first: int | None = None, goal: Mapping[str, Any] | None = None,
          row: int | None = None) -> BaseSampler:
    """Trial `number`'s sampler of `kind`, seeded by `seed` (the study's plus `number`); `row`:
    its point of the start-up design (`number` unless trials before it were not the design's)."""
    import optuna

    if kind == "qmc":
        # One scrambled Sobol sequence for the study: its base seed, not the trial's.
        base = None if seed is None else (seed - number) % 2**32
        with warnings.catch_warnings():  # "experimental" since Optuna 3.0, said every trial
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return _Told(space, seed=base, scramble=True, warn_independent_sampling=False,
                          warn_asynchronous_seeding=False)
    if kind == "lhs":
        base = None if seed is None else (seed - number) % 2**32
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return Latin(space, startup(space) if first is None else first,
                         number if row is None else row, seed=base,
                         warn_independent_sampling=False, warn_asynchronous_seeding=False)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind in ("local", "local-seen"):  # "local-seen": the rule before 2026-12-05
        return NearBest(seed, space, anchor="seen" if kind == "local-seen" else "model")
    if kind == "gp":
        return GP(seed=seed, n_startup_trials=startup(space) if first is None else first,
                  warn_independent_sampling=False)
    if kind == "gp-cost":  # the goal is the clock (`cost`)
        goal = dict(goal or {})
        return cost.CostGP(rule=cost.rule_for(goal) or "target", goal=goal, seed=seed,
                           n_startup_trials=startup(space) if first is None else first,
                           warn_independent_sampling=False)
    # multivariate: parameters interact; constant liar: other workers' running trials count
    # as bad, so workers spread out.
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
