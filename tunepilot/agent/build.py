"""Building a `Tuner` from a `TuneConfig`: the trainer, its data, the space and the strategy.

The CLI, workers and notebooks all build their tuner here, so a config means the same
everywhere.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tunepilot.agent.observer import Observer
from tunepilot.agent.tuner import Tuner
from tunepilot.config import TuneConfig
from tunepilot.llm.models import LLMSettings
from tunepilot.memory import open_storage, redact
from tunepilot.space import SearchSpace
from tunepilot.trainers import builtin
from tunepilot.trainers.base import Trainer


def from_config(cfg: TuneConfig, display: Observer | None = None, worker: bool = False,
                storage: Any = None) -> tuple[Tuner, list[str]]:
    """The `Tuner` a `TuneConfig` describes, and lines that tell the person what was chosen.

    A `worker` joins a study someone else created, so it does not warm-start it again.
    `storage`: one opened already for `cfg.storage` with `storage_options(cfg)`.

    The CLI, workers and notebooks all build their tuner here, so a config means the same
    everywhere.
    """

    notes: list[str] = []
    space = SearchSpace.of(cfg.space)
    trainer, data = build_trainer(cfg)
    if data is not None:
        notes.append(f"data: {data.describe()}")
        space = builtin.default_space(cfg.trainer).merged(space)
    if cfg.isolate or (cfg.isolate is None and (cfg.trial_timeout or cfg.timeout)):
        from tunepilot.runtime.isolate import Isolated

        known = builtin.BUILTIN.get(cfg.trainer)
        preload = known.modules if known is not None else ()
        trainer = Isolated(functools.partial(_child_trainer, cfg.model_dump_json()),
                           timeout_s=cfg.trial_timeout, preload=preload)
        limit = f", killed after {cfg.trial_timeout:g} s" if cfg.trial_timeout else ""
        notes.append(f"isolation: each trial runs in its own process{limit}")
    # Every trainer gets the run's epochs and seed unless the space tunes them.
    space = SearchSpace.of(epochs=cfg.epochs, seed=cfg.seed).merged(space)
    if cfg.trainer in builtin.BUILTIN:
        notes += builtin.check_space(cfg.trainer, space)
    settings = {"config": cfg.public(), "space": json.loads(space.model_dump_json())}
    for key in ("storage", "llm_base_url"):  # no secret in the study
        if settings["config"].get(key):
            settings["config"][key] = redact(settings["config"][key])
    settings["config"]["track"] = [redact(t) for t in cfg.track]
    if storage is None:
        storage = open_storage(cfg.storage, **storage_options(cfg), worker=worker)
    llm = LLMSettings(cfg.llm, cfg.llm_base_url, cfg.llm_temperature, cfg.llm_max_tokens,
                      cfg.llm_timeout, cfg.llm_prices, cfg.llm_model_path, cfg.llm_attempts)
    tuner = Tuner(trainer, space, llm=llm, strategy=cfg.strategy,
                  task=cfg.task or _task_description(cfg, notes), metric=cfg.metric,
                  llm_time_share=cfg.llm_time_share, max_override_share=cfg.max_override_share,
                  storage=storage, study=cfg.study_name(), sampler=cfg.sampler,
                  pruner=cfg.pruner, seed=cfg.seed, settings=settings, display=display,
                  warm_start=not worker, accept_changes=cfg.accept_changes, start=cfg.start,
                  epoch_patience=cfg.epoch_patience, opening=cfg.opening)
    notes += tuner.take_first_lines()  # printed by the caller, with the rest
    notes.append("search space:\n" + space.describe())
    return tuner, notes


def storage_options(cfg: TuneConfig) -> dict[str, Any]:
    """What `open_storage` is told of `cfg`'s storage: its heartbeat, retries and outage."""
    return {"heartbeat_s": cfg.heartbeat or None, "retry_stale": cfg.retry_interrupted,
            "outage_s": cfg.outage}


def build_trainer(cfg: TuneConfig) -> tuple[Trainer, Any]:
    """The trainer `cfg` names, and the CTR data it is bound to (None for user code)."""
    from tunepilot import trainers

    if cfg.trainer in builtin.BUILTIN:
        data = trainers.load_data(cfg.data, rows=cfg.rows, buckets=cfg.buckets, label=cfg.label,
                                  categorical=cfg.categorical)
        return trainers.from_spec(cfg.trainer, data), data
    return trainers.from_spec(cfg.trainer), None


def _child_trainer(cfg_json: str) -> Trainer:
    """In an isolated trial's process: the same trainer, built from the same settings."""
    return build_trainer(TuneConfig.model_validate_json(cfg_json))[0]


def _task_description(cfg: TuneConfig, notes: list[str]) -> str:
    if cfg.trainer in builtin.BUILTIN:
        data = next((n.removeprefix("data: ") for n in notes if n.startswith("data: ")), cfg.data)
        return builtin.task_text(cfg.trainer, data, cfg.epochs)
    return (f"Train the user's model {cfg.trainer!r}; each trial reports its validation loss "
            "after every epoch.")
