"""Building a `Tuner` from a `TuneConfig`: the trainer, its data, the space and the strategy.

The CLI, workers and notebooks all build their tuner here, so a config means the same
everywhere.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tunepilot.agent.observer import Observer
from tunepilot.agent.suggest import Suggester
from tunepilot.agent.tuner import Tuner
from tunepilot.config import STRATEGIES, TuneConfig
from tunepilot.errors import ConfigError, one_of
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
    suggester, strategy_note = _strategy(cfg, task=cfg.task or _task_description(cfg, notes))
    notes.append(strategy_note)
    notes.append("search space:\n" + space.describe())
    settings = {"config": cfg.public(), "space": json.loads(space.model_dump_json())}
    settings["config"]["storage"] = redact(cfg.storage)
    storage = open_storage(cfg.storage, heartbeat_s=cfg.heartbeat or None,
                           retry_stale=cfg.retry_interrupted)
    tuner = Tuner(trainer, space, storage=storage, study=cfg.study_name(), suggester=suggester,
                  sampler=cfg.sampler, pruner=cfg.pruner, seed=cfg.seed, settings=settings,
                  display=display, warm_start=not worker)
    return tuner, notes


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


def _strategy(cfg: TuneConfig, task: str) -> tuple[Suggester | None, str]:
    """The suggester for `cfg.strategy`, and a line saying what was chosen and why."""
    from tunepilot.agent.llm import LLMSettings

    optuna_line = f"{cfg.sampler} sampler, seed {cfg.seed}"
    if cfg.strategy == "optuna":
        return None, f"strategy: optuna ({optuna_line}): Optuna proposes every trial"
    settings = LLMSettings(cfg.llm, cfg.llm_base_url, cfg.llm_temperature, cfg.llm_max_tokens,
                           cfg.llm_timeout, cfg.llm_prices, cfg.llm_model_path)
    suggester, _, note = agent(settings, cfg.strategy, task=task, n_trials=cfg.n_trials,
                               target=cfg.target, attempts=cfg.llm_attempts,
                               optuna_line=optuna_line)
    return suggester, note


def agent(llm: Any, strategy: str = "auto", *, task: str, n_trials: int = 20,
          target: float | None = None, attempts: int = 3,
          optuna_line: str = "tpe sampler") -> tuple[Suggester | None, Any, str]:
    """The suggester for an LLM and a strategy ("auto", "hybrid", "llm"), the LLM suggester
    inside it (None without a model), and a line saying what was chosen and why.

    `llm`: a spec ("openai:gpt-4o-mini", "local", "auto", "none"), `LLMSettings`, or a
    langchain chat model.
    """
    from tunepilot.agent.llm import Choice, LLMSettings, choose
    from tunepilot.agent.llm_suggester import LLMSuggester
    from tunepilot.agent.suggest import alternate

    strategies = tuple(s for s in STRATEGIES if s != "optuna")
    if strategy not in strategies:
        raise ConfigError(f"Unknown strategy {strategy!r} with an LLM; expected "
                          f"{one_of(strategies)} (or no llm= for Optuna alone).")
    if isinstance(llm, str):
        llm = LLMSettings(llm)
    if isinstance(llm, LLMSettings):
        settings = llm
        choice = choose(llm)
    else:  # a chat model object
        settings = LLMSettings()
        name = getattr(llm, "model_name", None) or getattr(llm, "model", None) or type(llm).__name__
        choice = Choice(llm, str(name), f"the chat model given ({type(llm).__name__})")
    if choice.model is None:
        if strategy != "auto":
            raise ConfigError(
                f"Strategy {strategy!r} needs an LLM, but {choice.reason}. Pass --llm "
                "openai:MODEL (with OPENAI_API_KEY set, or --llm-base-url URL of an "
                "OpenAI-compatible server), or use --strategy optuna."
            )
        return None, None, f"strategy: optuna ({optuna_line}); {choice.reason}"
    strategy = "hybrid" if strategy == "auto" else strategy
    # The embedded model runs on the CPU that trains (~10 ms a prompt token on 2 cores) and its
    # notes are noise: it gets a shorter prompt, no notes, fewer attempts and fewer turns.
    small = choice.name == "local"
    llm_suggester = LLMSuggester(choice.model, model_name=choice.name, task=task,
                                 n_trials=n_trials, target=target, prices=settings.prices,
                                 attempts=min(attempts, 2) if small else attempts,
                                 history_k=3 if small else 5, notes=not small)
    # bench/search.py (bench/README.md): with the LLM on trials 1, 2, then every 4th, hybrid
    # scored 0.83/0.99/0.69/0.66 at 5/10/20/30 trials against TPE's 0.99/1.00/0.77/0.76; the
    # denser 3/2 rule scored 0.91-0.93 at 20-30 trials, worse than TPE. Measured with the
    # embedded model; rerun the benchmark with --llm before giving a capable model more turns.
    startup, every = 2, 4
    where = f" at {redact(settings.base_url)}" if settings.base_url else ""
    if strategy == "llm":
        return llm_suggester, llm_suggester, (
            f"strategy: llm ({choice.name}{where} proposes every trial; {optuna_line} if it "
            f"fails); {choice.reason}")
    turns = ", ".join(str(n) for n in range(12) if n < startup or (n - startup) % every == 0)
    return alternate(llm_suggester, startup=startup, every=every), llm_suggester, (
        f"strategy: hybrid ({choice.name}{where} proposes trials {turns}, ... (every "
        f"{every}th); Optuna's {optuna_line} the rest); {choice.reason}")


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
