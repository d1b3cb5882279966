"""Building a `Tuner` from a `TuneConfig`: the trainer, its data, the space and the strategy.

The CLI, workers and notebooks all build their tuner here, so a config means the same
everywhere.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tunepilot.agent.observer import Observer
from tunepilot.agent.samplers import sampler_line
from tunepilot.agent.strategies import agent as strategy_agent
from tunepilot.agent.suggest import Suggester
from tunepilot.agent.tuner import Tuner
from tunepilot.config import TuneConfig
from tunepilot.errors import ConfigError
from tunepilot.memory import open_storage, redact
from tunepilot.space import SearchSpace
from tunepilot.trainers.base import Trainer
from tunepilot.trainers.ctr_config import check_ctr_keys


def from_config(cfg: TuneConfig, display: Observer | None = None,
                worker: bool = False) -> tuple[Tuner, list[str]]:
    """The `Tuner` a `TuneConfig` describes, and lines that tell the person what was chosen.

    A `worker` joins a study someone else created, so it does not warm-start it again.

    The CLI, workers and notebooks all build their tuner here, so a config means the same
    everywhere.
    """
    from tunepilot import trainers

    notes: list[str] = []
    space = SearchSpace.of(cfg.space)
    trainer, data = build_trainer(cfg)
    if data is not None:
        notes.append(f"data: {data.describe()}")
        space = trainers.default_space(cfg.trainer).merged(space)
    if cfg.isolate or (cfg.isolate is None and (cfg.trial_timeout or cfg.timeout)):
        from tunepilot.runtime.isolate import Isolated

        preload = {"lightning": ("tunepilot.trainers.lightning_trainer",),
                   "jax": ("tunepilot.trainers.jax_trainer",)}.get(cfg.trainer, ())
        trainer = Isolated(functools.partial(_child_trainer, cfg.model_dump_json()),
                           timeout_s=cfg.trial_timeout, preload=preload)
        limit = f", killed after {cfg.trial_timeout:g} s" if cfg.trial_timeout else ""
        notes.append(f"isolation: each trial runs in its own process{limit}")
    # Every trainer gets the run's epochs and seed unless the space tunes them.
    space = SearchSpace.of(epochs=cfg.epochs, seed=cfg.seed).merged(space)
    if cfg.trainer in trainers.BUILTIN:
        check_ctr_keys(set(space.params) | set(space.fixed))
        _check_precisions(cfg.trainer, space, notes)
    suggester, llm_agent, strategy_note = _strategy(cfg, task=cfg.task or _task_description(cfg,
                                                                                         notes))
    notes.append(strategy_note)
    notes.append(sampler_line(cfg.sampler, space))
    notes.append("search space:\n" + space.describe())
    settings = {"config": cfg.public(), "space": json.loads(space.model_dump_json())}
    for key in ("storage", "llm_base_url"):  # no secret in the study
        if settings["config"].get(key):
            settings["config"][key] = redact(settings["config"][key])
    settings["config"]["track"] = [redact(t) for t in cfg.track]
    storage = open_storage(cfg.storage, heartbeat_s=cfg.heartbeat or None,
                           retry_stale=cfg.retry_interrupted)
    tuner = Tuner(trainer, space, storage=storage, study=cfg.study_name(), suggester=suggester,
                  sampler=cfg.sampler, pruner=cfg.pruner, seed=cfg.seed, settings=settings,
                  display=display, warm_start=not worker, accept_changes=cfg.accept_changes,
                  start=cfg.start, epoch_patience=cfg.epoch_patience, opening=cfg.opening)
    tuner.llm_agent = llm_agent
    tuner.first_lines = []  # in `notes`, which the caller prints
    return tuner, notes


def _check_precisions(trainer: str, space: SearchSpace, notes: list[str]) -> None:
    """A precision the device cannot run is refused before the first trial, not at it; one it
    only emulates is said in `notes`."""
    from tunepilot import trainers
    from tunepilot.space import Categorical

    param = space.params.get("precision")
    asked = list(param.choices) if isinstance(param, Categorical) else (
        [space.fixed["precision"]] if "precision" in space.fixed else [])
    can = trainers.device_precisions(trainer)
    wrong = [p for p in asked if p not in can]
    if "bf16-mixed" in asked and "bf16-mixed" not in trainers.default_precisions(trainer):
        notes.append("precision bf16-mixed is emulated on this CPU (no AVX512-BF16 or AMX): "
                     "its trials run several times slower than 32-true")
    if wrong:
        raise ConfigError(
            f"precision {', '.join(map(repr, wrong))} cannot run here with --trainer {trainer} "
            f"(this machine's device supports {', '.join(map(repr, can))}); remove "
            f"{'it' if len(wrong) == 1 else 'them'} from [space] precision.")


def build_trainer(cfg: TuneConfig) -> tuple[Trainer, Any]:
    """The trainer `cfg` names, and the CTR data it is bound to (None for user code)."""
    from tunepilot import trainers

    if cfg.trainer in trainers.BUILTIN:
        data = trainers.load_data(cfg.data, rows=cfg.rows, buckets=cfg.buckets, label=cfg.label,
                                  categorical=cfg.categorical)
        return trainers.from_spec(cfg.trainer, data), data
    return trainers.from_spec(cfg.trainer), None


def _child_trainer(cfg_json: str) -> Trainer:
    """In an isolated trial's process: the same trainer, built from the same settings."""
    return build_trainer(TuneConfig.model_validate_json(cfg_json))[0]


def _strategy(cfg: TuneConfig, task: str) -> tuple[Suggester | None, Any, str]:
    """The suggester for `cfg.strategy`, the LLM suggester in it (None without one), and a line
    saying what was chosen and why."""
    from tunepilot.agent.llm import LLMSettings

    optuna_line = f"{cfg.sampler} sampler, seed {cfg.seed}"
    if cfg.strategy == "optuna":
        return None, None, f"strategy: optuna ({optuna_line}): Optuna proposes every trial"
    settings = LLMSettings(cfg.llm, cfg.llm_base_url, cfg.llm_temperature, cfg.llm_max_tokens,
                           cfg.llm_timeout, cfg.llm_prices, cfg.llm_model_path)
    return strategy_agent(settings, cfg.strategy, task=task, n_trials=cfg.n_trials,
                          target=cfg.target, attempts=cfg.llm_attempts, optuna_line=optuna_line,
                          metric=cfg.metric,
                          llm_time_share=cfg.llm_time_share,
                          max_override_share=cfg.max_override_share)


def _task_description(cfg: TuneConfig, notes: list[str]) -> str:
    from tunepilot import trainers

    if cfg.trainer in trainers.BUILTIN:
        data = next((n.removeprefix("data: ") for n in notes if n.startswith("data: ")), cfg.data)
        backend = "PyTorch Lightning" if cfg.trainer == "lightning" else "JAX/Flax/Optax"
        return (f"Train a click-through-rate model (one embedding per categorical field, "
                f"concatenated with the dense features, an MLP with ReLU and dropout, one logit; "
                f"Adam; binary cross-entropy) with {backend} on {data}. Each trial trains "
                f"{cfg.epochs} epochs and scores its best epoch's validation log-loss.")
    return (f"Train the user's model {cfg.trainer!r}; each trial reports its validation loss "
            "after every epoch.")
