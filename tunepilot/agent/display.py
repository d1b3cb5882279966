"""What a person sees while a search runs.

`Display` has a do-nothing method per event; `PlainDisplay` prints one line per trial (logs,
CI, pipes); `LiveDisplay` keeps a small live panel on a terminal and prints a line per trial above
it, so the output stays readable however long the search runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from tunepilot.agent.tuner import TuneResult
    from tunepilot.memory import History, TrialRecord


class Display:
    """Receives the events of a run; every hook does nothing unless overridden."""

    def start(self, study: str, n_trials: int, history: History) -> None: ...

    def trial_start(self, number: int, config: Mapping[str, Any], proposer: str | None) -> None: ...

    def epoch(self, number: int, epoch: int, val_loss: float) -> None: ...

    def trial_end(self, record: TrialRecord | None, history: History) -> None: ...

    def waiting(self, running: list[int]) -> None:
        """The trial budget is taken; this worker waits for `running` (other workers' trials),
        in case one of them dies and its trial is queued again."""

    def finish(self, result: TuneResult) -> None: ...


def format_params(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_short(v)}" for k, v in params.items())


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def trial_line(record: TrialRecord, history: History) -> str:
    best = history.best_trial
    value = f"{record.value:.4f}" if record.value is not None else (
        f"{record.curve[-1]:.4f}" if record.curve else "-")
    mark = "*" if best is not None and best.number == record.number else " "
    state = record.state
    if record.state == "pruned":
        state = f"pruned@{len(record.curve)}"
    tail = ""
    if record.error:
        tail = f"  {record.error.get('kind')}: {record.error.get('message', '')[:80]}"
    duration = f"{record.duration_s:5.1f}s" if record.duration_s is not None else ""
    best_txt = f"best {best.value:.4f} (#{best.number})" if best else "best -"
    return (f"trial {record.number:>3} {mark} {state:<10} {value:>8}   {best_txt:<18} "
            f"[{record.proposer or '?'}] {duration}  {format_params(record.params)}{tail}")


class PlainDisplay(Display):
    """One line per trial, for logs and pipes."""

    def __init__(self, console: Console | None = None, prefix: str = ""):
        from rich.console import Console

        self.console = console or Console(highlight=False, soft_wrap=True)
        self.prefix = prefix  # e.g. "[w2] ": which worker printed the line
        self._waiting_for: list[int] | None = None

    def start(self, study: str, n_trials: int, history: History) -> None:
        done = len(history.finished())
        resumed = f" (resuming: {done} trials done)" if done else ""
        self.console.print(f"{self.prefix}study {study}: up to {n_trials} trials{resumed}",
                           markup=False)

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        if record is not None:
            self.console.print(self.prefix + trial_line(record, history), markup=False)

    def waiting(self, running: list[int]) -> None:
        if running != self._waiting_for:  # once per change, not per poll
            self._waiting_for = running
            self.console.print(f"{self.prefix}budget taken; waiting for running trials "
                               f"{', '.join(f'#{n}' for n in running)} (a killed one is re-run)",
                               markup=False)


class LiveDisplay(PlainDisplay):
    """A live status line (trial n of N, best so far, current epoch) under the trial lines."""

    def __init__(self, console: Console | None = None):
        super().__init__(console)
        from rich.live import Live

        self._live = Live(console=self.console, refresh_per_second=4, transient=True)
        self._n_trials = 0
        self._done = 0
        self._best = "-"
        self._current = ""
        self._started = 0.0

    def start(self, study: str, n_trials: int, history: History) -> None:
        super().start(study, n_trials, history)
        self._n_trials = n_trials
        self._done = len(history.finished())
        best = history.best_trial
        self._best = f"{best.value:.4f} (#{best.number})" if best else "-"
        self._live.start()
        self._refresh()

    def trial_start(self, number: int, config: Mapping[str, Any], proposer: str | None) -> None:
        self._started = time.monotonic()
        self._current = f"trial {number} [{proposer or '?'}] {format_params(config)}"
        self._refresh()

    def epoch(self, number: int, epoch: int, val_loss: float) -> None:
        elapsed = time.monotonic() - self._started
        self._current = (f"trial {number}: epoch {epoch}, val loss {val_loss:.4f}, "
                         f"{elapsed:.1f}s")
        self._refresh()

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        self._done = len(history.finished())
        best = history.best_trial
        self._best = f"{best.value:.4f} (#{best.number})" if best else "-"
        self._current = ""
        if record is not None:
            self._live.console.print(trial_line(record, history), markup=False)
        self._refresh()

    def finish(self, result: TuneResult) -> None:
        self._live.stop()

    def _refresh(self) -> None:
        from rich.text import Text

        line = f"[{self._done}/{self._n_trials}] best {self._best}"
        if self._current:
            line += f"  |  {self._current}"
        self._live.update(Text(line, style="bold cyan", overflow="ellipsis", no_wrap=True))


class Tee(Display):
    """Sends every event to each of `displays`."""

    def __init__(self, *displays: Display):
        self.displays = displays

    def start(self, study: str, n_trials: int, history: History) -> None:
        for d in self.displays:
            d.start(study, n_trials, history)

    def trial_start(self, number: int, config: Mapping[str, Any], proposer: str | None) -> None:
        for d in self.displays:
            d.trial_start(number, config, proposer)

    def epoch(self, number: int, epoch: int, val_loss: float) -> None:
        for d in self.displays:
            d.epoch(number, epoch, val_loss)

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        for d in self.displays:
            d.trial_end(record, history)

    def waiting(self, running: list[int]) -> None:
        for d in self.displays:
            d.waiting(running)

    def finish(self, result: TuneResult) -> None:
        for d in self.displays:
            d.finish(result)


class FileLog(Display):
    """The study's log file: who proposed each trial and why, its result or error."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with self.path.open("a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")

    def start(self, study: str, n_trials: int, history: History) -> None:
        self._write(f"run starts: study {study}, {len(history.finished())} of {n_trials} "
                    "trials done")

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        if record is None:
            return
        self._write(trial_line(record, history))
        why = record.rationale or record.user_attrs.get("fallback_reason")
        if why:
            self._write(f"    why: {why}")

    def finish(self, result: TuneResult) -> None:
        best = (f"best trial {result.best_number} ({result.best_value:.5f})"
                if result.best_value is not None else "no trial completed")
        self._write(f"run ends: {result.stop_reason}; {best}")


def console_display(console: Console | None = None) -> Display:
    """A live panel on a terminal, plain lines otherwise."""
    from rich.console import Console

    console = console or Console(highlight=False, soft_wrap=True)
    return LiveDisplay(console) if console.is_terminal else PlainDisplay(console)
