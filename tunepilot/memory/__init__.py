"""Trial memory: Optuna storage, a typed history view, and the names of recorded attributes."""

from tunepilot.memory.history import History, TrialRecord
from tunepilot.memory.store import DEFAULT_STORAGE, load_study, open_storage, open_study, redact

__all__ = [
    "DEFAULT_STORAGE",
    "History",
    "TrialRecord",
    "load_study",
    "open_storage",
    "open_study",
    "redact",
]
