"""What makes a study's losses comparable: its trainer, data, search space and fixed settings.

A study is one experiment. Its identity is read from its stored settings (so a study of any
release has one); a run whose identity differs would mix incomparable losses (3-epoch and
6-epoch trials modelled as one function), and is refused unless the change is deliberate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The settings (of `TuneConfig`) that change what a loss means; the space is the rest.
KEYS = ("trainer", "data", "rows", "buckets", "label", "categorical")
METRIC = "validation loss"


def identity(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of a run from its settings ({"config", "space"}); {} when unknown."""
    config, space = settings.get("config"), settings.get("space")
    if not isinstance(config, Mapping) or not isinstance(space, Mapping):
        return {}
    # A parameter's `default` picks trial 0 only: the losses stay comparable without it.
    params = {name: {k: v for k, v in p.items() if k != "default"} if isinstance(p, Mapping)
              else p for name, p in (space.get("params") or {}).items()}
    return {**{k: config.get(k) for k in KEYS}, "space": {**space, "params": params},
            "metric": METRIC}


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What changed between two identities, one line each: ``space.fixed.epochs: 3 -> 6``."""
    a, b = _flat(old), _flat(new)
    return [f"{k}: {_show(a.get(k))} -> {_show(b.get(k))}"
            for k in sorted(set(a) | set(b)) if a.get(k, _MISSING) != b.get(k, _MISSING)]


_MISSING = object()


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): value}


def _show(value: Any) -> str:
    return "(none)" if value is None else repr(value)
