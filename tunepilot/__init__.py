"""tunepilot: an LLM-driven hyperparameter tuning agent, with Optuna as memory and fallback.

The public API, re-exported by name. Names load on first use, so ``import tunepilot`` (and
``tune --help``) do not pay for Optuna, torch or JAX.

Example:
    >>> import tunepilot as tp
    >>> def train(config, report):
    ...     return (config["lr"] - 0.01) ** 2
    >>> tuner = tp.Tuner(tp.trainers.callable(train), tp.SearchSpace.of(lr=tp.Float(1e-4, 1e-1)),
    ...                  storage="sqlite:///:memory:")
    >>> result = tuner.run(n_trials=10)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Tuner": "tunepilot.agent.tuner",
    "TuneResult": "tunepilot.agent.results",
    "Proposal": "tunepilot.agent.results",
    "Observer": "tunepilot.agent.observer",
    "from_config": "tunepilot.agent.build",
    "create": "tunepilot.agent.studies",
    "join": "tunepilot.agent.studies",
    "run": "tunepilot.agent.studies",
    "run_workers": "tunepilot.agent.studies",
    "best": "tunepilot.agent.studies",
    "rerun": "tunepilot.agent.studies",
    "AgentSampler": "tunepilot.proposers.suggest",
    "Suggester": "tunepilot.proposers.suggest",
    "Suggestion": "tunepilot.proposers.suggest",
    "SuggestionFailed": "tunepilot.proposers.suggest",
    "TuneConfig": "tunepilot.config",
    "load_config": "tunepilot.config",
    "SearchSpace": "tunepilot.space",
    "Float": "tunepilot.space",
    "Int": "tunepilot.space",
    "Categorical": "tunepilot.space",
    "History": "tunepilot.memory",
    "TrialRecord": "tunepilot.memory",
    "Report": "tunepilot.trainers.base",
    "TrainResult": "tunepilot.trainers.base",
    "Trainer": "tunepilot.trainers.base",
    "TuneError": "tunepilot.errors",
    "ConfigError": "tunepilot.errors",
    "TrialFailed": "tunepilot.errors",
    "Diverged": "tunepilot.errors",
    "trainers": "tunepilot.trainers",
}

__all__ = [
    "AgentSampler",
    "Observer",
    "best",
    "create",
    "join",
    "rerun",
    "run",
    "run_workers",
    "Categorical",
    "ConfigError",
    "Diverged",
    "Float",
    "History",
    "Int",
    "Proposal",
    "Report",
    "SearchSpace",
    "Suggester",
    "Suggestion",
    "SuggestionFailed",
    "TrainResult",
    "Trainer",
    "TrialFailed",
    "TrialRecord",
    "TuneConfig",
    "TuneError",
    "TuneResult",
    "Tuner",
    "from_config",
    "load_config",
    "trainers",
]

if TYPE_CHECKING:
    from tunepilot import trainers
    from tunepilot.agent.build import from_config
    from tunepilot.agent.observer import Observer
    from tunepilot.agent.results import Proposal, TuneResult
    from tunepilot.agent.studies import best, create, join, rerun, run, run_workers
    from tunepilot.agent.tuner import Tuner
    from tunepilot.config import TuneConfig, load_config
    from tunepilot.errors import ConfigError, Diverged, TrialFailed, TuneError
    from tunepilot.memory import History, TrialRecord
    from tunepilot.proposers.suggest import AgentSampler, Suggester, Suggestion, SuggestionFailed
    from tunepilot.space import Categorical, Float, Int, SearchSpace
    from tunepilot.trainers.base import Report, Trainer, TrainResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tunepilot' has no attribute {name!r}")
    # The faces register what the notebook API forwards to (the live display, plots).
    importlib.import_module("tunepilot.ui")
    value = importlib.import_module(module)
    if name != "trainers":
        value = getattr(value, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
