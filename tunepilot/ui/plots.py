"""Plots of a study as matplotlib figures: for `Tuner.plot` in a notebook and the HTML report.

matplotlib, not Optuna's plotly figures: a matplotlib figure renders inline in Jupyter, in the
report file and in a notebook executed in CI with no browser and no JavaScript (plotly's need
one, or kaleido with a headless Chrome to become images). Where Optuna's matplotlib
visualizations draw what we want (importance, parallel coordinates) they are used as they are;
our own remain where Optuna has none: the history coloured by who proposed each trial, and the
learning curves of the best few trials and the running one (Optuna's draws every trial's).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tunepilot.errors import ConfigError, did_you_mean
from tunepilot.memory import History

if TYPE_CHECKING:
    import optuna
    from matplotlib.figure import Figure

KINDS = ("history", "importance", "curves", "parallel")
COLORS = {"llm": "#1f77b4", "fallback": "#ff7f0e", "optuna": "#2ca02c", "enqueued": "#9467bd",
          "human": "#8c564b"}


def plot(study: optuna.Study, kind: str = "history") -> Figure:
    """A figure of `study`: "history" (loss per trial by proposer, best so far), "importance"
    (PED-ANOVA), "curves" (per-epoch losses of the best trials), "parallel" (each completed
    trial's config as a line, coloured by its loss)."""
    if kind == "history":
        return history_figure(History.from_study(study))
    if kind == "importance":
        return importance_figure(study)
    if kind == "curves":
        return curves_figure(History.from_study(study))
    if kind == "parallel":
        return parallel_figure(study)
    raise ConfigError(f"Unknown plot {kind!r}; expected one of {', '.join(KINDS)}."
                      f"{did_you_mean(kind, KINDS)}")


def importance(study: optuna.Study) -> dict[str, float]:
    """Each parameter's importance by Optuna's PED-ANOVA evaluator, the figures the prompts,
    `tune show` and the report's insights give; empty while there is too little to say."""
    from tunepilot.memory.insights import of_study

    return dict(of_study(study).importance)


def history_figure(history: History) -> Figure:
    fig, ax = _figure()
    done = history.completed()
    for proposer in sorted({t.proposer or "?" for t in done}):
        pts = [t for t in done if (t.proposer or "?") == proposer]
        ax.scatter([t.number for t in pts], [t.value for t in pts], s=22,
                   color=COLORS.get(proposer, "#7f7f7f"), label=proposer)
    best, xs, ys = float("inf"), [], []
    for t in sorted(done, key=lambda t: t.number):
        best = min(best, t.value if t.value is not None else best)
        xs.append(t.number)
        ys.append(best)
    ax.step(xs, ys, where="post", color="black", linewidth=1.2, label="best so far")
    ax.set_title("optimization history")
    ax.set_xlabel("trial")
    ax.set_ylabel("validation loss")
    if done:
        # Beside the axes, never over a trial's point.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0)
    return _done(fig)


def importance_figure(study: optuna.Study, found: dict[str, float] | None = None) -> Figure:
    """Optuna's importance plot of the PED-ANOVA figures (`importance`, or `found` when the
    caller has them); a note while there is too little to say."""
    from tunepilot.memory.insights import MIN_TRIALS_IMPORTANCE

    found = importance(study) if found is None else found
    if not found:
        fig, ax = _figure()
        ax.set_title(f"parameter importance: needs {MIN_TRIALS_IMPORTANCE} completed trials "
                     "and 2 parameters")
        return _done(fig)
    from optuna.importance import PedAnovaImportanceEvaluator
    from optuna.visualization.matplotlib import plot_param_importances

    return _optuna_figure(lambda: plot_param_importances(
        study, evaluator=PedAnovaImportanceEvaluator(), params=list(found)))


def parallel_figure(study: optuna.Study) -> Figure:
    """Optuna's parallel coordinates: one axis per parameter, one line per completed trial."""
    from optuna.visualization.matplotlib import plot_parallel_coordinate

    fig = _optuna_figure(lambda: plot_parallel_coordinate(study))
    _no_white_lines(fig)
    return fig


def _no_white_lines(fig: Figure) -> None:
    """Optuna colours the lines from white to dark blue by value: the worst trial's line is
    white on white. The same scale without its palest colours keeps every line in sight."""
    import numpy as np
    from matplotlib.collections import LineCollection
    from matplotlib.colors import ListedColormap

    for ax in fig.axes:
        for lines in ax.collections:
            if not isinstance(lines, LineCollection) or lines.get_array() is None:
                continue
            colors = lines.get_cmap()(np.linspace(0.0, 1.0, 256))
            seen = colors[colors[:, :3].mean(axis=1) < 0.75]  # what shows on white
            lines.set_cmap(ListedColormap(seen))
            if lines.colorbar is not None:
                lines.colorbar.update_normal(lines)


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
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0)
    return _done(fig)


def clock_figure(history: History) -> Figure:
    """Each finished trial's loss against the training seconds spent by its end (the trials'
    own seconds added up in number order, a stopped one's partial time included), and the best
    so far: what the search bought per hour. Trials are coloured by framework where the space
    chose one."""
    fig, ax = _figure()
    spent, best, xs, ys = 0.0, float("inf"), [], []
    points: dict[str, list[tuple[float, float]]] = {}
    for t in history:
        if t.state not in ("complete", "pruned", "fail"):
            continue
        spent += t.own_s
        value = t.value if t.value is not None else (t.curve[-1] if t.curve else None)
        if value is None:
            continue
        points.setdefault(str(t.params.get("framework", t.state)), []).append((spent, value))
        if t.state == "complete" and value < best:
            best = value
        if best < float("inf"):
            xs.append(spent)
            ys.append(best)
    for i, (name, pts) in enumerate(sorted(points.items())):
        ax.scatter(*zip(*pts, strict=True), s=22, label=name, color=f"C{i}")
    if xs:
        ax.step(xs, ys, where="post", color="black", linewidth=1.2, label="best so far")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0)
    ax.set_title("loss against training seconds")
    ax.set_xlabel("training seconds spent (the trials' own, added up)")
    ax.set_ylabel("validation loss")
    return _done(fig)


def _figure() -> tuple[Figure, Any]:
    from matplotlib.figure import Figure

    # A bare Figure, not pyplot: nothing is registered with a GUI backend, nothing leaks
    # between calls, and Jupyter still renders a returned Figure inline.
    fig = Figure(figsize=(9, 4), dpi=100)
    return fig, fig.add_subplot()


def _optuna_figure(draw: Callable[[], Any]) -> Figure:
    """The figure an Optuna matplotlib plot drew on, taken off pyplot's list (so Jupyter shows
    the returned figure once, and a long session does not collect open figures)."""
    import matplotlib.pyplot as plt

    with _quiet():
        ax = draw()
    fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
    fig.set_size_inches(9, 4)
    plt.close(fig)
    fig.tight_layout()
    return fig


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", UserWarning)  # tight_layout on busy axes
        yield


def _done(fig: Figure) -> Figure:
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:
        if ax.get_xlabel() in ("trial", "epoch"):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig
