"""Warm starts: the best configs and notes of finished studies of the same task and space.

Two studies match when their stored settings name the same trainer and data and their search
spaces have the same parameters of the same types (bounds may differ).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunepilot.memory import attrs
from tunepilot.memory.history import History
from tunepilot.memory.settings import migrate
from tunepilot.memory.text import trial_line

if TYPE_CHECKING:
    import optuna


def _signature(settings: Any) -> tuple | None:
    if not isinstance(settings, dict):
        return None
    config, space = settings.get("config") or {}, settings.get("space") or {}
    params = space.get("params") or {}
    if not config.get("trainer") or not params:
        return None  # nothing to match on
    return (config.get("trainer"), config.get("data"),
            tuple(sorted((name, p.get("type")) for name, p in params.items())))


def warm_start(storage: optuna.storages.BaseStorage, study_name: str,
               settings: dict[str, Any], k: int = 3) -> dict[str, Any] | None:
    """From the most recent matching study with a complete trial: its best `k` configs (as
    prompt lines), the best one's params, and its notes. None when no study matches."""
    import optuna

    mine = _signature(settings)
    if mine is None:
        return None
    # The studies' own records, without their trials: a storage may hold any study (another
    # tool's, a multi-objective one); only the matching ones are opened, the newest first.
    matching = [s for s in storage.get_all_studies()
                if s.study_name != study_name and len(s.directions) == 1
                and _signature(_settings(s.user_attrs)) == mine]
    for found in sorted(matching, key=lambda s: s._study_id, reverse=True):
        study = optuna.load_study(study_name=found.study_name, storage=storage)
        history = History.from_study(study)
        if history.best(1):
            break
    else:
        return None
    params = list((settings.get("space") or {}).get("params") or {})
    best = history.best(k)
    return {
        "study": found.study_name,
        "configs": [trial_line(t, params) for t in best],
        "best_params": dict(best[0].params),
        "best_number": best[0].number,
        "best_value": best[0].value,
        "notes": history.notes,
    }


def _settings(user_attrs: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return migrate(user_attrs.get(attrs.SETTINGS))
    except ValueError:  # written by a newer tunepilot: not a match for this one
        return None
