"""The built-in trainers: the CTR task (the seeds' case) on each backend, one registry.

A built-in trainer is one `BuiltinTrainer` entry: the name `--trainer` takes, how it is built
on the task's data, the framework it names in the LLM's task text, the modules an isolated
trial's process imports ahead of its first trial, and what its device can run. The config, the
agent and the CLI read only this registry; a new backend is one `register(...)` call.

Example:
    >>> register(BuiltinTrainer("numpy", build=my_numpy_trainer, framework="NumPy",
    ...                         on_gpu=lambda: False))  # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunepilot.errors import ConfigError
from tunepilot.space import Categorical, Float, SearchSpace
from tunepilot.trainers.base import Trainer
from tunepilot.trainers.ctr_config import check_ctr_keys


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _torch_precisions() -> list[str]:
    """16-mixed only on CUDA (fp16 needs a GradScaler, which Lightning brings there)."""
    import torch

    if torch.cuda.is_available():
        return ["32-true", "bf16-mixed", "16-mixed"] if torch.cuda.is_bf16_supported() else [
            "32-true", "16-mixed"]
    return ["32-true", "bf16-mixed"]


@dataclass(frozen=True)
class BuiltinTrainer:
    """One backend of the built-in CTR task.

    `build(data)` binds the trainer to the task's data; `on_gpu()` says whether it would train
    on a GPU here; `precisions()` what its device can run.
    """

    name: str
    build: Callable[[Any], Trainer]
    framework: str  # named in the LLM's task text: "PyTorch Lightning"
    modules: tuple[str, ...] = ()  # an isolated trial's process imports these ahead
    on_gpu: Callable[[], bool] = _cuda
    precisions: Callable[[], list[str]] = field(default=_torch_precisions)


BUILTIN: dict[str, BuiltinTrainer] = {}


def register(trainer: BuiltinTrainer) -> BuiltinTrainer:
    """Adds (or replaces) a built-in trainer; `--trainer NAME` takes it from now on."""
    BUILTIN[trainer.name] = trainer
    return trainer


def _lightning(data: Any) -> Trainer:
    import functools

    from tunepilot.trainers.lightning_trainer import train_ctr

    return functools.partial(train_ctr, data=data)


def _jax(data: Any) -> Trainer:
    import functools

    from tunepilot.trainers.jax_trainer import train_ctr

    return functools.partial(train_ctr, data=data)


def _jax_on_gpu() -> bool:
    import jax

    return bool(jax.default_backend() != "cpu")


register(BuiltinTrainer("lightning", _lightning, "PyTorch Lightning",
                        modules=("tunepilot.trainers.lightning_trainer",)))
# fp16 needs loss scaling, which JAX leaves to us: 32-true and bf16 only.
register(BuiltinTrainer("jax", _jax, "JAX/Flax/Optax", modules=("tunepilot.trainers.jax_trainer",),
                        on_gpu=_jax_on_gpu, precisions=lambda: ["32-true", "bf16-mixed"]))


# `--trainer both`: the framework is a choice of each trial (the space's `framework`), one
# study over both: which reaches a loss, and a target, first.
FRAMEWORKS = ("lightning", "jax")


def _both(data: Any) -> Trainer:
    import dataclasses

    built: dict[str, Trainer] = {}

    def train(config: Any, report: Any) -> Any:
        config = dict(config)
        framework = config.pop("framework", FRAMEWORKS[0])
        if framework not in FRAMEWORKS:
            raise ConfigError(f"framework {framework!r} is not a built-in one; expected one of "
                              f"{', '.join(FRAMEWORKS)} in [space] framework.")
        if framework not in built:  # a framework is imported when a trial first asks for it
            built[framework] = BUILTIN[framework].build(data)
        result = built[framework](config, report)
        return dataclasses.replace(result, extra={**result.extra, "framework": framework})

    return train


def _both_precisions() -> list[str]:
    """What both frameworks run here (each names its precisions alike: bf16-mixed is
    Lightning's bf16 autocast and the JAX trainer's bfloat16 compute)."""
    jax = BUILTIN["jax"].precisions()
    return [p for p in BUILTIN["lightning"].precisions() if p in jax]


register(BuiltinTrainer("both", _both, "PyTorch Lightning or JAX/Flax/Optax (each trial's "
                        "`framework`)", modules=("tunepilot.trainers.lightning_trainer",
                                                 "tunepilot.trainers.jax_trainer"),
                        on_gpu=lambda: _cuda() or _jax_on_gpu(), precisions=_both_precisions))


def on_gpu(trainer: str) -> bool:
    return BUILTIN[trainer].on_gpu()


def device_precisions(trainer: str = "lightning") -> list[str]:
    """Precisions the trainer's device supports."""
    return BUILTIN[trainer].precisions()


