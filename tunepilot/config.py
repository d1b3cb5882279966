"""`TuneConfig`: everything a run needs, read from a TOML/YAML file and/or flags.

Built-in defaults < the file < the environment < flags (`read_config` says which gave each
setting). Unknown keys are refused with the list of valid ones, so a typo never
silently falls back to a default.

Example ``tune.toml``::

    trainer = "lightning"
    n_trials = 30
    target = 0.45
    timeout = "20m"

    [space]
    epochs = 4                                         # a fixed setting
    weight_decay = { type = "float", low = 1e-6, high = 1e-2, log = true }
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from tunepilot import trainers
from tunepilot.errors import ConfigError, did_you_mean, one_of
from tunepilot.memory.store import DEFAULT_STORAGE
from tunepilot.proposers import pruners, samplers
from tunepilot.proposers.strategies import STRATEGIES
from tunepilot.space import SearchSpace

_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> float | None:
    """Seconds from '90', '90s', '20m', '8h', '1h30m', '2d' (or a number of seconds).

    Example:
        >>> parse_duration("1h30m")
        5400.0
    """
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if value is None else float(value)
    text = str(value).strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(sec|min|s|m|h|d)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(
            f"{value!r} is not a duration; write seconds or a number with a unit, e.g. 90s, 20m, "
            "8h, 1h30m"
        )
    return float(sum(float(n) * _UNITS[u] for n, u in parts))


def duration_words(seconds: float) -> str:
    """Seconds as a person writes a duration: '2h', '1h30m', '90s' (what `parse_duration`
    reads back).

    Example:
        >>> duration_words(5400.0)
        '1h30m'
    """
    if seconds != int(seconds) or seconds <= 0:
        return f"{seconds:g}s"
    left, parts = int(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts)


Duration = Annotated[float | None, BeforeValidator(parse_duration)]
DURATIONS = ("timeout", "trial_timeout", "outage")  # the settings of type Duration


class TuneConfig(BaseModel):
    """The settings of one search. Every field is also a `tune run` flag (``--n-trials``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trainer: str = "lightning"  # lightning | jax | both | package.module:function
    data: str = "synthetic"  # synthetic[:ROWS] | criteo:PATH | csv:PATH | parquet:PATH
    rows: int | None = Field(None, ge=10)  # read at most this many rows (default: all)
    buckets: int | None = Field(None, ge=1)  # hash buckets per field (synthetic 1024, files 2^16)
    label: str = "label"  # label column of csv/parquet data
    categorical: list[str] = Field(default_factory=list)  # csv/parquet columns to hash
    space: dict[str, Any] = Field(default_factory=dict)  # added to / replacing the defaults
    # Configs a new study runs first, after the space's defaults ([[start]] tables in TOML;
    # Ray Tune's points_to_evaluate): whole or partial, the sampler draws what one leaves out
    start: list[dict[str, Any]] = Field(default_factory=list)
    # auto: review when an LLM is configured (--llm), otherwise optuna; optuna too when
    # --llm auto finds only the embedded demonstration model (strategies.agent says why)
    strategy: str = "auto"  # one of STRATEGIES
    sampler: str = "auto"  # a name in the sampler registry (`proposers.samplers`)
    pruner: str = "auto"  # a name in the pruner registry (`proposers.pruners`)
    llm: str = "auto"  # openai:MODEL | PROVIDER:MODEL | local | none | auto
    llm_base_url: str | None = None  # an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1
    llm_model_path: str | None = None  # a GGUF chat model for --llm local
    llm_temperature: float = Field(0.4, ge=0.0, le=2.0)
    llm_max_tokens: int = Field(400, ge=50)
    llm_timeout: float = Field(60.0, gt=0)  # seconds per request
    llm_attempts: int = Field(3, ge=1)  # answers per trial before the fallback sampler takes it
    llm_prices: dict[str, tuple[float, float]] = Field(default_factory=dict)  # USD / 1M in, out
    # Past this share of the search's wall time spent waiting for the LLM, the sampler takes the
    # LLM's turns (1.0: no cap). Default: 0.2 where llm and strategy are auto, else no cap.
    llm_time_share: float | None = Field(None, gt=0.0, le=1.0)
    # `review`: a fixed share of the trials on which the LLM may override the sampler's
    # candidate; None: the share its track record earns (30% to start, 5% to 80%)
    max_override_share: float | None = Field(None, ge=0.0, le=1.0)
    # With an LLM: configs one turn asks it for on a new study, run first in place of the
    # sampler's first draws; None: a tenth of n_trials, at most 5, none under 10; 0: off
    opening: int | None = Field(None, ge=0, le=20)
    task: str | None = None  # what is being trained, in words, for the LLM's prompt
    # what the trainer returns, in words, for the LLM's prompt (the study minimizes it), e.g.
    # "1 - validation accuracy" or "negated BLEU (higher BLEU is better)"
    metric: str = Field("validation loss", min_length=1, max_length=200)
    storage: str = DEFAULT_STORAGE
    heartbeat: int = Field(10, ge=0)  # seconds; a trial silent for 3x this is FAILed (0: off)
    retry_interrupted: int = Field(1, ge=0)  # re-run an interrupted or killed trial this often
    # How long a worker rides out a database server that went away (a restart, a fail-over, a
    # full server) before it exits: its running trial goes on, its storage calls wait
    outage: Duration = 300.0
    study: str | None = None  # default: derived from trainer and data, so a rerun resumes
    n_trials: int = Field(20, ge=1)  # the study's total budget, not per run
    timeout: Duration = None  # wall-time budget of the study (its trials' time), in seconds
    trial_timeout: Duration = None  # a trial running longer is killed and FAILed (isolation)
    # Each trial in its own process (a crash costs one trial). Default: on with --timeout or
    # --trial-timeout (unattended runs), off otherwise (the quick demo starts faster).
    isolate: bool | None = None
    target: float | None = None  # stop as soon as a trial's validation loss is <= target
    patience: int | None = Field(None, ge=1)  # stop after this many trials without improvement
    min_delta: float = Field(0.0, ge=0.0)  # ... of at least this much
    llm_budget: float | None = Field(None, ge=0.0)  # stop when the study's LLM spend (USD) hits it
    llm_token_budget: int | None = Field(None, ge=1)  # ... or its LLM tokens (in + out) do
    epochs: int = Field(3, ge=1)  # fixed unless `epochs` is declared in [space]
    # A trial stops once its validation loss has not improved for this many epochs, kept with
    # its best epoch (0: off). None: a third of the trial's epochs, 1 to 3 (2 when unknown).
    epoch_patience: int | None = Field(None, ge=0)
    seed: int = 0
    # A study is one experiment: opening it with another trainer, data, space or fixed setting
    # is refused unless this says the change is deliberate (it is recorded in the study).
    accept_changes: bool = False
    # Experiment trackers for every trial: mlflow[:URI], wandb[:PROJECT], tensorboard:DIR
    track: list[str] = Field(default_factory=list)

    @field_validator("strategy", "sampler", "pruner")
    @classmethod
    def _one_of(cls, v: str, info: Any) -> str:
        options = {"strategy": STRATEGIES, "sampler": samplers.names(),
                   "pruner": pruners.names()}[info.field_name]
        if v not in options:
            raise ValueError(f"expected {one_of(options)}.{did_you_mean(v, options)}")
        return v

    @field_validator("target")
    @classmethod
    def _finite_target(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError(f"the target must be a finite loss, e.g. 0.40; with {v} the search "
                             + ("would stop after its first trial (every loss is under it)"
                                if v > 0 else "would never stop on it (no loss is at or under "
                                "it)"))
        return v

    @field_validator("llm_base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"https?://[^/\s]+", v):
            raise ValueError(("the LLM server's URL names no host after its scheme"
                              if re.match(r"https?://", v) else
                              "the LLM server's URL must start with http:// or https://")
                             + ", e.g. http://127.0.0.1:8080/v1")
        return v

    @field_validator("categorical", "track", mode="before")
    @classmethod
    def _split_commas(cls, v: Any) -> Any:
        return [c.strip() for c in v.split(",") if c.strip()] if isinstance(v, str) else v

    def study_name(self) -> str:
        if self.study:
            return self.study
        name = (f"{self.trainer}-{self.data}" if self.trainer in trainers.BUILTIN
                else self.trainer)
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")

    def public(self) -> dict[str, Any]:
        """The settings as JSON-safe data, for storing with the study."""
        return json.loads(self.model_dump_json())


# Settings read from the environment, between the file and the flags (a password in argv
# shows in ps; the local worker pool tells its workers the LLM server this way).
ENVIRONMENT = {"storage": "TUNEPILOT_STORAGE", "llm_base_url": "TUNEPILOT_LLM_BASE_URL"}
# Settings a file may also give as a fixed value in [space]: a flag or the environment wins there
# too.
_ALSO_IN_SPACE = ("epochs", "seed")


@dataclass(frozen=True)
class Sources:
    """Where each setting of a `TuneConfig` came from: "file", "environment" or "flag" (a
    setting at its built-in default has none), and the values a later layer overrode."""

    origin: Mapping[str, str] = field(default_factory=dict)
    overridden: Mapping[str, tuple[tuple[str, Any], ...]] = field(default_factory=dict)

    def line(self, cfg: TuneConfig) -> str | None:
        """The settings that differ from the built-in defaults, each with its source:
        ``settings: n_trials = 40 (flag), epochs = 1 (flag; the file says 3)``."""
        from tunepilot.memory.redact import redact

        parts = []
        for key in TuneConfig.model_fields:
            if key in ("space", "start") or key not in self.origin:
                continue
            value = getattr(cfg, key)
            shown = redact(value) if isinstance(value, str) and "://" in value else value
            if key in DURATIONS and value is not None:  # as a person writes it: 2h
                shown = duration_words(value)
            lost = "".join(f"; the {where} says {redact(str(v)) if '://' in str(v) else v}"
                           for where, v in self.overridden.get(key, ()))
            parts.append(f"{key} = {shown} ({self.origin[key]}{lost})")
        return "settings: " + ", ".join(parts) if parts else None


def load_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None,
                **overrides: Any) -> TuneConfig:
    """Reads `path` (TOML or YAML) if given, then the environment (`ENVIRONMENT`), then
    `overrides` that are not None (the flags), each over the one before, and validates.

    Raises:
        ConfigError: the file is missing or unreadable, a key is unknown, or a value is invalid.
    """
    return read_config(path, environ=environ, **overrides)[0]


def read_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None,
                **overrides: Any) -> tuple[TuneConfig, Sources]:
    """`load_config`, and where each setting came from. One rule everywhere: built-in defaults
    < the config file < the environment < flags; a flag for a setting the file fixes in
    [space] (epochs, seed) replaces it there too."""
    data: dict[str, Any] = {}
    origin: dict[str, str] = {}
    overridden: dict[str, list[tuple[str, Any]]] = {}
    where = "flags"
    if path is not None:
        data = _read_file(Path(path))
        where = str(path)
        space = data.get("space")
        # `epochs = 3` in [space] (as `tune init` writes it) is the file's epochs setting.
        if isinstance(space, Mapping) and "epochs" in space and not isinstance(
                space["epochs"], Mapping):
            if "epochs" in data and data["epochs"] != space["epochs"]:
                raise ConfigError(
                    f"Invalid configuration in {where}: epochs is set twice, {data['epochs']} "
                    f"at the top and {space['epochs']} in [space]; keep one.")
            data["epochs"] = space["epochs"]  # one value, said once, in both places
        origin = dict.fromkeys(data, "file")
    environ = os.environ if environ is None else environ
    layers = [("environment", {k: environ[v] for k, v in ENVIRONMENT.items()
                               if environ.get(v)}),
              ("flag", {k: v for k, v in overrides.items() if v is not None})]
    for source, values in layers:
        for key, value in values.items():
            if key in data and key in origin and data[key] != value:
                overridden.setdefault(key, []).append((origin[key], data[key]))
            space = data.get("space")
            if key in _ALSO_IN_SPACE and isinstance(space, Mapping) and key in space:
                if isinstance(space[key], Mapping):
                    raise ConfigError(
                        f"--{key.replace('_', '-')} {value} fixes {key}, which [space] in {where} "
                        f"tunes ({space[key]}); drop the flag or the [space] entry.")
                lost = ("file", space[key])
                if space[key] != value and lost not in overridden.get(key, []):
                    overridden.setdefault(key, []).append(lost)
                data["space"] = {**space, key: value}
            data[key] = value
            origin[key] = source
    try:
        cfg = TuneConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_explain(e, where)) from None
    try:  # the space is read here too, so a typo in it stops a run before its log is opened
        SearchSpace.of(cfg.space)
    except ConfigError as e:
        raise ConfigError(f"Invalid configuration in {where}: {e}") from None
    # A value given at its default is not news; a value that beat another is.
    defaults = TuneConfig.model_validate({})
    origin = {k: v for k, v in origin.items()
              if k in TuneConfig.model_fields and (getattr(cfg, k) != getattr(defaults, k)
                                                   or k in overridden)}
    return cfg, Sources(origin, {k: tuple(v) for k, v in overridden.items()})


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(
            f"Config file {path} does not exist. Check the path, or drop --config to run with "
            "flags only (see `tune run --help`)."
        )
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data = tomllib.loads(path.read_text())
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(path.read_text()) or {}
        else:
            raise ConfigError(
                f"Config file {path} has suffix {suffix!r}; expected .toml, .yaml or .yml."
            )
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"Config file {path} is not valid TOML: {e}. Fix that line.") from None
    except ConfigError:
        raise
    except Exception as e:  # yaml.YAMLError and I/O errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"Cannot read config file {path}: {first}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"Config file {path} must hold a table of settings, found "
                          f"{type(data).__name__}.")
    return {k.replace("-", "_"): v for k, v in data.items()}


