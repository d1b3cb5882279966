"""What the whole history says, in a few lines however many trials a study holds.

Which parameters matter (Optuna's PED-ANOVA importance evaluator), the range each parameter
spans among the best 20% of trials, and alerts a person or the agent should act on: the best
trials pressed against a bound of the space, trials that ran out of memory or diverged, a long
stretch without improvement. The prompt, `tune show`, the report and the notebook read the same
`Insights`, so a person learns from them with any model or none.

The size of `Insights.lines()` depends on the number of parameters, not of trials; importance is
recomputed when the number of complete trials has grown by a tenth (bench/agent.py measures the
cost per trial).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunepilot.memory.text import fmt
from tunepilot.space import Categorical, Float, Int

if TYPE_CHECKING:
    import optuna

    from tunepilot.memory.history import History, TrialRecord
    from tunepilot.space import SearchSpace

MIN_TRIALS = 5  # complete trials before ranges and alerts say anything
MIN_TRIALS_IMPORTANCE = 10  # ... and before importance does
TOP_SHARE = 0.2  # "the best 20% of trials"
NEAR_BOUND = 0.05  # within 5% of the (log) range from a bound counts as "at the bound"
MAX_ALERTS = 4

_IMPORTANCE: dict[tuple[Any, ...], tuple[int, dict[str, float]]] = {}


@dataclass(frozen=True, repr=False)
class Insights:
    n_complete: int
    importance: Mapping[str, float] = field(default_factory=dict)  # shares summing to 1
    ranges: Mapping[str, str] = field(default_factory=dict)  # what the best 20% span
    n_top: int = 0  # how many trials "the best 20%" are
    alerts: tuple[str, ...] = ()

    def lines(self, ranges: bool = True) -> list[str]:
        """The insights as a few lines of text (the prompt, `tune show`); without the best
        trials' span where the prompt gives the sampler's own (TPE's good group)."""
        out = []
        if self.importance:
            ranked = sorted(self.importance.items(), key=lambda kv: -kv[1])
            out.append(f"Importance (Optuna PED-ANOVA, from {self.n_complete} complete trials): "
                       + ", ".join(f"{k} {v:.0%}" for k, v in ranked))
        if ranges and self.ranges:
            share = self.n_top / self.n_complete if self.n_complete else 1.0
            out.append(f"Best {self.n_top} of {self.n_complete} complete trials (top {share:.0%}) "
                       "span: "
                       + "; ".join(f"{k} {v}" for k, v in self.ranges.items()))
        out += [f"Alert: {a}" for a in self.alerts]
        return out

    def __repr__(self) -> str:  # what a notebook shows for `tuner.insights()`: tune show's lines
        return "\n".join(self.lines()) or (
            f"Nothing to say yet from {self.n_complete} complete trials (importance from "
            f"{MIN_TRIALS_IMPORTANCE}, the best 20% from {MIN_TRIALS}).")


def insights(history: History, space: SearchSpace, study: optuna.Study | None = None) -> Insights:
    """What `history` says about `space`; importance needs the Optuna `study`."""
    complete = history.completed()
    if len(complete) < MIN_TRIALS:
        return Insights(len(complete), alerts=tuple(_failure_alerts(history, space)))
    ranked = history.best(len(complete))
    top = ranked[:max(3, math.ceil(TOP_SHARE * len(ranked)))]
    ranges = {name: _span(name, p, top) for name, p in space.params.items()}
    alerts = (_bound_alerts(ranked[:5], space) + _failure_alerts(history, space)
              + _plateau_alert(history))
    return Insights(len(complete), importance=_importance(study, complete, space),
                    ranges={k: v for k, v in ranges.items() if v},
                    n_top=len(top), alerts=tuple(alerts[:MAX_ALERTS]))


def of_study(study: optuna.Study, history: History | None = None) -> Insights:
    """The insights of a stored study, its space read from the study (tunepilot's settings, or
    the distributions of a plain Optuna study's trials)."""
    from tunepilot.memory.history import History
    from tunepilot.space import SearchSpace

    history = history or History.from_study(study)
    saved = history.settings.get("space")
    try:
        space = SearchSpace.model_validate(saved) if saved else SearchSpace.from_distributions(
            {k: v for t in study.get_trials(deepcopy=False) for k, v in t.distributions.items()})
    except Exception:  # a space this release cannot read: say nothing rather than fail a face
        return Insights(len(history.completed()))
    return insights(history, space, study)


def _importance(study: optuna.Study | None, complete: Sequence[TrialRecord],
                space: SearchSpace) -> dict[str, float]:
    if study is None or len(complete) < MIN_TRIALS_IMPORTANCE:
        return {}
    key = (id(study._storage), study._study_id, tuple(space.params))
    cached = _IMPORTANCE.get(key)
    n = len(complete)
    if cached is not None and cached[0] <= n < cached[0] * 1.1 + 1:
        return cached[1]
    names = [n for n in space.params if all(n in t.params for t in complete)]
    if len(names) < 2:
        return {}
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "too few trials", experimental-API warnings
            found = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(),
                                          params=names, normalize=True)
    except Exception:  # an analysis must never stop a search
        return cached[1] if cached else {}
    values = {k: float(v) for k, v in found.items() if math.isfinite(v)}
    if len(_IMPORTANCE) > 1000:
        _IMPORTANCE.clear()
    _IMPORTANCE[key] = (n, values)
    return values