def cpu_bf16_native(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX). Without, torch and XLA
    emulate it, several times slower than fp32 (bench/README.md#trainers). Not Linux:
    assumed."""
    try:
        flags = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    return re.search(r"\b(avx512_bf16|amx_bf16)\b", flags) is not None


def default_precisions(trainer: str = "lightning") -> list[str]:
    """The precisions the default space offers: what the device runs (`device_precisions`),
    less bf16 on a CPU that only emulates it (slower, and no better losses)."""
    can = device_precisions(trainer)
    if not on_gpu(trainer) and not cpu_bf16_native():
        can = [p for p in can if p != "bf16-mixed"]
    return can


def default_space(trainer: str) -> SearchSpace:
    """The mission's four parameters for a built-in trainer; empty for user code."""
    if trainer not in BUILTIN:
        return SearchSpace()
    offered = default_precisions(trainer)
    # The defaults are trial 0 of a new study: what a practitioner tries first on a CTR model
    # (Adam's customary rate, batch 256), measured on it against the alternatives
    # (bench/README.md#the-built-in-tasks-defaults).
    both = {"framework": Categorical(list(FRAMEWORKS), default=FRAMEWORKS[0])} \
        if trainer == "both" else {}
    return SearchSpace.of(
        **both,
        lr=Float(1e-5, 1e-1, log=True, default=1e-3),
        batch_size=Categorical([256, 512, 1024, 2048, 4096], default=256),
        # one precision only (a CPU without native bf16): a fixed setting, not a choice
        precision=(Categorical(offered, default=offered[0]) if len(offered) > 1
                   else offered[0]),
        dropout=Float(0.0, 0.5, default=0.1),
    )


def check_space(trainer: str, space: SearchSpace) -> list[str]:
    """Refuses, before the first trial, settings the built-in model would not understand and
    precisions the device cannot run; returns what the person should hear (a precision only
    emulated here)."""
    keys = set(space.params) | set(space.fixed)
    check_ctr_keys(keys - {"framework"} if trainer == "both" else keys)
    framework = space.params.get("framework")
    named = list(framework.choices) if isinstance(framework, Categorical) else (
        [space.fixed["framework"]] if "framework" in space.fixed else [])
    if [f for f in named if f not in FRAMEWORKS]:
        raise ConfigError(f"[space] framework may hold {', '.join(map(repr, FRAMEWORKS))}, not "
                          f"{', '.join(repr(f) for f in named if f not in FRAMEWORKS)}.")
    param = space.params.get("precision")
    asked = list(param.choices) if isinstance(param, Categorical) else (
        [space.fixed["precision"]] if "precision" in space.fixed else [])
    can = device_precisions(trainer)
    wrong = [p for p in asked if p not in can]
    if wrong:
        raise ConfigError(
            f"precision {', '.join(map(repr, wrong))} cannot run here with --trainer {trainer} "
            f"(this machine's device supports {', '.join(map(repr, can))}); remove "
            f"{'it' if len(wrong) == 1 else 'them'} from [space] precision.")
    if "bf16-mixed" in asked and "bf16-mixed" not in default_precisions(trainer):
        return ["precision bf16-mixed is emulated on this CPU (no AVX512-BF16 or AMX): its "
                "trials run several times slower than 32-true"]
    return []


def task_text(trainer: str, data: str, epochs: int) -> str:
    """The built-in task in words, for the LLM's prompt."""
    return (f"Train a click-through-rate model (one embedding per categorical field, "
            f"concatenated with the dense features, an MLP with ReLU and dropout, one logit; "
            f"Adam; binary cross-entropy) with {BUILTIN[trainer].framework} on {data}. Each "
            f"trial trains {epochs} epochs and scores its best epoch's validation log-loss.")
