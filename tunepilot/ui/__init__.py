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


observer.register(auto_display=_auto_display, plot=_plot)