def _span(name: str, p: Any, top: Sequence[TrialRecord]) -> str:
    values = [t.params[name] for t in top if name in t.params]
    if not values:
        return ""
    if isinstance(p, Categorical) or not all(isinstance(v, (int, float)) for v in values):
        counts: dict[Any, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        common = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
        return ", ".join(f"{fmt(v, 3)} ({c})" for v, c in common)
    low, high = min(values), max(values)
    return (f"{fmt(low, 3)}" if low == high else f"{fmt(low, 3)} to {fmt(high, 3)}") + \
        f" (space {fmt(p.low, 3)} to {fmt(p.high, 3)})"


def _position(p: Float | Int, value: float) -> float:
    """Where `value` lies in the parameter's range, 0 (low) to 1 (high), on its own scale."""
    if p.log and min(value, p.low) > 0:
        return math.log(value / p.low) / math.log(p.high / p.low)
    return (value - p.low) / ((p.high - p.low) or 1.0)


def _bound_alerts(best: Sequence[TrialRecord], space: SearchSpace) -> list[str]:
    alerts = []
    for name, p in space.params.items():
        if not isinstance(p, (Float, Int)):
            continue
        values = [t.params[name] for t in best if isinstance(t.params.get(name), (int, float))]
        if len(values) < min(3, len(best)) or not values:
            continue
        where = [_position(p, float(v)) for v in values]
        for side, bound, near in (("upper", p.high, all(w >= 1 - NEAR_BOUND for w in where)),
                                  ("lower", p.low, all(w <= NEAR_BOUND for w in where))):
            if near:
                alerts.append(f"the best {len(values)} trials all have {name} at the {side} "
                              f"bound of the space ({fmt(bound, 3)}): the optimum may lie "
                              "beyond it; consider widening the range")
    return alerts


def _failure_alerts(history: History, space: SearchSpace) -> list[str]:
    alerts = []
    by_kind: dict[str, list[TrialRecord]] = {}
    for t in history.failures():
        by_kind.setdefault(str((t.error or {}).get("kind", "error")), []).append(t)
    oom = by_kind.get("oom", [])
    if len(oom) >= 2:
        alerts.append(f"{len(oom)} trials ran out of memory ("
                      + ", ".join(f"#{t.number}" for t in oom[-3:])
                      + _smallest(oom, space) + ")")
    diverged = by_kind.get("diverged", [])
    if len(diverged) >= 2:
        alerts.append(f"{len(diverged)} trials diverged (" + ", ".join(
            f"#{t.number}" for t in diverged[-3:]) + _smallest(diverged, space) + ")")
    return alerts


def _smallest(trials: Sequence[TrialRecord], space: SearchSpace) -> str:
    """For the numeric parameters where every one of `trials` lies in the upper third of its
    range (a learning rate too high, a batch too big): ``; all with lr >= 0.03``."""
    parts = []
    for name, p in space.params.items():
        values = [t.params[name] for t in trials if isinstance(t.params.get(name), (int, float))
                  and not isinstance(t.params.get(name), bool)]
        if not values or len(values) < len(trials):
            continue
        if isinstance(p, Categorical):  # ordered numeric choices: 256, 512, ... 4096
            choices = list(p.choices)
            if not all(isinstance(c, (int, float)) for c in choices) or len(choices) < 3:
                continue
            order = sorted(choices)
            where = [order.index(v) / (len(order) - 1) for v in values if v in order]
        else:
            where = [_position(p, float(v)) for v in values]
        if len(where) == len(values) and all(w >= 2 / 3 for w in where):
            parts.append(f"{name} >= {fmt(min(values), 3)}")
    return f"; all with {', '.join(parts[:2])}" if parts else ""


def _plateau_alert(history: History) -> list[str]:
    finished = history.finished()
    best = history.best_trial
    if best is None or len(finished) < 20:
        return []
    since = sum(1 for t in finished if t.number > best.number)
    if since >= max(10, len(finished) // 3):
        return [f"no improvement in the last {since} trials (the best is still #{best.number}): "
                "consider narrowing the space around it, or stopping"]
    return []
