"""Plots of a study as matplotlib figures: for `Tuner.plot` in a notebook and the HTML report.

matplotlib, not Optuna's plotly figures: a matplotlib figure renders inline in Jupyter, in the
report file and in a notebook executed in CI with no browser and no JavaScript (plotly's need
one, or kaleido with a headless Chrome to become images).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunepilot.memory import History

if TYPE_CHECKING:
    import optuna
    from matplotlib.figure import Figure

KINDS = ("history", "importance", "curves", "parallel")
COLORS = {"llm": "#1f77b4", "fallback": "#ff7f0e", "optuna": "#2ca02c", "enqueued": "#9467bd",
          "human": "#8c564b"}


def plot(study: optuna.Study, kind: str = "history") -> Figure:
    """A figure of `study`: "history" (loss per trial by proposer, best so far), "importance"
    (fANOVA), "curves" (per-epoch losses of the best trials), "parallel" (each completed
    trial's config as a line, coloured by its loss)."""
    from tunepilot.errors import ConfigError, did_you_mean

    history = History.from_study(study)
    if kind == "history":
        return history_figure(history)
    if kind == "importance":
        return importance_figure(importance(study))
    if kind == "curves":
        return curves_figure(history)
    if kind == "parallel":
        return parallel_figure(history)
    raise ConfigError(f"Unknown plot {kind!r}; expected one of {', '.join(KINDS)}."
                      f"{did_you_mean(kind, KINDS)}")


def importance(study: optuna.Study) -> dict[str, float]:
    """fANOVA importance of each parameter; empty while there is too little to say."""
    import optuna

    complete = [t for t in study.get_trials(deepcopy=False)
                if t.state == optuna.trial.TrialState.COMPLETE]
    if len(complete) < 3 or len(complete[0].params) < 2:
        return {}
    try:
        return optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):  # e.g. every trial has the same value
        return {}


def history_figure(history: History) -> Figure:
    fig, ax = _figure()
    done = history.completed()
    for proposer in sorted({t.proposer or "?" for t in done}):
        pts = [t for t in done if (t.proposer or "?") == proposer]
        ax.scatter([t.number for t in pts], [t.value for t in pts], s=22,
                   color=COLORS.get(proposer, "#7f7f7f"), label=proposer)
    best, xs, ys = float("inf"), [], []
    for t in sorted(done, key=lambda t: t.number):
        best = min(best, t.value)
        xs.append(t.number)
        ys.append(best)
    ax.step(xs, ys, where="post", color="black", linewidth=1.2, label="best so far")
    ax.set_title("optimization history")
    ax.set_xlabel("trial")
    ax.set_ylabel("validation loss")
    if done:
        ax.legend(loc="upper right", fontsize=8)
    return _done(fig)


def importance_figure(values: dict[str, float]) -> Figure:
    fig, ax = _figure()
    names = list(values)[::-1]
    ax.barh(names, [values[n] for n in names], color="#1f77b4")
    ax.set_title("parameter importance (fANOVA)" if values else
                 "parameter importance: needs 3 completed trials and 2 parameters")
    ax.set_xlabel("share of the variance of the validation loss")
    return _done(fig)


def curves_figure(history: History, k: int = 5) -> Figure:
    fig, ax = _figure()
    shown = [t for t in history.best(k) if t.curve]
    running = [t for t in history.running() if t.curve]
    for t in shown:
        ax.plot(range(1, len(t.curve) + 1), t.curve, marker="o", label=f"#{t.number}")
    for t in running:
        ax.plot(range(1, len(t.curve) + 1), t.curve, marker="o", linestyle="--",
                label=f"#{t.number} (running)")
    ax.set_title(f"learning curves of the best {len(shown)} trials")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation loss")
    if shown or running:
        ax.legend(fontsize=8)
    return _done(fig)


def parallel_figure(history: History) -> Figure:
    """Parallel coordinates: one vertical axis per parameter (log axes for log-looking ranges,
    categories spread evenly), one line per completed trial, darker = lower loss."""
    import math

    import matplotlib

    fig, ax = _figure()
    done = history.completed()
    names = sorted({k for t in done for k in t.params})
    if not done or not names:
        ax.set_title("parallel coordinates: no completed trial yet")
        return _done(fig)

    def scaler(name: str) -> tuple[Any, list[str]]:
        values = [t.params.get(name) for t in done if name in t.params]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            lo, hi = min(values), max(values)
            log = lo > 0 and hi / lo > 100
            f = (lambda v: math.log10(v)) if log else (lambda v: v)
            a, b = f(lo), f(hi)
            span = (b - a) or 1.0
            label = (lambda v: str(v)) if all(isinstance(v, int) for v in values) else (
                lambda v: f"{v:.3g}")
            return (lambda v: (f(v) - a) / span), [label(lo), label(hi)]
        choices = sorted({repr(v) for v in values})
        where = {c: i / max(1, len(choices) - 1) for i, c in enumerate(choices)}
        return (lambda v: where[repr(v)]), choices

    scales = {n: scaler(n) for n in names}
    values = [t.value for t in done]
    lo, hi = min(values), max(values)
    cmap = matplotlib.colormaps["viridis_r"]
    for t in sorted(done, key=lambda t: -t.value):  # best drawn last, on top
        ys = [scales[n][0](t.params[n]) if n in t.params else math.nan for n in names]
        shade = (t.value - lo) / ((hi - lo) or 1.0)
        ax.plot(range(len(names)), ys, color=cmap(1 - shade), alpha=0.8,
                linewidth=2.5 if t.value == lo else 1.0)
    for i, n in enumerate(names):
        ax.axvline(i, color="#999999", linewidth=0.8)
        labels = scales[n][1]
        ax.text(i, -0.08, labels[0], ha="center", va="top", fontsize=7)
        ax.text(i, 1.05, labels[-1], ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks([])
    ax.set_ylim(-0.2, 1.2)
    ax.set_title(f"parallel coordinates (darker = lower loss; best {lo:.4g})")
    return _done(fig)


def _figure() -> tuple[Figure, Any]:
    from matplotlib.figure import Figure

    # A bare Figure, not pyplot: nothing is registered with a GUI backend, nothing leaks
    # between calls, and Jupyter still renders a returned Figure inline.
    fig = Figure(figsize=(9, 4), dpi=100)
    return fig, fig.add_subplot()


def _done(fig: Figure) -> Figure:
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:
        if ax.get_xlabel() in ("trial", "epoch"):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig
