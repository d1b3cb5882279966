"""The suggester seam and `AgentSampler`, which plugs any suggester into Optuna.

A suggester reads the history and proposes the next config::

    class Suggester(Protocol):
        def __call__(self, space: SearchSpace, history: History) -> Suggestion | None: ...

Returning None declines the trial (the Optuna sampler proposes it: how `hybrid` takes turns,
`review.earned_turns`);
raising `SuggestionFailed` hands it to the same sampler as a fallback, with the reason recorded,
so a failing LLM never stops a search. Because `AgentSampler` is an ordinary
`optuna.samplers.BaseSampler`, it drops into any Optuna study, and several workers coordinate
through the study's storage alone.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import optuna
from optuna.samplers import BaseSampler

from tunepilot.errors import TuneError
from tunepilot.memory import History, attrs, records
from tunepilot.runtime import interrupts
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
    review: Mapping[str, Any] | None = None  # the `review` strategy's verdict (Candidate.record)


@dataclass(frozen=True)
class Candidate:
    """The sampler's proposal for a trial, shown to a reviewing model with the sampler's state.
    The state is read on first use: a turn on which the model is not asked costs nothing."""

    params: Mapping[str, Any]
    sampler: str  # "TPE", "CMA-ES", ...
    describe: Callable[[], Sequence[str]] = tuple  # what the sampler has learned, as lines

    @functools.cached_property
    def state(self) -> tuple[str, ...]:
        return tuple(self.describe())

    def record(self, verdict: str, override: Mapping[str, Any] | None = None,
               why: str | None = None) -> dict[str, Any]:
        """What is stored of a review: "accepted", "override", or "refused" (an override not
        taken, `why`: without a reason in words where None; `override` is the config it
        wanted)."""
        out: dict[str, Any] = {"verdict": verdict, "sampler": self.sampler,
                               "candidate": dict(self.params)}
        if override is not None:
            out["override"] = dict(override)
        if why is not None:
            out["why"] = why
        return out


class Suggester(Protocol):
    """Proposes the next config. A suggester with ``reviews = True`` (the `review` strategy) is
    called with the sampler's `Candidate` as ``candidate=`` and answers for it."""

    def __call__(self, space: SearchSpace, history: History, /) -> Suggestion | None: ...


