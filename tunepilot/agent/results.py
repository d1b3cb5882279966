"""What the agent hands back: a `Proposal` for ask/tell, a `TuneResult` at the end of a run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunepilot.memory import History
from tunepilot.memory.stops import Stop, StopKind


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
    """What `Tuner.run` ended with. `stop` says which rule stopped the search (`stop_reason`,
    in words)."""

    study_name: str
    stop: Stop
    best_value: float | None
    best_params: Mapping[str, Any] | None
    best_number: int | None
    n_finished: int  # trials of the study that are done (all runs together)
    n_new: int  # trials this call ran
    history: History

    @property
    def stop_reason(self) -> str:
        return str(self.stop)

    @property
    def target_reached(self) -> bool:
        return self.stop.is_target

    @property
    def interrupted(self) -> bool:
        """By Ctrl-C or SIGTERM."""
        return self.stop.is_interrupt

    @property
    def terminated(self) -> bool:
        """By SIGTERM."""
        return self.stop.kind is StopKind.TERMINATED

    @property
    def failed_alike(self) -> bool:
        """Stopped by the repeated-failure rule: the trainer looks broken."""
        return self.stop.kind is StopKind.REPEATED_FAILURE

    @property
    def best_config(self) -> Mapping[str, Any] | None:
        """The best trial's config, fixed settings included."""
        return self.best_params

    @property
    def trials(self) -> Any:
        """Every trial of the study as a pandas DataFrame."""
        return self.history.to_frame()

    @classmethod
    def of(cls, study_name: str, history: History, fixed: Mapping[str, Any], stop: Stop,
           n_new: int = 0) -> TuneResult:
        """The study as `history` shows it, stopped by `stop`. The best config is the one its
        trial ran: its own fixed settings (epochs, seed...) where it recorded them, which a run
        with changed settings (`--accept-changes --epochs 2`) does not rewrite; `fixed` (this
        run's) for trials of releases that did not record them."""
        best = history.best_trial
        return cls(
            study_name=study_name,
            stop=stop,
            best_value=best.value if best else None,
            best_params={**(fixed if best.fixed is None else best.fixed), **best.params}
            if best else None,
            best_number=best.number if best else None,
            n_finished=len(history.finished()),
            n_new=n_new,
            history=history,
        )
