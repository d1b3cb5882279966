"""Trainers: ``train(config, report) -> TrainResult``, and how to build one from a spec string.

Specs (the CLI's ``--trainer``):
    lightning                          the built-in CTR model on PyTorch Lightning
    jax                                the same model in Flax NNX + Optax
                                       (the registry of built-ins: `trainers.builtin`)
    package.module:function            ``function(config, report) -> float``, or a trainer
                                       object built with `lightning()` / `flax()`
    lightning:package.module:factory   ``factory(config) -> LightningModule`` with its own
                                       dataloaders; it must log ``val_loss``

Heavy frameworks are imported only when a trainer of theirs is built.
"""

from __future__ import annotations

import builtins
import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tunepilot.errors import ConfigError, did_you_mean
from tunepilot.trainers.base import Report, Trainer, TrainResult, from_callable, no_report
from tunepilot.trainers.builtin import (
    BUILTIN,
    BuiltinTrainer,
    default_precisions,
    default_space,
    device_precisions,
    register,
)

__all__ = [
    "BUILTIN",
    "BuiltinTrainer",
    "Report",
    "TrainResult",
    "Trainer",
    "callable",
    "flax",
    "lightning",
    "ctr_jax",
    "ctr_lightning",
    "default_precisions",
    "default_space",
    "device_precisions",
    "from_spec",
    "load_data",
    "no_report",
    "register",
]


def callable(fn: Callable[[Mapping[str, Any], Report], float]) -> Trainer:
    """Tunes any Python function ``fn(config, report) -> validation loss``.

    Example:
        >>> def train(config, report):
        ...     loss = (config["lr"] - 0.01) ** 2
        ...     report(1, loss)  # per-epoch reports enable pruning
        ...     return loss
        >>> trainer = callable(train)
    """
    return from_callable(fn)


def lightning(module_factory: Callable[[Mapping[str, Any]], Any],
              datamodule_factory: Callable[[Mapping[str, Any]], Any] | None = None, *,
              monitor: str = "val_loss",
              trainer_kwargs: Mapping[str, Any] | Callable[[Mapping[str, Any]], Any] | None = None,
              callbacks: Any = None) -> Trainer:
    """Tunes your own LightningModule. Both factories receive the trial's config.

    The module (or the data module) provides the dataloaders and logs `monitor` in
    `validation_step`; ``config["epochs"]`` and ``config["precision"]`` set the Trainer's.
    `trainer_kwargs`: your `lightning.Trainer` settings (devices, strategy, gradient_clip_val,
    accumulate_grad_batches, a logger...), or a function of the config that returns them, so
    they can be tuned. `callbacks`: yours (a list, or a function of the config for fresh ones
    per trial); tunepilot's reporting callback runs beside them.

    Example:
        >>> def make_module(config):
        ...     return MyModule(lr=config["lr"], dropout=config["dropout"])  # doctest: +SKIP
        >>> trainer = lightning(make_module, lambda config: MyData(config["batch_size"]),
        ...                     trainer_kwargs=lambda config: {
        ...                         "accumulate_grad_batches": config["accumulate"],
        ...                         "gradient_clip_val": 1.0},
        ...                     callbacks=lambda config: [LearningRateMonitor()])
    """
    from tunepilot.trainers.lightning_trainer import user_module

    return user_module(module_factory, datamodule_factory, monitor=monitor,
                       trainer_kwargs=trainer_kwargs, callbacks=callbacks)


def flax(model_factory: Callable[[Mapping[str, Any], Any], Any],
         loss_fn: Callable[[Any, Any], Any], data: tuple[Any, Any], *,
         optimizer: Callable[[Mapping[str, Any]], Any] | None = None,
         step: Callable[[Mapping[str, Any]], Any] | None = None) -> Trainer:
    """Tunes your own Flax NNX model with Optax Adam(W).

    `model_factory(config, rngs)` builds the model; `loss_fn(model, batch)` returns the mean
    loss of a batch; `data` is ``(train, val)``, each an array or a dict/tuple of arrays with one
    common first dimension. The config's lr, batch_size, epochs, weight_decay and seed are used.

    Example:
        >>> def make(config, rngs):
        ...     return nnx.Sequential(nnx.Linear(8, 32, rngs=rngs), nnx.relu,
        ...                           nnx.Dropout(config["dropout"], rngs=rngs),
        ...                           nnx.Linear(32, 1, rngs=rngs))  # doctest: +SKIP
        >>> def mse(model, batch):
        ...     return ((model(batch["x"])[:, 0] - batch["y"]) ** 2).mean()  # doctest: +SKIP
        >>> trainer = flax(make, mse, ({"x": x, "y": y}, {"x": xv, "y": yv}))  # doctest: +SKIP

    `optimizer(config)` gives your own Optax transformation instead of AdamW, e.g.
    ``lambda config: optax.sgd(config["lr"], momentum=config["momentum"])``.

    `step(config)` gives your own train step, ``step(model, optimizer, batch) -> loss``
    (gradient clipping, several losses, an EMA...); jit it yourself, once, outside `step`, so
    trials reuse the compiled function. `loss_fn` still scores the validation data.
    """
    from tunepilot.trainers.flax_trainer import user_model

    return user_model(model_factory, loss_fn, data, optimizer, step)


