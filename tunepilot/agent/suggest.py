"""The suggester seam and `AgentSampler`, which plugs any suggester into Optuna.

A suggester reads the history and proposes the next config::

    class Suggester(Protocol):
        def __call__(self, space: SearchSpace, history: History) -> Suggestion | None: ...

Returning None declines the trial (the Optuna sampler proposes it: how `hybrid` takes turns);
raising `SuggestionFailed` hands it to the same sampler as a fallback, with the reason recorded,
so a failing LLM never stops a search. Because `AgentSampler` is an ordinary
`optuna.samplers.BaseSampler`, it drops into any Optuna study, and several workers coordinate
through the study's storage alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import optuna
from optuna.samplers import BaseSampler

from tunepilot.agent import interrupts
from tunepilot.errors import ConfigError, TuneError, did_you_mean
from tunepilot.memory import History, attrs
from tunepilot.space import SearchSpace

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial, TrialState

    from tunepilot.memory.lock import StudyLock


@dataclass(frozen=True)
class Suggestion:
    """A proposed config, who proposed it and why, and what it cost (tokens, latency...)."""

    params: Mapping[str, Any]
    proposer: attrs.Proposer = "llm"
    rationale: str | None = None
    notes: str | None = None  # the agent's updated notes, stored with the study
    meta: Mapping[str, Any] = field(default_factory=dict)


class Suggester(Protocol):
    def __call__(self, space: SearchSpace, history: History) -> Suggestion | None: ...


class SuggestionFailed(TuneError):
    """A suggester could not produce a valid config; the fallback sampler takes the trial.

    `meta` (tokens spent, attempts, errors) is recorded on the trial all the same.
    """

    def __init__(self, message: str, meta: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.meta = dict(meta or {})


def alternate(suggester: Suggester, *, startup: int = 3, every: int = 2) -> Suggester:
    """The `hybrid` strategy: `suggester` proposes the first `startup` trials (where an LLM's
    prior knowledge helps most), then every `every`-th trial; Optuna's sampler the others. Both
    read the same history.
    """

    def hybrid(space: SearchSpace, history: History) -> Suggestion | None:
        n = len(history)
        if n < startup or (every and (n - startup) % every == 0):
            return suggester(space, history)
        return None

    return hybrid


SAMPLERS = ("tpe", "random", "cmaes", "gp")
_CLASH_ATTEMPTS = 2  # asks of the suggester when another worker took its config meanwhile


def optuna_sampler(name: str, seed: int | None = None) -> BaseSampler:
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
    raise ConfigError(
        f"Unknown sampler {name!r}; expected one of {', '.join(SAMPLERS)}.{did_you_mean(name, SAMPLERS)}"
    )


class AgentSampler(BaseSampler):
    """Asks `suggester` for every trial; anything it does not provide comes from `fallback`.

    With ``suggester=None`` this is exactly the fallback sampler, plus bookkeeping of who
    proposed each trial.

    Example:
        >>> sampler = AgentSampler(space, my_llm_suggester, fallback=optuna_sampler("tpe"))
        >>> study = optuna.create_study(sampler=sampler)  # doctest: +SKIP
    """

    def __init__(self, space: SearchSpace, suggester: Suggester | None = None,
                 fallback: BaseSampler | None = None, *,
                 fallback_for_trial: Callable[[int], BaseSampler] | None = None,
                 lock: StudyLock | None = None,
                 on_created: Callable[[FrozenTrial], None] | None = None):
        """`fallback_for_trial(number)`, when given, makes the fallback for each trial: seeded
        by the trial number, parallel workers never replay one another's proposals. `lock` (the
        study's) makes "is this config already running?" and recording it one step across
        workers. `on_created` runs once Optuna has created a trial, before anything is sampled.
        """
        self.space = space
        self.suggester = suggester
        self.fallback_for_trial = fallback_for_trial
        self.fallback = fallback or (fallback_for_trial(0) if fallback_for_trial else
                                     optuna.samplers.TPESampler(multivariate=True))
        self.lock = lock
        self.on_created = on_created
        self.last_trial_id: int | None = None  # the trial this process started last

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self.suggester is None or _is_enqueued(trial):
            return self.fallback.infer_relative_search_space(study, trial)
        return self.space.distributions()

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if self.suggester is None or _is_enqueued(trial):
            return self.fallback.sample_relative(study, trial, search_space)
        # The trial being proposed is RUNNING with no params yet: leave it out.
        history = History.from_study(study, exclude=trial.number)
        for attempt in range(_CLASH_ATTEMPTS):
            try:
                suggestion = self.suggester(self.space, history)
                interrupts.check()  # a Ctrl-C that arrived inside a model's C code
            except SuggestionFailed as e:
                record = {attrs.PROPOSER: "fallback", attrs.FALLBACK_REASON: str(e)}
                _set_attrs(study, trial, {**record, **e.meta})
                return self._fallback_relative(study, trial)
            if suggestion is None:
                _set_attrs(study, trial, {attrs.PROPOSER: "optuna"})
                return self._fallback_relative(study, trial)
            # Another worker may have started the same config while the model was thinking:
            # check and record as one step, so the check holds for everyone.
            with self.lock or contextlib.nullcontext():
                history = History.from_study(study, exclude=trial.number)
                clash = history.with_config(suggestion.params)
                if clash is None:
                    self._record(study, trial, suggestion)
                    return dict(suggestion.params)
        reason = (f"the suggester proposed a config that trial #{clash.number} is already "
                  f"{'running' if clash.state == 'running' else 'done with'} "
                  f"{_CLASH_ATTEMPTS} times")
        _set_attrs(study, trial, {attrs.PROPOSER: "fallback", attrs.FALLBACK_REASON: reason,
                                  **suggestion.meta})
        return self._fallback_relative(study, trial)

    def _record(self, study: optuna.Study, trial: FrozenTrial, suggestion: Suggestion) -> None:
        # Two writes, not one per field: each is a round trip (and a commit) to the storage.
        agent = dict(suggestion.meta.get(attrs.LLM, {}))
        if suggestion.rationale:
            agent[attrs.RATIONALE] = suggestion.rationale
        if suggestion.notes:
            agent[attrs.NOTES_UPDATE] = suggestion.notes
            study.set_user_attr(attrs.NOTES, {"text": suggestion.notes, "trial": trial.number})
        record = {**suggestion.meta, attrs.PROPOSER: suggestion.proposer, attrs.LLM: agent,
                  attrs.PROPOSED: dict(suggestion.params)}
        _set_attrs(study, trial, record)

    def _fallback_relative(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        fallback_space = self.fallback.infer_relative_search_space(study, trial)
        return self.fallback.sample_relative(study, trial, fallback_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.last_trial_id = trial._trial_id
        if self.on_created is not None:
            self.on_created(trial)
        if self.fallback_for_trial is not None:
            self.fallback = self.fallback_for_trial(trial.number)
        if attrs.PROPOSER not in trial.user_attrs:
            if _is_enqueued(trial):
                _set_attrs(study, trial, {attrs.PROPOSER: "enqueued"})
            elif self.suggester is None:
                _set_attrs(study, trial, {attrs.PROPOSER: "optuna"})
        self.fallback.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.fallback.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.fallback.reseed_rng()


def _is_enqueued(trial: FrozenTrial) -> bool:
    return "fixed_params" in trial.system_attrs


def _set_attrs(study: optuna.Study, trial: FrozenTrial, values: Mapping[str, Any]) -> None:
    # Samplers get frozen trials; writing through the storage is how Optuna's own samplers
    # record per-trial state too.
    for key, value in values.items():
        study._storage.set_trial_user_attr(trial._trial_id, key, value)
