"""The live display of a run in Jupyter: one output area, updated in place.

Trial progress, the best so far, the running trial's learning curve (a small inline SVG) and
the latest trials with who proposed them and why. Updates are throttled (at most 2 a second,
and always when a trial ends), so a long search neither floods the cell nor slows the kernel.
Outside a notebook `Tuner` uses the terminal display instead (`auto_display`).
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tunepilot.agent.observer import Observer
from tunepilot.memory import History, TrialRecord
from tunepilot.memory.text import format_params, loss
from tunepilot.ui.display import console_display, record_line

if TYPE_CHECKING:
    from tunepilot.agent.results import TuneResult

_MIN_INTERVAL_S = 0.5
_ROWS = 8  # latest trials shown


def in_notebook() -> bool:
    """True inside a Jupyter kernel (not a plain IPython terminal)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def auto_display() -> Observer:
    """The notebook display in Jupyter, the terminal one (live or plain lines) elsewhere."""
    return NotebookDisplay() if in_notebook() else console_display()


class NotebookDisplay(Observer):
    def __init__(self) -> None:
        self._handle: Any = None
        self._last = 0.0
        self._study = ""
        self._n_trials = 0
        self._history = History()
        self._current: dict[str, Any] | None = None
        self._final: str | None = None
        self._said: list[str] = []  # the strategy line, notices: under the heading

    def start(self, study: str, n_trials: int, history: History) -> None:
        from IPython.display import HTML, display

        self._study, self._n_trials, self._history = study, n_trials, history
        self._final = None
        self._said = []
        self._handle = display(HTML(self._html()), display_id=True)
        self._last = time.monotonic()

    def trial_start(self, number: int, config: Mapping[str, Any], proposer: str | None) -> None:
        self._current = {"number": number, "config": dict(config), "proposer": proposer,
                         "curve": [], "started": time.monotonic()}
        self._update()

    def epoch(self, number: int, epoch: int, val_loss: float) -> None:
        if self._current is not None and self._current["number"] == number:
            self._current["curve"].append(val_loss)
        self._update()

    def trial_end(self, record: TrialRecord | None, history: History) -> None:
        self._history = history
        self._current = None
        self._update(force=True)

    def say(self, text: str) -> None:
        self._said.append(_e(text))
        self._update(force=True)

    def notice(self, text: str) -> None:
        self._said.append(f"&#9888; {_e(text)}")
        self._update(force=True)

    def finish(self, result: TuneResult) -> None:
        self._history = result.history
        self._current = None
        self._final = result.stop_reason
        self._update(force=True)

    def _update(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._handle is None or (not force and now - self._last < _MIN_INTERVAL_S):
            return
        from IPython.display import HTML

        self._handle.update(HTML(self._html()))
        self._last = now

    def _html(self) -> str:
        h = self._history
        best = h.best_trial
        done = len(h.finished())
        head = (f"<b>study {_e(self._study)}</b>: {done}/{self._n_trials} trials finished; "
                f"best " + (f"<b>{loss(best.value)}</b> (trial {best.number}, "
                            f"{_e(best.proposer or '?')})" if best else "-"))
        parts = [f"<div style='font-family:monospace;font-size:12px'>{head}"]
        parts += [f"<br>{line}" for line in self._said]
        record = record_line(h)
        if record:
            parts.append(f"<br>{_e(record)}")
        if self._final:
            parts.append(f"<br>stopped: {_e(self._final)}")
        cur = self._current
        if cur is not None:
            curve = cur["curve"]
            status = (f"epoch {len(curve)}, val loss {loss(curve[-1])}" if curve else "starting")
            parts.append(f"<br>running trial {cur['number']} [{_e(cur['proposer'] or '?')}] "
                         f"{_e(format_params(cur['config'], digits=3))}: {status}, "
                         f"{time.monotonic() - cur['started']:.0f} s "
                         + _sparkline(curve))
        rows = "".join(
            f"<tr><td>{t.number}</td><td>{t.state}</td><td>"
            f"{'' if t.value is None else f'{loss(t.value)}'}</td><td>{_e(t.proposer or '?')}</td>"
            f"<td>{_e(format_params(t.params, digits=3))}</td><td>{_e(_why(t))}</td></tr>"
            for t in list(h.finished())[-_ROWS:][::-1])
        if rows:
            parts.append("<table><tr><th>#</th><th>state</th><th>val loss</th><th>by</th>"
                         f"<th>config</th><th>why / error</th></tr>{rows}</table>")
        parts += [f"<br>&#9888; {_e(alert)}" for alert in _alerts(h)]
        parts.append("</div>")
        return "".join(parts)


def _alerts(history: History) -> tuple[str, ...]:
    """The history's alerts (the best trials at a bound of the space, OOMs, a plateau)."""
    from tunepilot.memory.insights import insights
    from tunepilot.space import SearchSpace

    saved = history.settings.get("space")
    if not saved:
        return ()
    try:
        return insights(history, SearchSpace.model_validate(saved)).alerts
    except Exception:  # a display never fails a search
        return ()


def _why(t: TrialRecord) -> str:
    return t.why[:90]


def _sparkline(curve: list[float], w: int = 120, h: int = 24) -> str:
    """The running trial's learning curve as a tiny inline SVG."""
    if len(curve) < 2:
        return ""
    lo, hi = min(curve), max(curve)
    span = (hi - lo) or 1.0
    step = w / (len(curve) - 1)
    points = " ".join(f"{i * step:.1f},{h - 2 - (v - lo) / span * (h - 4):.1f}"
                      for i, v in enumerate(curve))
    return (f"<svg width='{w}' height='{h}' style='vertical-align:middle'>"
            f"<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='{points}'/>"
            "</svg>")


def _e(value: Any) -> str:
    return html.escape(str(value))
