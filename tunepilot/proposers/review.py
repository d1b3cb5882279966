"""The `review` strategy, and the cap on the LLM's share of a search's time.

Optuna's sampler (TPE, or CMA-ES...) draws a candidate for every trial. On the LLM's turns the
prompt shows the candidate and what the sampler has learned (TPE's "good" region, CMA-ES's mean
and step size), and the model accepts it or overrides it with a reason. The model's trials
(overrides, and its opening's configs) are capped at a share of any `WINDOW` trials in a row.
The share is earned (`tunepilot.memory.trust`): 30% for a model with no record (the "Centaur"
design, arXiv 2603.24647: an LLM overriding CMA-ES on about 30% of trials beat both; given 80%
it did worse), more for a model whose overrides keep beating the sampler's typical trial, a
probe every `WINDOW` trials for one whose overrides lose. A person may fix the share instead
(`max_override_share`). A model that accepts everything leaves
the search exactly the sampler's: same seed, same configs.

`paced` keeps the LLM's time in proportion: past a share of the search's wall time spent waiting
for the model, the sampler takes the turn (a turn of a small model on a CPU can cost ten times a
trial of a small model).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tunepilot.memory import History, trust
from tunepilot.memory.text import plural
from tunepilot.proposers.suggest import Candidate, Suggester, Suggestion, SuggestionSkipped
from tunepilot.space import SearchSpace

if TYPE_CHECKING:
    from tunepilot.proposers.llm_suggester import LLMSuggester

WINDOW = 20  # overrides are counted over the last WINDOW trials
LLM_TIME_SHARE = 0.2  # of the search's wall time, at most, waiting for the model
# What a first turn of the embedded model costs before one is measured: its whole prompt is
# evaluated cold (bench/README.md#the-embedded-model). Unpriced, the first turn was always
# taken, and alone took a demo of short trials past its cap of the wall time.
EMBEDDED_FIRST_TURN_S = 8.0


class Reviewer:
    """The LLM's side of `review`: asked with the sampler's candidate while it may still
    override: at most its share of the last `WINDOW` trials (at least one). The share is the
    one its track record earned, or `max_override_share` where a person fixed it."""

    reviews = True

    def __init__(self, llm: LLMSuggester, max_override_share: float | None = None,
                 llm_time_share: float = 1.0):
        if max_override_share is not None and not 0.0 <= max_override_share <= 1.0:
            raise ValueError(f"max_override_share must lie in [0, 1], found {max_override_share}")
        self.llm = llm
        self.max_override_share = max_override_share
        self.llm_time_share = llm_time_share
        self._quiet = False  # its share is used up and that was said; until it is asked again

    def share(self, history: History) -> float:
        """The share of overrides the model may take now."""
        if self.max_override_share is not None:
            return self.max_override_share
        return trust.record(history).share

    @staticmethod
    def allowed(n_trials: int, share: float) -> int:
        """Overrides allowed among `n_trials` trials at `share`."""
        if share <= 0:
            return 0
        return max(1, math.floor(share * n_trials + 1e-9))

    def overrides_left(self, history: History) -> int:
        """Overrides the model may still take on the next trial: its share of the last
        `WINDOW` trials, less the trials its configs ran in there (overrides, and the configs of
        its opening, which are its turns too: a model does not get 30% on top of an opening
        that is still to be judged)."""
        return turns_left(history, self.share(history))

    def __call__(self, space: SearchSpace, history: History, /,
                 candidate: Candidate | None = None) -> Suggestion | None:
        if candidate is None:  # no candidate to review: the sampler proposes as usual
            return None
        record = trust.record(history) if self.max_override_share is None else None
        share = record.share if record is not None else self.share(history)
        left = turns_left(history, share)
        if left <= 0:  # its share of overrides is used up: nothing to ask
            if not self._quiet and self.llm.notice is not None:
                self.llm.notice(self.quiet_line(history, share))
            self._quiet = True
            return None
        from tunepilot.proposers.gp import can_rate, rates_worse

        below = record is not None and record.score < 0.5
        if below and not can_rate(history):
            # Below even (a calibration that found it not worth its turns): not asked before
            # the engine's model can check what it proposes.
            return None
        self._quiet = False
        check_time_share(history, self.llm_time_share, self.llm.first_turn_s)
        suggestion = self.llm.review(space, history, candidate, overrides_left=left)
        if suggestion.proposer != "llm" or not below:
            return suggestion

        try:
            why = rates_worse(history, space, suggestion.params, candidate.params)
        except Exception:  # a GP that cannot be fitted checks nothing: the override runs
            why = None
        if why is None:
            return suggestion
        # A model whose record is below even: the engine's own model rates its override as
        # a loss even at best, so the candidate runs (the refusal counts as the model's turn).
        return Suggestion(dict(candidate.params), "optuna", rationale=suggestion.rationale,
                          meta=suggestion.meta, review=candidate.record(
                              "refused", suggestion.params,
                              f"its record is below even, and {why}"))

    def quiet_line(self, history: History, share: float) -> str:
        """Why the model is not asked from this trial on, and when it next will be: said once,
        where its silence starts."""
        span = min(len(history) + 1, WINDOW)
        turns = _turns(history)
        used = sum(1 for p in (turns[len(turns) - (span - 1):] if span > 1 else []) if p == "llm")
        why = ("the share you set (max_override_share)" if self.max_override_share is not None
               else "the share its record earns")
        nxt = next_turn(history, share)
        return (f"LLM not asked from trial {len(history)}: its turns took {used} of the last "
                f"{plural(span - 1, 'trial')}, all that {why} ({share:.0%}) allows in {span} in "
                f"a row; the sampler proposes until trial {nxt}, where the model reviews again")


def turns_left(history: History, share: float) -> int:
    """The LLM's trials still allowed on the next trial: `share` of the last `WINDOW` trials
    (the next one counted), less the trials its configs ran in there and its overrides that
    were refused (it had its turn)."""
    return _left(_turns(history), share)


def _turns(history: History) -> list[str | None]:
    """Each trial's proposer, "llm" where the model's override was refused as well."""
    return ["llm" if t.review is not None and t.review.verdict == "refused" else t.proposer
            for t in history.trials]


def _left(proposers: list[str | None], share: float) -> int:
    span = min(len(proposers) + 1, WINDOW)
    recent = proposers[len(proposers) - (span - 1):] if span > 1 else []
    return Reviewer.allowed(span, share) - sum(1 for p in recent if p == "llm")


def next_turn(history: History, share: float) -> int:
    """The trial number at which the LLM may next take a turn, if the sampler proposes every
    trial until then (its share unchanged): its oldest trials must leave the window."""
    proposers = _turns(history)
    for k in range(1, WINDOW + 1):
        if _left(proposers + [None] * k, share) > 0:
            return len(proposers) + k
    return len(proposers) + WINDOW


def earned_turns(suggester: Suggester, *, startup: int = 2,
                 share: float | None = None) -> Suggester:
    """The `hybrid` strategy: `suggester` (the LLM) proposes the first `startup` trials, then
    a trial whenever its trials among the last `WINDOW` are fewer than the share its track
    record earns (`tunepilot.memory.trust`; `share` where a person fixed it); the sampler
    proposes the others. Both read the same history."""

    def hybrid(space: SearchSpace, history: History) -> Suggestion | None:
        if len(history) < startup:
            return suggester(space, history)
        earned = trust.record(history).share if share is None else share
        return suggester(space, history) if turns_left(history, earned) > 0 else None

    return hybrid


def check_time_share(history: History, max_share: float, first_turn_s: float = 0.0) -> None:
    """Raises `SuggestionSkipped` when one more LLM turn would take the study's time spent
    waiting for the model past `max_share` of its wall time (1.0: never). The turn about to be
    taken counts too: as long as the turns so far, on average, or `first_turn_s` before any
    (0: unknown, so the first turn is taken and measured)."""
    if max_share >= 1.0:
        return
    waited, wall = history.llm_seconds(), history.wall_time_s()
    turns = [c.latency_s for c in history.llm_calls() if c.latency_s]
    # Counting the turn about to be taken keeps the share under its cap instead of passing it
    # by one slow turn.
    expected = sum(turns) / len(turns) if turns else first_turn_s
    if waited + expected <= 0 or (waited + expected) / (wall + expected) <= max_share:
        return
    if not turns:
        raise SuggestionSkipped(
            f"a first turn of the LLM is expected to take ~{expected:.2g} s, past its cap of "
            f"{max_share:.0%} of the search's time so far ({wall:.0f} s; llm_time_share): the "
            "sampler took this turn")
    raise SuggestionSkipped(
        f"the LLM's share of the search's time is {waited / max(wall, 1e-9):.0%} ({waited:.0f} "
        f"s of {wall:.0f} s); another turn would take it past its cap of {max_share:.0%} "
        "(llm_time_share): the sampler took this turn")


def paced(suggester: Suggester, max_share: float = LLM_TIME_SHARE) -> Suggester:
    """`suggester`, skipped on any turn where the LLM's share of the search's wall time is
    spent (see `check_time_share`)."""
    if max_share >= 1.0:
        return suggester

    first_turn_s = getattr(suggester, "first_turn_s", 0.0)

    def within_share(space: SearchSpace, history: History) -> Suggestion | None:
        check_time_share(history, max_share, first_turn_s)
        return suggester(space, history)

    return within_share
