"""The morning report: one self-contained HTML file (plots embedded as PNG) for a study.

Best config and value, the rule that stopped the last run, the optimization history coloured by
who proposed each trial, parameter importance, learning curves of the best trials, LLM usage
and cost, fallbacks and failures by cause, the agent's notes and the person's hints.
"""

from __future__ import annotations

import base64
import collections
import html
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunepilot.agent import plots
from tunepilot.memory import History, attrs

if TYPE_CHECKING:
    import optuna

def write_report(study: optuna.Study, path: str | Path) -> Path:
    """Writes the report of `study` to `path` (HTML) and returns the path."""
    history = History.from_study(study)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(study, history), encoding="utf-8")
    return path


def render_html(study: optuna.Study, history: History) -> str:
    best = history.best_trial
    stop = study.user_attrs.get(attrs.LAST_STOP, "not recorded")
    settings = study.user_attrs.get(attrs.SETTINGS) or {}
    fixed = (settings.get("space") or {}).get("fixed", {})
    states = collections.Counter(t.state for t in history)
    proposers = collections.Counter(t.proposer or "?" for t in history)
    parts = [
        f"<h1>tunepilot report: {_e(study.study_name)}</h1>",
        f"<p><b>Stopped:</b> {_e(stop)}<br><b>Trials:</b> {len(history)} ("
        + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
        + ")<br><b>Proposed by:</b> "
        + ", ".join(f"{n} {p}" for p, n in sorted(proposers.items())) + "</p>",
    ]
    if best is not None:
        config = {**fixed, **best.params}
        parts.append(f"<h2>Best: trial {best.number}, validation loss {best.value:.5f}</h2>"
                     + _table(["parameter", "value"], [[k, v] for k, v in config.items()]))
        if best.rationale:
            parts.append(f"<p><i>Why the agent proposed it:</i> {_e(best.rationale)}</p>")
    parts.append("<h2>Optimization history</h2>" + _img(_png(plots.history_figure(history))))
    importance = plots.importance(study)
    if importance:
        parts.append("<h2>Parameter importance (fANOVA)</h2>"
                     + _img(_png(plots.importance_figure(importance))))
    if any(t.curve for t in history.best(5)):
        parts.append("<h2>Learning curves of the best trials</h2>"
                     + _img(_png(plots.curves_figure(history))))
    if len(history.completed()) >= 2:
        parts.append("<h2>Configs of the completed trials</h2>"
                     + _img(_png(plots.parallel_figure(history))))
    parts.append(_llm_section(history))
    parts.append(_failures_section(history))
    if history.notes:
        parts.append(f"<h2>The agent's notes</h2><pre>{_e(history.notes)}</pre>")
    if history.hints:
        parts.append("<h2>Hints from the person</h2><ul>"
                     + "".join(f"<li>{_e(h)}</li>" for h in history.hints) + "</ul>")
    rows = [[t.number, t.state, f"{t.value:.5f}" if t.value is not None else "-", t.proposer,
             " ".join(f"{k}={_short(v)}" for k, v in t.params.items()), (t.rationale or "")[:100]]
            for t in sorted(history, key=lambda t: (t.value is None, t.value or 0.0))[:30]]
    parts.append("<h2>Trials (best 30)</h2>"
                 + _table(["#", "state", "val loss", "by", "config", "rationale"], rows))
    style = ("body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 8px;text-align:left}img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>tunepilot: "
            f"{_e(study.study_name)}</title><style>{style}</style></head><body>"
            + "\n".join(parts) + "</body></html>")


def _llm_section(history: History) -> str:
    calls = [t.user_attrs.get(attrs.LLM) for t in history if t.user_attrs.get(attrs.LLM)]
    if not calls:
        return "<h2>LLM usage</h2><p>No LLM was used.</p>"
    tokens_in = sum(c.get("tokens_in", 0) for c in calls)
    tokens_out = sum(c.get("tokens_out", 0) for c in calls)
    cost = sum(c.get("cost_usd") or 0.0 for c in calls)
    latency = sum(c.get("latency_s", 0.0) for c in calls) / len(calls)
    models = ", ".join(sorted({str(c.get("model")) for c in calls}))
    reasons = collections.Counter(
        str(t.user_attrs.get(attrs.FALLBACK_REASON, ""))[:90] for t in history
        if t.proposer == "fallback")
    text = (f"<h2>LLM usage</h2><p>Model: {_e(models)}; {len(calls)} trials asked the model; "
            f"{tokens_in:,} tokens in, {tokens_out:,} out; cost ${cost:.4f}; mean latency "
            f"{latency:.2f} s per trial.</p>")
    if reasons:
        text += "<h3>Fallbacks to Optuna, by cause</h3>" + _table(
            ["trials", "cause"], [[n, r] for r, n in reasons.most_common()])
    return text


def _failures_section(history: History) -> str:
    kinds = collections.Counter((t.error or {}).get("kind", "?") for t in history.failures())
    if not kinds:
        return "<h2>Failures</h2><p>None.</p>"
    examples = {}
    for t in history.failures():
        examples.setdefault((t.error or {}).get("kind", "?"), (t.error or {}).get("message", ""))
    return "<h2>Failures by kind</h2>" + _table(
        ["kind", "trials", "example"], [[k, n, examples[k][:120]] for k, n in kinds.items()])


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _img(png: bytes) -> str:
    return f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _e(value: Any) -> str:
    return html.escape(str(value))
