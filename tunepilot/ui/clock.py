"""What a search over both built-in frameworks (`--trainer both`) says at its end: which
framework reached the best loss, which reached the target first, and what an epoch took on each.
Empty for a study whose space has no `framework`."""

from __future__ import annotations

import statistics

from tunepilot.memory import History
from tunepilot.memory.history import TrialRecord
from tunepilot.memory.text import plural


def framework_lines(history: History) -> list[str]:
    """One line per framework the study's trials ran, best first, then the one that reached
    the run's target first (where it set one and a trial reached it)."""
    by: dict[str, list[TrialRecord]] = {}
    for t in history:
        if t.state in ("complete", "pruned", "fail") and "framework" in t.params:
            by.setdefault(str(t.params["framework"]), []).append(t)
    best = {name: min((t for t in trials if t.value is not None),
                      key=lambda t: float(t.value or 0.0), default=None)
            for name, trials in by.items()}
    lines = []
    for name, top in sorted(best.items(), key=lambda kv: float("inf") if kv[1] is None
                            else float(kv[1].value or 0.0)):
        per_epoch = [t.own_s / len(t.curve) for t in by[name] if t.curve and t.own_s > 0]
        epoch = f", {statistics.median(per_epoch):.2f} s an epoch (median)" if per_epoch else ""
        said = (f"best {top.value:.4f} (trial {top.number})" if top is not None
                else "no trial completed")
        lines.append(f"framework {name}: {said}; {plural(len(by[name]), 'trial')}{epoch}")
    target = history.goal.get("target")
    if by and target is not None:
        spent = 0.0
        for t in history:
            if t.state not in ("complete", "pruned", "fail"):
                continue
            spent += t.own_s
            if t.value is not None and t.value <= target and "framework" in t.params:
                lines.append(f"target {target:g} first reached with {t.params['framework']} "
                             f"(trial {t.number}, after {spent:.0f} s of training)")
                break
    return lines
