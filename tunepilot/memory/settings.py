"""A study's stored settings (what `tune worker`, `rerun` and warm starts rebuild a run from),
versioned, with migrations.

The settings are a JSON object on the study (user attr ``tunepilot:settings``)::

    {"version": 2, "config": {...TuneConfig, no secrets...}, "space": {...SearchSpace...}}

Every change of that shape gets a new version and a function here that turns the previous
version into it. Reading applies the chain in order, so a study written by any earlier release
opens with today's code; writing always stores the current version. Functions are only ever
appended: a migration, once released, never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tunepilot.errors import ConfigError
from tunepilot.memory import attrs
from tunepilot.memory.redact import redact

# Release 0.1 stored settings without a version: that shape is version 1.
VERSION = 2


def _v1_to_v2(settings: dict[str, Any]) -> dict[str, Any]:
    """0.1 redacted URLs with a regex that missed ``?password=`` and passwords holding '@':
    redact the stored URLs again with SQLAlchemy's parser."""
    config = dict(settings.get("config") or {})
    for key in ("storage", "llm_base_url"):
        if isinstance(config.get(key), str):
            config[key] = redact(config[key])
    return {**settings, "config": config} if "config" in settings else settings


# MIGRATIONS[v] turns version v into version v + 1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def migrate(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The current shape of settings stored by any release ({} when there are none).

    Raises `ConfigError` for settings written by a newer tunepilot than this one.
    """
    if not stored:
        return {}
    settings = dict(stored)
    version = int(settings.pop("version", 1))
    if version > VERSION:
        raise ConfigError(f"This study's settings were written by a newer tunepilot (settings "
                          f"version {version}; this one reads up to {VERSION}). Upgrade "
                          "tunepilot: pip install -U tunepilot.")
    while version < VERSION:
        settings = MIGRATIONS[version](settings)
        version += 1
    return settings


def stamped(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` as they are stored: with the current version."""
    return {"version": VERSION, **{k: v for k, v in settings.items() if k != "version"}}


def stored(study: Any) -> dict[str, Any]:
    """The settings stored on `study` (an Optuna study), migrated; read without its trials (a
    worker's look at the study it joins). `History.from_study(study).settings` is the same."""
    return migrate(study.user_attrs.get(attrs.SETTINGS))
