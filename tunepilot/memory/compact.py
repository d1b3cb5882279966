"""History compaction for prompts: a bounded summary however many trials a study holds.

The prompt shows the best k trials, recent failures with their cause, the most recent k of
the others, and every running trial (capped), each once, as one line with a learning-curve
summary. Its size depends on k, not on the number of trials (bench/agent.py measures it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tunepilot.memory.history import History
from tunepilot.memory.text import format_params, trial_line

BEST_K = 5
RECENT_K = 5
FAILURES_K = 4
RUNNING_K = 8


@dataclass(frozen=True)
class Compact:
    """What a prompt shows of the history, as ready-made lines."""

    n_finished: int
    n_complete: int
    n_running: int
    best: list[str]
    recent: list[str]
    failures: list[str]
    running: list[str]


def compact(history: History, params: Sequence[str], *, best_k: int = BEST_K,
            recent_k: int = RECENT_K, failures_k: int = FAILURES_K,
            running_k: int = RUNNING_K) -> Compact:
    best = history.best(best_k)
    failures = history.failures()[-failures_k:]
    shown = {t.number for t in (*best, *failures)}
    finished = history.finished()
    recent = [t for t in finished[-(recent_k + len(shown)):] if t.number not in shown][-recent_k:]
    return Compact(
        n_finished=len(finished),
        n_complete=len(history.completed()),
        n_running=len(history.running()),
        best=[trial_line(t, params) for t in best],
        recent=[trial_line(t, params) for t in recent],
        failures=[trial_line(t, params) for t in failures],
        running=[f"#{t.number} {format_params(t.params, params)}"
                 for t in history.running()[-running_k:] if t.params],
    )
