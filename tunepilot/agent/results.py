"""What the agent hands back: a `Proposal` for ask/tell, a `TuneResult` at the end of a run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunepilot.agent.loop import REPEATED_FAILURE
from tunepilot.memory import History


class Proposal(dict[str, Any]):
    """A config from `Tuner.suggest()`: a plain dict, plus which trial it is, who proposed it
    ("llm", "optuna", "fallback", "human"...) and the LLM's reason, if it proposed it."""

    def __init__(self, config: Mapping[str, Any], *, number: int, proposer: str | None,
                 rationale: str | None):
        super().__init__(config)
        self.number = number
        self.proposer = proposer
        self.rationale = rationale

    def __repr__(self) -> str:
        why = f", rationale={self.rationale!r}" if self.rationale else ""
        return (f"Proposal(trial {self.number}, {dict(self)!r}, proposer={self.proposer!r}"
                f"{why})")


@dataclass(frozen=True)
class TuneResult:
    """What `Tuner.run` ended with. `stop_reason` says which rule stopped the search."""

    study_name: str
    stop_reason: str
    best_value: float | None
    best_params: Mapping[str, Any] | None
    best_number: int | None
    n_finished: int  # trials of the study that are done (all runs together)
    n_new: int  # trials this call ran
    target_reached: bool
    interrupted: bool  # by Ctrl-C or SIGTERM
    terminated: bool  # by SIGTERM
    history: History

    @property
    def failed_alike(self) -> bool:
        """Stopped by the repeated-failure rule: the trainer looks broken."""
        return self.stop_reason.startswith(REPEATED_FAILURE)

    @property
    def best_config(self) -> Mapping[str, Any] | None:
        """The best trial's config, fixed settings included."""
        return self.best_params

    @property
    def trials(self) -> Any:
        """Every trial of the study as a pandas DataFrame."""
        return self.history.to_frame()

    @classmethod
    def of(cls, study_name: str, history: History, fixed: Mapping[str, Any], reason: str,
           n_new: int = 0) -> TuneResult:
        """The study as `history` shows it, stopped for `reason`."""
        best = history.best_trial
        return cls(
            study_name=study_name,
            stop_reason=reason,
            best_value=best.value if best else None,
            best_params={**fixed, **best.params} if best else None,
            best_number=best.number if best else None,
            n_finished=len(history.finished()),
            n_new=n_new,
            target_reached=reason.startswith("target"),
            interrupted=reason.startswith("interrupted"),
            terminated=reason.startswith("interrupted (SIGTERM"),
            history=history,
        )