def _explain(e: ValidationError, where: str) -> str:
    fields = sorted(TuneConfig.model_fields)
    parts = []
    for err in e.errors():
        key = ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            name = str(err["loc"][-1])
            parts.append(
                f"unknown setting '{name}'.{did_you_mean(name, fields)} Valid settings: "
                f"{', '.join(fields)}"
            )
        else:
            msg = err["msg"].removeprefix("Value error, ")
            parts.append(f"{key}: {msg} (found {err['input']!r})")
    return f"Invalid configuration in {where}: " + "; ".join(parts) + "."


def starter(trainer: str = "lightning", name: str = "tune.toml") -> str:
    """A commented ``tune.toml`` to start from (`tune init`): the mission's four parameters,
    the budgets, the target and the storage, ready to edit."""
    builtin = trainer in trainers.BUILTIN
    data = ('data = "synthetic"             # synthetic[:ROWS] | criteo:PATH | csv:PATH | '
            'parquet:PATH\n') if builtin else ""
    batch = "[256, 512, 1024, 2048, 4096]" if builtin else "[16, 32, 64, 128, 256]"
    batch_default = 256 if builtin else 64
    target = "0.40" if builtin else "0.0"
    return f'''# {name}: what `tune run --config {name}` searches. Flags and the environment
# override this file.
trainer = "{trainer}"
{data}n_trials = 30                    # the study's total trials (a rerun resumes, runs the rest)
timeout = "2h"                   # wall-time budget of the study: 90s, 20m, 8h
# target = {target}                 # stop as soon as a trial's validation loss is <= this
pruner = "auto"                  # {" | ".join(pruners.names())}
sampler = "auto"                 # {" | ".join(samplers.names())} (auto: by the space, says why)
# epoch_patience = 1             # stop a trial after this many epochs without a better loss
#                                 (default: a third of its epochs, 1 to 3)
storage = "{DEFAULT_STORAGE}"  # or postgresql://USER@HOST/DB for several workers

[space]
# Tuned parameters: float / int (low, high, optional log and step) or categorical (choices).
# `default`: trial 0 of a new study, what you would try first.
lr = {{ type = "float", low = 1e-5, high = 1e-1, log = true, default = 1e-3 }}
batch_size = {{ type = "categorical", choices = {batch}, default = {batch_default} }}
# bf16: GPUs and CPUs with AVX512-BF16 or AMX (emulated, slow, elsewhere); + "16-mixed" on CUDA
precision = {{ type = "categorical", choices = ["32-true", "bf16-mixed"], default = "32-true" }}
dropout = {{ type = "float", low = 0.0, high = 0.5, default = 0.1 }}
# Fixed settings: a plain value. Every trial trains this many epochs.
epochs = 3

# Configs to run first on a new study, after the defaults (whole or partial: the sampler draws
# what one leaves out).
# [[start]]
# lr = 3e-3
# batch_size = {512 if builtin else 128}
'''
