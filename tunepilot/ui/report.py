"""The morning report: one self-contained HTML file (plots embedded as PNG) for a study.

Best config and value, the rule that stopped the last run, the optimization history coloured by
who proposed each trial, parameter importance, learning curves of the best trials, LLM usage
and cost, fallbacks and failures by cause, the agent's notes and the person's hints.
Rendered from ``templates/report.html.j2`` with autoescaping: whatever a model or a trainer
wrote appears as text, never as markup.
"""

from __future__ import annotations

import base64
import collections
import functools
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunepilot.memory import History
from tunepilot.memory.text import clip, format_params, plural
from tunepilot.ui import plots
from tunepilot.ui.clock import framework_lines
from tunepilot.ui.display import record_line, seconds

if TYPE_CHECKING:
    import jinja2
    import optuna


def write_report(study: optuna.Study, path: str | Path) -> Path:
    """Writes the report of `study` to `path` (HTML) and returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(study, History.from_study(study)), encoding="utf-8")
    return path


def render_html(study: optuna.Study, history: History) -> str:
    from tunepilot.memory.insights import of_study

    found = of_study(study, history)  # once: importance evaluates PED-ANOVA
    importance = dict(found.importance)
    best = history.best_trial
    states = collections.Counter(t.state for t in history)
    proposers = collections.Counter(t.proposer or "?" for t in history)
    trials = sorted(history, key=lambda t: (t.value is None, t.value or 0.0))[:30]
    return _template().render(
        study=study.study_name,
        stop=str(history.last_stop or "not recorded"),
        n_trials=len(history),
        states=", ".join(f"{n} {s}" for s, n in sorted(states.items())),
        proposers=", ".join(f"{n} {p}" for p, n in sorted(proposers.items())),
        best=best,
        best_config=[[k, f"{v:.4g}" if isinstance(v, float) else v]
                     for k, v in history.config_of(best).items()] if best else [],
        figures=_figures(study, history, importance),
        importance_note=None if importance else _importance_note(history),
        llm=_llm(history),
        failures=_failures(history),
        notes=history.notes,
        insights=found.lines() + framework_lines(history),
        hints=history.hints,
        trials=[[t.number, t.state, f"{t.value:.5f}" if t.value is not None else "-", t.proposer,
                 seconds(t).strip() or "-", format_params(t.params), clip(t.why, 100)]
                for t in trials],
    )


@functools.cache
def _template() -> jinja2.Template:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("tunepilot.ui", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report.html.j2")


def _figures(study: optuna.Study, history: History,
             importance: dict[str, float]) -> list[tuple[str, str]]:
    figures = [("Optimization history", plots.history_figure(history)),
               ("Loss against training seconds", plots.clock_figure(history))]
    if importance:  # drawn for the parameters the insights name (Optuna's plot evaluates again)
        figures.append(("Parameter importance (PED-ANOVA)",
                        plots.importance_figure(study, importance)))
    if any(t.curve for t in history.best(5)):
        figures.append(("Learning curves of the best trials", plots.curves_figure(history)))
    if len(history.completed()) >= 2:
        figures.append(("Configs of the completed trials", plots.parallel_figure(study)))
    return [(title, _png(fig)) for title, fig in figures]


def _importance_note(history: History) -> str:
    """Why the report has no importance figure."""
    from tunepilot.memory.insights import MIN_TRIALS_IMPORTANCE

    n, tuned = len(history.completed()), len({k for t in history for k in t.params})
    return (f"Parameter importance needs at least {MIN_TRIALS_IMPORTANCE} complete trials and 2 "
            f"tuned parameters; this study has {plural(n, 'complete trial')} of "
            f"{plural(tuned, 'tuned parameter')}.")


def _llm(history: History) -> dict[str, Any] | None:
    calls = history.llm_calls()
    if not calls:
        return None
    reasons = collections.Counter(str(t.fallback_reason or "")[:90] for t in history
                                  if t.proposer == "fallback")
    return {
        "models": ", ".join(sorted({str(c.model) for c in calls})),
        "calls": len(calls),
        "tokens_in": sum(c.tokens_in for c in calls),
        "tokens_out": sum(c.tokens_out for c in calls),
        "cost": history.llm_spend(),
        "latency": sum(c.latency_s or 0.0 for c in calls) / len(calls),
        "fallbacks": [[n, r] for r, n in reasons.most_common()],
        "record": record_line(history),
    }


def _failures(history: History) -> list[list[Any]]:
    kinds = collections.Counter((t.error or {}).get("kind", "?") for t in history.failures())
    examples: dict[str, str] = {}
    for t in history.failures():
        examples.setdefault((t.error or {}).get("kind", "?"),
                            (t.error or {}).get("message", "")[:120] + t.where)
    return [[k, n, examples[k]] for k, n in kinds.items()]


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode()

