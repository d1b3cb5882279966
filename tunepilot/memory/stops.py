"""Why a search stopped: one type, decided by the run loop, stored in the study (so every
worker and the morning's report read the same), and put into words here only.

Example:
    >>> str(Stop.target(0.4, trial=7, value=0.398))
    'target 0.4 reached by trial 7 (0.398)'
    >>> Stop.from_record(Stop.budget(20).to_record()) == Stop.budget(20)
    True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any


class StopKind(StrEnum):
    BUDGET = "budget"  # the study's trial budget
    TARGET = "target"  # a trial's loss at or under the target
    TIMEOUT = "timeout"  # the study's wall-time budget
    PLATEAU = "plateau"  # `patience` trials without an improvement of `min_delta`
    LLM_BUDGET = "llm_budget"  # the study's LLM spend in USD
    LLM_TOKENS = "llm_tokens"  # the study's LLM tokens
    REPEATED_FAILURE = "repeated_failure"  # the same error, trial after trial: a bug
    INTERRUPTED = "interrupted"  # Ctrl-C
    TERMINATED = "terminated"  # SIGTERM
    WORKERS = "workers"  # local workers ended and none recorded why
    RECORDED = "recorded"  # a reason a study stored as text before this type existed


@dataclass(frozen=True)
class Stop:
    """A stop reason. `limit` is the rule's bound (trials, target, seconds, USD, tokens,
    min_delta), `reached` what met it (the loss, seconds, USD, tokens, stale trials), `trial` the
    trial that reached a target, `already`: the rule held before this run started a trial;
    `elsewhere`: another worker stopped the study; `detail`: the repeated error, or the text of
    a stored reason from before this type."""

    kind: StopKind
    limit: float | None = None
    reached: float | None = None
    trial: int | None = None
    already: bool = False
    elsewhere: bool = False
    detail: str = ""
    where: str = ""  # the repeated error's place in the trainer's code: "FILE:LINE in FUNCTION"

    REPEATS = 3  # identical errors in a row look like a bug, not a bad config

    @classmethod
    def budget(cls, n_trials: int, *, already: bool = False) -> Stop:
        return cls(StopKind.BUDGET, limit=n_trials, already=already)

    @classmethod
    def target(cls, target: float, *, trial: int, value: float, already: bool = False) -> Stop:
        return cls(StopKind.TARGET, limit=target, reached=value, trial=trial, already=already)

    @classmethod
    def timeout(cls, seconds: float, *, spent: float | None = None) -> Stop:
        """`spent`: the study's time when it was used up before this run began."""
        return cls(StopKind.TIMEOUT, limit=seconds, reached=spent, already=spent is not None)

    @classmethod
    def plateau(cls, stale: int, min_delta: float) -> Stop:
        return cls(StopKind.PLATEAU, limit=min_delta, reached=stale)

    @classmethod
    def llm_budget(cls, spent: float, budget: float) -> Stop:
        return cls(StopKind.LLM_BUDGET, limit=budget, reached=spent)

    @classmethod
    def llm_tokens(cls, tokens: int, budget: int) -> Stop:
        return cls(StopKind.LLM_TOKENS, limit=budget, reached=tokens)

    @classmethod
    def repeated_failure(cls, message: str, where: str = "") -> Stop:
        return cls(StopKind.REPEATED_FAILURE, limit=cls.REPEATS, detail=message, where=where)

    @classmethod
    def interrupted(cls, sigterm: bool) -> Stop:
        return cls(StopKind.TERMINATED if sigterm else StopKind.INTERRUPTED)

    def from_elsewhere(self) -> Stop:
        """This reason, as a worker that did not decide it hears it."""
        return replace(self, elsewhere=True)

    @property
    def is_target(self) -> bool:
        return self.kind is StopKind.TARGET

    @property
    def is_interrupt(self) -> bool:
        return self.kind in (StopKind.INTERRUPTED, StopKind.TERMINATED)

    def __str__(self) -> str:
        text = self._words()
        return f"stopped by another worker: {text}" if self.elsewhere else text

    def _words(self) -> str:
        k, limit, reached = self.kind, self.limit, self.reached
        already = " already" if self.already else ""
        if k is StopKind.BUDGET:
            return f"budget of {int(limit or 0)} trials{already} used"
        if k is StopKind.TARGET:
            how = f" ({reached:.4g})" if reached is not None and not self.already else ""
            return f"target {limit:g}{already} reached by trial {self.trial}{how}"
        if k is StopKind.TIMEOUT:
            spent = f" ({reached:.0f} s)" if self.already and reached is not None else ""
            return f"time budget of {limit:g} s{already} used{spent}"
        if k is StopKind.PLATEAU:
            return (f"plateau: {int(reached or 0)} finished trials without an improvement of "
                    f"{limit:g} or more")
        if k is StopKind.LLM_BUDGET:
            return f"LLM spend ${reached:.4f} reached the budget of ${limit:g}"
        if k is StopKind.LLM_TOKENS:
            return f"LLM tokens {int(reached or 0):,} reached the budget of {int(limit or 0):,}"
        if k is StopKind.REPEATED_FAILURE:
            at = f" at {self.where}" if self.where else ""
            return (f"repeated failure: the last {int(limit or 0)} trials failed with the same "
                    f"error ({self.detail}){at}; this looks like a bug in the trainer. Fix it, "
                    "then run the same command to resume")
        if k is StopKind.INTERRUPTED:
            return "interrupted (Ctrl-C)"
        if k is StopKind.TERMINATED:
            return "interrupted (SIGTERM)"
        if k is StopKind.WORKERS:
            return "the workers stopped"
        return self.detail

    def to_record(self) -> dict[str, Any]:
        """As stored in the study (JSON)."""
        # Only what is set (`is`, not `in`: a trial numbered 0 is set).
        return {k: (str(v) if k == "kind" else v) for k, v in asdict(self).items()
                if v is not None and v is not False and v != ""}

    @classmethod
    def from_record(cls, value: Any) -> Stop | None:
        """What `to_record` stored; a text stored by a version before this type is kept as
        its words (kind `RECORDED`)."""
        if value is None or value == "":
            return None
        if isinstance(value, str):
            return cls(StopKind.RECORDED, detail=value)
        return cls(**{**value, "kind": StopKind(value["kind"])})