class SuggestionFailed(TuneError):
    """A suggester could not produce a valid config; the fallback sampler takes the trial.

    `meta` (tokens spent, attempts, errors) is recorded on the trial all the same.
    """

    def __init__(self, message: str, meta: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.meta = dict(meta or {})


class SuggestionSkipped(SuggestionFailed):
    """The suggester was not asked on its turn (e.g. the LLM's share of the search's time is
    spent); the sampler takes the trial and the reason is recorded."""


_CLASH_ATTEMPTS = 2  # asks of the suggester when another worker took its config meanwhile
_REDRAWS = 8  # draws of the sampler's after the first that repeated a trial's config
_REDRAW_STRIDE = 1_000_003  # a redraw's seed: the trial number's, this far apart per attempt


class AgentSampler(BaseSampler):
    """Asks `suggester` for every trial; anything it does not provide comes from `fallback`.

    With ``suggester=None`` this is exactly the fallback sampler, plus bookkeeping of who
    proposed each trial.

    Example:
        >>> sampler = AgentSampler(space, my_llm_suggester, fallback=TPESampler())
        >>> study = optuna.create_study(sampler=sampler)  # doctest: +SKIP
    """

    def __init__(self, space: SearchSpace, suggester: Suggester | None = None,
                 fallback: BaseSampler | None = None, *,
                 fallback_for_trial: Callable[[int], BaseSampler] | None = None,
                 redraw_for_trial: Callable[[int], BaseSampler] | None = None,
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
        # What draws again after a draw that repeats a trial's config (default: the fallback
        # with another seed; a sampler that models the study at a cost redraws cheaply).
        self.redraw_for_trial = redraw_for_trial or fallback_for_trial
        self.fallback = fallback or (fallback_for_trial(0) if fallback_for_trial else
                                     optuna.samplers.TPESampler(multivariate=True))
        self.lock = lock
        self.on_created = on_created
        self.last_trial_id: int | None = None  # the trial this process started last
        self._proposals: dict[int, dict[str, Any] | None] = {}  # trial id: the suggester's

    # The suggester is asked once per trial, when Optuna first wants the trial's relative
    # params; its answer then serves both the relative and the independent sampling. The
    # relative search space stays the fallback's (what past trials had), so the sampler never
    # claims a parameter the objective suggests differently, and works in any study.
    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.fallback.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if _is_enqueued(trial):
            return self.fallback.sample_relative(study, trial, search_space)
        if trial._trial_id not in self._proposals:
            if self.suggester is None:
                proposal: dict[str, Any] | None = self._draw(study, trial, search_space)
            else:
                candidate = (self._candidate(study, trial, search_space)
                             if getattr(self.suggester, "reviews", False) else None)
                proposal = self._propose(study, trial, candidate)
                if proposal is None:  # declined, or fell back: the sampler's own config
                    proposal = self._draw(study, trial, search_space)
            self._proposals[trial._trial_id] = proposal
        proposal = self._proposals[trial._trial_id] or {}
        params = _within(proposal, search_space)
        rest = {k: d for k, d in search_space.items() if k not in params}
        if rest:  # what the suggester's space lacks, or has out of the objective's range
            params.update(self.fallback.sample_relative(study, trial, rest))
        return params

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        proposal = self._proposals.get(trial._trial_id) or {}
        if param_name in proposal and _within({param_name: proposal[param_name]},
                                              {param_name: param_distribution}):
            return proposal[param_name]
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)

    def _candidate(self, study: optuna.Study, trial: FrozenTrial,
                   search_space: dict[str, BaseDistribution]) -> Candidate:
        """The fallback sampler's config for `trial` (see `_draw`) and its state."""
        from tunepilot.proposers import samplers

        params = self._draw(study, trial, search_space)
        sampler = self.fallback
        return Candidate(params, samplers.label(sampler), lambda: samplers.describe(
            sampler, study, self.space, search_space, params))

    def _draw(self, study: optuna.Study, trial: FrozenTrial,
              search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        """The fallback sampler's whole config for `trial`, drawn as it would draw it alone
        (its joint sample, then each other parameter in the space's order); drawn again, with
        other seeds, while it repeats a config finished or running in the study (the rule the
        LLM's proposals are refused by, `memory.repeats`): a trial that repeats one teaches
        nothing. After `_REDRAWS` repeats (a small space, all of it tried) the last is kept."""
        history: History | None = None
        sampler = self.fallback
        start = time.perf_counter()
        for attempt in range(_REDRAWS + 1):
            params = dict(sampler.sample_relative(study, trial, search_space))
            for name, dist in self.space.distributions().items():
                if name not in params:
                    params[name] = sampler.sample_independent(study, trial, name, dist)
            history = history or History.from_study(attrs.whole(study), exclude=trial.number,
                                                    this_trial=True)
            if attempt == _REDRAWS or history.with_config(params, self.space) is None:
                break
            if self.redraw_for_trial is not None:  # another seed
                sampler = self.redraw_for_trial(trial.number + (attempt + 1) * _REDRAW_STRIDE)
                sampler.before_trial(study, trial)
        # Which sampler drew it and its own time (the default rule weighs it against the
        # trials' time).
        from tunepilot.proposers.samplers import label

        drew = getattr(sampler, "inner", None) or sampler  # `auto.Auto`: the kind it picked
        records.sampler(study._storage, trial._trial_id, label(sampler),
                        time.perf_counter() - start, getattr(drew, "expected_s", None))
        return params

    def _propose(self, study: optuna.Study, trial: FrozenTrial,
                 candidate: Candidate | None = None) -> dict[str, Any] | None:
        """The config for `trial`, recorded: the suggester's, or (reviewing) the candidate it
        accepted; None when the fallback sampler takes the trial."""
        storage = study._storage
        taken = dict(candidate.params) if candidate is not None else None
        study = attrs.whole(study)
        # The trial being proposed is RUNNING with no params yet: leave it out.
        history = History.from_study(study, exclude=trial.number)
        for _ in range(_CLASH_ATTEMPTS):
            try:
                if candidate is not None:
                    suggestion = self.suggester(self.space, history,  # type: ignore[misc,call-arg]
                                                candidate=candidate)
                else:
                    suggestion = self.suggester(self.space, history)  # type: ignore[misc]
                interrupts.check()  # a Ctrl-C that arrived inside a model's C code
            except SuggestionSkipped as e:
                records.skipped(storage, trial._trial_id, str(e))
                return taken
            except SuggestionFailed as e:
                records.fallback(storage, trial._trial_id, str(e), e.meta)
                return taken
            if suggestion is None:
                records.proposal(storage, trial._trial_id, "optuna")
                return taken
            if suggestion.proposer != "llm":  # the reviewer accepted the sampler's candidate
                records.proposal(storage, trial._trial_id, suggestion.proposer,
                                 rationale=suggestion.rationale, meta=suggestion.meta,
                                 review=suggestion.review)
                return dict(suggestion.params)
            # Another worker may have started the same config while the model was thinking:
            # check and record as one step, so the check holds for everyone.
            with self.lock or contextlib.nullcontext():
                clash = (history.with_config(suggestion.params, self.space)
                         or history.changed_since(study, exclude=trial.number).with_config(
                             suggestion.params, self.space))
                if clash is None:
                    if suggestion.notes:
                        records.notes(study, suggestion.notes, trial.number)
                    records.proposal(storage, trial._trial_id, suggestion.proposer,
                                     params=suggestion.params, rationale=suggestion.rationale,
                                     notes=suggestion.notes, meta=suggestion.meta,
                                     review=suggestion.review)
                    return dict(suggestion.params)
            # Asked again, the suggester sees the trial it clashed with.
            history = History.from_study(study, exclude=trial.number)
        assert clash is not None and suggestion is not None  # the loop ends only on a clash
        reason = (f"the suggester proposed a config that trial #{clash.number} is already "
                  f"{'running' if clash.state == 'running' else 'done with'} "
                  f"{_CLASH_ATTEMPTS} times")
        records.fallback(storage, trial._trial_id, reason, suggestion.meta)
        return taken

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.last_trial_id = trial._trial_id
        if self.on_created is not None:
            self.on_created(trial)
        if self.fallback_for_trial is not None:
            self.fallback = self.fallback_for_trial(trial.number)
        if History.proposer_of_frozen(trial) is None:
            if _is_enqueued(trial):
                records.proposal(study._storage, trial._trial_id, "enqueued")
            elif self.suggester is None:
                records.proposal(study._storage, trial._trial_id, "optuna")
        self.fallback.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._proposals.pop(trial._trial_id, None)
        self.fallback.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        """Optuna calls this in each process of ``n_jobs`` / forked workers: per-trial fallbacks
        are seeded afresh from then on, not only the current one."""
        self.fallback.reseed_rng()
        offset = int(np.random.default_rng().integers(2**31))
        if self.fallback_for_trial is not None:
            seeded = self.fallback_for_trial
            self.fallback_for_trial = lambda number: seeded(number + offset)
        if self.redraw_for_trial is not None:
            redraw = self.redraw_for_trial
            self.redraw_for_trial = lambda number: redraw(number + offset)


def _is_enqueued(trial: FrozenTrial) -> bool:
    return "fixed_params" in trial.system_attrs


def _within(params: Mapping[str, Any], space: Mapping[str, BaseDistribution]) -> dict[str, Any]:
    """The values of `params` that `space` has and their distributions contain, each of its
    distribution's type."""
    kept = {}
    for name, value in params.items():
        dist = space.get(name)
        if dist is None:
            continue
        try:
            internal = dist.to_internal_repr(value)
            if dist._contains(internal):  # as the distribution's type: 1 -> 1.0 for a float
                kept[name] = dist.to_external_repr(internal)
        except (TypeError, ValueError):
            continue
    return kept
