"""What `tune calibrate` measured of a chat model, kept on this machine for every later run.

One JSON file, `calibrations.json`, in tunepilot's data folder: `$TUNEPILOT_HOME`, else
`$XDG_DATA_HOME/tunepilot`, else `~/.local/share/tunepilot`. A calibration belongs to a model
name, an endpoint (its URL with any password removed; "" for the provider's own) and a prompt
version (a hash of the prompt templates: a model measured on other prompts is another
measurement). The newest calibration of a model wins. Nothing secret is written: no key, no
password, no prompt text.

A run that finds one copies it into its study (`records.calibration`), so a resume and every
worker start from the same record, and the model's share of turns begins from the calibrated
record (`trust.record`) instead of from none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tunepilot.memory.redact import redact

FILE = "calibrations.json"
# How much a calibration weighs against the study's own judgements: as many judged trials as
# this at most, so a few live trials can overturn it.
PRIOR_WEIGHT = 6

# Verdicts, in words a person reads and a run reasons with.
WORTH = "worth its turns"
LEVEL = "level with the sampler: not worth its turns"
WORSE = "behind the sampler: not worth its turns"
RECALLS = "recalls the published tables; level on disguised ones"
TOO_FEW = "too few searches to judge: no verdict, so its record starts with none"


@dataclass(frozen=True)
class Calibration:
    model: str
    endpoint: str  # redacted URL; "" for the provider's default endpoint
    prompt_version: str
    date: str
    verdict: str  # WORTH, LEVEL, WORSE, RECALLS (which may say "behind" instead) or TOO_FEW
    summary: str  # the verdict's sentence with its figures
    wins: int  # its judged trials (on disguised tables) that beat the sampler's typical trial
    judged: int
    tasks: int = 0
    seeds: int = 0
    figures: Mapping[str, Any] = field(default_factory=dict)  # per variant, for show/report

    @property
    def worth(self) -> bool:
        return self.verdict == WORTH

    def prior(self) -> tuple[float, float]:
        """(wins, judged) the study's record starts from: the calibration's rate of wins on
        disguised tables, at most `PRIOR_WEIGHT` trials' worth. A model that did not beat the
        sampler starts with no wins (the floor); one that did, with its rate."""
        n = float(min(self.judged, PRIOR_WEIGHT))
        if n == 0 or self.verdict == TOO_FEW:  # measured too little to start anywhere
            return 0.0, 0.0
        rate = self.wins / self.judged if self.worth else 0.0
        return rate * n, n

    def line(self) -> str:
        where = f" at {self.endpoint}" if self.endpoint else ""
        return f"calibration of {self.model}{where} ({self.date}): {self.summary}"

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, value: Any) -> Calibration | None:
        if not isinstance(value, Mapping) or "model" not in value:
            return None
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in value.items() if k in known})


def home() -> Path:
    """tunepilot's data folder on this machine."""
    if os.environ.get("TUNEPILOT_HOME"):
        return Path(os.environ["TUNEPILOT_HOME"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tunepilot"


def endpoint_of(base_url: str | None) -> str:
    """A model's endpoint as kept: its URL without a password; "" for the provider's own."""
    return redact(base_url) if base_url else ""


def save(calibration: Calibration, path: Path | None = None) -> Path:
    """Adds `calibration` to the file (written whole, then moved into place)."""
    path = path or home() / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = _read(path)
    if not kept and path.exists() and path.stat().st_size:  # unreadable: kept aside, not lost
        path.replace(path.with_name(f"{path.name}.unreadable"))
    kept.append(calibration.to_record())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(kept, indent=1))
    tmp.replace(path)
    return path


def find(model: str, endpoint: str, prompt_version: str,
         path: Path | None = None) -> tuple[Calibration | None, Calibration | None]:
    """The newest calibration of `model` at `endpoint` with these prompts, and, where there is
    none, the newest one made with other prompts (a stale one, to say so)."""
    mine = [c for c in map(Calibration.from_record, _read(path or home() / FILE))
            if c is not None and c.model == model and c.endpoint == endpoint]
    current = [c for c in mine if c.prompt_version == prompt_version]
    newest = max(current, key=lambda c: c.date, default=None)
    stale = None if newest else max(mine, key=lambda c: c.date, default=None)
    return newest, stale


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, json.JSONDecodeError):
        return []  # unreadable: calibrating again writes a good one
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def kept_for(model: str, base_url: str | None,
             prompt_version: str) -> tuple[Calibration | None, str]:
    """The kept calibration a run with `model` at `base_url` (on prompts `prompt_version`)
    starts from, and a line that says which (or that there is none, and how to make one)."""
    found, stale = find(model, endpoint_of(base_url), prompt_version)
    if found is not None:
        return found, f"{found.line()}; its record starts from it"
    if stale is not None:
        return None, (f"calibration of {model} ({stale.date}) was made with other prompts, so "
                      f"it is not used: `tune calibrate --llm ...` measures it again")
    return None, (f"no calibration of {model} on this machine: its record starts with none "
                  "(`tune calibrate` measures a model in minutes)")