def ctr_lightning(data: Any) -> Trainer:
    """The built-in CTR model (embeddings + MLP + dropout) on Lightning, bound to `data`."""
    return BUILTIN["lightning"].build(data)


def ctr_jax(data: Any) -> Trainer:
    """The built-in CTR model in Flax NNX + Optax (one jitted call per epoch), bound to `data`."""
    return BUILTIN["jax"].build(data)


DATA_KINDS = ("synthetic", "criteo", "csv", "parquet")


def load_data(spec: str, *, rows: int | None = None, buckets: int | None = None,
              label: str = "label", categorical: list[str] | tuple[str, ...] = ()) -> Any:
    """The CTR data set named by `spec`: ``synthetic[:ROWS]``, ``criteo:PATH``, ``csv:PATH``
    or ``parquet:PATH``."""
    from tunepilot.trainers.data import criteo, synthetic, table

    kind, _, arg = spec.partition(":")
    if kind == "synthetic":
        try:
            n = int(arg) if arg else (rows or 50_000)
        except ValueError:
            raise ConfigError(f"--data {spec!r}: {arg!r} is not a row count. Write synthetic or "
                              "synthetic:ROWS, e.g. synthetic:50000.") from None
        if n < 100:
            raise ConfigError(f"--data {spec!r}: use at least 100 rows.")
        return synthetic(n, buckets=buckets or 1024)
    if kind in ("criteo", "csv", "parquet") and not arg:
        raise ConfigError(f"--data {kind}: needs a path, e.g. --data {kind}:./train.txt.gz")
    if kind == "criteo":
        return criteo(arg, rows=rows, buckets=buckets or 2**16)
    if kind in ("csv", "parquet"):
        return table(arg, label=label, categorical=categorical, rows=rows,
                     buckets=buckets or 2**16)
    raise ConfigError(
        f"Unknown data {spec!r}; expected synthetic[:ROWS], criteo:PATH, csv:PATH or "
        f"parquet:PATH.{did_you_mean(kind, DATA_KINDS)}"
    )


def from_spec(spec: str, data: Any = None) -> Trainer:
    """A trainer from the CLI's ``--trainer`` string; raises `ConfigError` with the fix.

    `data` is the CTR data set for a built-in trainer (default: the synthetic one).
    """
    if spec in BUILTIN:
        return BUILTIN[spec].build(load_data("synthetic") if data is None else data)
    if spec.startswith("lightning:"):
        return lightning(_import_function(spec.removeprefix("lightning:")))
    if ":" not in spec:
        raise ConfigError(
            f"Unknown trainer {spec!r}. Use one of: {', '.join(BUILTIN)} (built-in CTR task), "
            "package.module:function for your own code, or lightning:package.module:factory "
            f"for your own LightningModule.{did_you_mean(spec, BUILTIN)}"
        )
    return callable(_import_function(spec))


def _import_function(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.rpartition(":")
    # Like `python -m`, let people name modules in the directory they run from.
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ConfigError(
            f"Trainer {spec!r}: cannot import module {module_name!r} ({e}). Run tune from the "
            "directory that holds it, install its package, or check the spelling."
        ) from None
    fn = getattr(module, attr, None)
    if fn is None or not builtins.callable(fn):
        names = [n for n, v in vars(module).items()
                 if builtins.callable(v) and not n.startswith("_")]
        raise ConfigError(
            f"Trainer {spec!r}: module {module_name!r} has no function {attr!r}."
            f"{did_you_mean(attr, names)} It defines: {', '.join(sorted(names)) or 'none'}."
        )
    return fn

