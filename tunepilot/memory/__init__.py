"""Trial memory: the only reader and writer of study state.

`open_storage` / `open_study` / `load_study` open Optuna studies (the storage IS the memory);
`History` and `TrialRecord` are the typed view everyone reads; `records` is the one writer of
tunepilot's records; `settings` versions what a study stores about its run.
"""

from tunepilot.memory import records
from tunepilot.memory.history import History, LLMCall, Review, TrainInfo, TrialRecord, readable
from tunepilot.memory.redact import redact
from tunepilot.memory.stops import Stop, StopKind
from tunepilot.memory.store import DEFAULT_STORAGE, load_study, open_storage, open_study

__all__ = [
    "DEFAULT_STORAGE",
    "History",
    "LLMCall",
    "Review",
    "TrainInfo",
    "Stop",
    "StopKind",
    "TrialRecord",
    "load_study",
    "open_storage",
    "open_study",
    "readable",
    "records",
    "redact",
]
