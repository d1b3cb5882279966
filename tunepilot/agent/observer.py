"""What the run loop tells whoever watches it: the observer protocol, and the faces' hooks.

The agent never imports a face. A face (the terminal and notebook displays, the log file)
subclasses `Observer`, overriding the hooks it needs (each does nothing by default), and is
handed to the `Tuner`. What the notebook API forwards to a face (the display picked by
``display="auto"``, `Tuner.plot`) is registered by the faces package when it is imported, which
``import tunepilot`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from tunepilot.agent.results import TuneResult
    from tunepilot.memory import History, TrialRecord


class Observer:
    """Receives the events of a run; every hook does nothing unless overridden."""

    def start(self, study: str, n_trials: int, history: History) -> None: ...

    def trial_start(self, number: int, config: Mapping[str, Any], proposer: str | None) -> None: ...

    def epoch(self, number: int, epoch: int, val_loss: float) -> None: ...

    def trial_end(self, record: TrialRecord | None, history: History) -> None: ...

    def say(self, text: str) -> None:
        """One of the lines a run starts with, said plainly: which strategy and sampler, and
        why (a notebook's `Tuner` says them here; `tune run` prints its own first)."""

    def notice(self, text: str) -> None:
        """Something a person should hear once, as it happens (the LLM became unreachable,
        was switched off, answers again); the search goes on."""

    def waiting(self, running: list[int]) -> None:
        """The trial budget is taken; this worker waits for `running` (other workers' trials),
        in case one of them dies and its trial is queued again."""

    def finish(self, result: TuneResult) -> None: ...


class Tee(Observer):
    """Sends every event to each of `observers`."""

    def __init__(self, *observers: Observer):
        self.observers = observers

    def start(self, study: str, n_trials: int, history: History) -> None:
        for o in self.observers:
            o.start(study, n_trials, history)

    def trial_start(self, number: int, config: Mapping[str, Any], proposer: str | None) -> None:
        for o in self.observers:
            o.trial_start(number, config, proposer)

    def epoch(self, number: int, epoch: int, val_loss: float) -> None:
        for o in self.observers:
            o.epoch(number, epoch, val_loss)

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        for o in self.observers:
            o.trial_end(record, history)

    def say(self, text: str) -> None:
        for o in self.observers:
            o.say(text)

    def notice(self, text: str) -> None:
        for o in self.observers:
            o.notice(text)

    def waiting(self, running: list[int]) -> None:
        for o in self.observers:
            o.waiting(running)

    def finish(self, result: TuneResult) -> None:
        for o in self.observers:
            o.finish(result)


class Faces:
    """What the faces package registers (`register`) for the agent's notebook API."""

    auto_display: Callable[[], Observer] | None = None  # display="auto"
    plot: Callable[[optuna.Study, str], Any] | None = None  # Tuner.plot


def register(*, auto_display: Callable[[], Observer],
             plot: Callable[[optuna.Study, str], Any]) -> None:
    Faces.auto_display = auto_display
    Faces.plot = plot


def auto_display() -> Observer:
    """The display the faces chose for this process (notebook or terminal); silent without."""
    return Faces.auto_display() if Faces.auto_display is not None else Observer()
