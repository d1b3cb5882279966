"""History compaction for prompts: a bounded summary however many trials a study holds.

The prompt shows the best k trials, the most recent k, recent failures with their cause,
and every running trial (capped), each as one line with a learning-curve summary. Its size
depends on k, not on the number of trials (bench/agent.py measures it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunepilot.memory.history import History, TrialRecord

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
    shown = {t.number for t in best}
    finished = history.finished()
    recent = [t for t in finished[-(recent_k + len(shown)):] if t.number not in shown][-recent_k:]
    return Compact(
        n_finished=len(finished),
        n_complete=len(history.completed()),
        n_running=len(history.running()),
        best=[trial_line(t, params) for t in best],
        recent=[trial_line(t, params) for t in recent],
        failures=[trial_line(t, params) for t in history.failures()[-failures_k:]],
        running=[f"#{t.number} {format_config(t.params, params)}"
                 for t in history.running()[-running_k:] if t.params],
    )


def trial_line(t: TrialRecord, params: Sequence[str]) -> str:
    config = format_config(t.params, params)
    if t.state == "complete" and t.value is not None:
        outcome = f"-> {t.value:.4f}"
    elif t.state == "pruned":
        last = f" at {t.curve[-1]:.4f}" if t.curve else ""
        outcome = f"-> pruned after epoch {len(t.curve)}{last}"
    elif t.state == "fail":
        error = t.error or {}
        outcome = f"-> FAILED ({error.get('kind', 'error')}: {error.get('message', '')[:120]})"
    else:
        outcome = f"-> {t.state}"
    shape = curve_shape(t.curve)
    proposer = f" [{t.proposer}]" if t.proposer else ""
    return f"#{t.number}{proposer} {config} {outcome}{f' ({shape})' if shape else ''}"


def format_config(values: Mapping[str, Any], params: Sequence[str]) -> str:
    return " ".join(f"{k}={_fmt(values[k])}" for k in params if k in values)


def curve_shape(curve: Sequence[float]) -> str:
    """'still falling at the last epoch', 'best at epoch 2 of 4, then rising', 'diverged'..."""
    if not curve:
        return ""
    if any(not math.isfinite(v) for v in curve):
        first = next(i for i, v in enumerate(curve, 1) if not math.isfinite(v))
        return f"diverged at epoch {first}"
    if len(curve) == 1:
        return f"1 epoch: {curve[0]:.4f}"
    values = " ".join(f"{v:.3f}" for v in curve[:6]) + (" ..." if len(curve) > 6 else "")
    best = min(range(len(curve)), key=curve.__getitem__)
    spread = max(curve) - min(curve)
    if spread < 1e-3:
        return f"curve {values}: flat"
    if best == len(curve) - 1:
        return f"curve {values}: still falling at the last epoch"
    return f"curve {values}: best at epoch {best + 1} of {len(curve)}, then rising"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
