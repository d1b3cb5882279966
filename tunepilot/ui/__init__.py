"""The faces: the `tune` CLI, the terminal and notebook displays, the HTML report and plots.

They call the agent and print; nothing lives only here. Importing this package registers the
faces the agent's notebook API forwards to (``Tuner(display="auto")`` and `Tuner.plot`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunepilot.agent import observer

if TYPE_CHECKING:
    import optuna


def _auto_display() -> observer.Observer:
    from tunepilot.ui.notebook import auto_display

    return auto_display()


def _plot(study: optuna.Study, kind: str) -> Any:
    from tunepilot.ui import plots

    return plots.plot(study, kind)


def _quiet_progress_bars() -> None:
    """In a Jupyter kernel without ipywidgets, importing Optuna warns "IProgress not found"
    (its progress bar's `tqdm.auto`, which tunepilot never shows: the notebook display is its
    own). Optuna is imported here first, under a filter for that one warning; elsewhere there
    is no kernel, no warning and nothing to import ahead."""
    import sys
    import warnings

    if "ipykernel" not in sys.modules or "optuna.progress_bar" in sys.modules:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import optuna.progress_bar  # noqa: F401


_quiet_progress_bars()
observer.register(auto_display=_auto_display, plot=_plot)
