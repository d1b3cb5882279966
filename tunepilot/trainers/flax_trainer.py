"""A trainer for your own Flax NNX model: you give the model, the loss and the data.

The loop: Optax Adam (learning rate and weight decay from the config, injected so a new value
does not recompile), shuffled mini-batches of a fixed size (the ragged tail of each epoch is
dropped, so one compiled step serves the whole search), validation loss after every epoch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from tunepilot.errors import ConfigError, Diverged
from tunepilot.trainers.base import PeakMemory, Report, TrainResult

ModelFactory = Callable[[Mapping[str, Any], nnx.Rngs], nnx.Module]
LossFn = Callable[[nnx.Module, Any], jax.Array]

_TX = optax.inject_hyperparams(optax.adamw)


def _train_step(loss_fn: LossFn, model: nnx.Module, optimizer: nnx.Optimizer,
                batch: Any) -> jax.Array:
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
    optimizer.update(model, grads)
    return loss


def _eval_step(loss_fn: LossFn, model: nnx.Module, batch: Any) -> jax.Array:
    return loss_fn(model, batch)


# loss_fn is static: the same function object reuses the compiled step across trials.
train_step = nnx.jit(_train_step, static_argnums=0, donate_argnums=(1, 2))
eval_step = nnx.jit(_eval_step, static_argnums=0)


StepFn = Callable[[nnx.Module, nnx.Optimizer, Any], Any]


def user_model(model_factory: ModelFactory, loss_fn: LossFn, data: tuple[Any, Any],
               optimizer: Callable[[Mapping[str, Any]], optax.GradientTransformation] | None
               = None, step: Callable[[Mapping[str, Any]], StepFn] | None = None,
               ) -> Callable[[Mapping[str, Any], Report], TrainResult]:
    """A trainer for your own Flax model; see `tunepilot.trainers.flax`. `optimizer(config)`:
    your own Optax transformation (default: AdamW with the config's lr and weight_decay).
    `step(config)`: your own train step, ``step(model, optimizer, batch) -> loss`` (jit it
    yourself; default: one `nnx.value_and_grad` of `loss_fn` and an optimizer update)."""
    make_optimizer = optimizer  # the name `optimizer` is the nnx.Optimizer of a trial below
    train_data, val_data = data
    n_train, n_val = _length(train_data, "training"), _length(val_data, "validation")

    def train(config: Mapping[str, Any], report: Report) -> TrainResult:
        seed = int(config.get("seed", 0))
        batch_size = min(int(config.get("batch_size", 256)), n_train)
        model = model_factory(config, nnx.Rngs(seed))
        tx = make_optimizer(config) if make_optimizer is not None else _TX(
            learning_rate=float(config.get("lr", 1e-3)),
            weight_decay=float(config.get("weight_decay", 0.0)))
        optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        own_step = step(config) if step is not None else None
        rng = np.random.default_rng(seed)
        curve: list[float] = []
        start, peak = time.perf_counter(), PeakMemory()
        for epoch in range(1, int(config.get("epochs", 1)) + 1):
            model.train()
            order = rng.permutation(n_train)
            for i in range(n_train // batch_size):
                idx = order[i * batch_size:(i + 1) * batch_size]
                if own_step is not None:
                    own_step(model, optimizer, _take(train_data, idx))
                else:
                    train_step(loss_fn, model, optimizer, _take(train_data, idx))
            model.eval()
            total = 0.0
            for i in range(0, n_val, batch_size):
                idx = np.arange(i, min(i + batch_size, n_val))
                total += float(eval_step(loss_fn, model, _take(val_data, idx))) * len(idx)
            loss = total / n_val
            curve.append(loss)
            if not math.isfinite(loss):
                raise Diverged(epoch, loss)
            report(epoch, loss)
        return TrainResult(min(curve), tuple(curve), time.perf_counter() - start,
                           peak_memory_mb=peak.mb())

    train.__name__ = getattr(model_factory, "__name__", "flax")
    return train


def _length(tree: Any, what: str) -> int:
    sizes = {np.shape(leaf)[0] for leaf in jax.tree.leaves(tree) if np.ndim(leaf) > 0}
    if len(sizes) != 1:
        raise ConfigError(
            f"The {what} data must be arrays (or a dict/tuple of arrays) with one common first "
            f"dimension; found first dimensions {sorted(sizes) or 'none'}."
        )
    return sizes.pop()


def _take(tree: Any, idx: np.ndarray) -> Any:
    return jax.tree.map(lambda a: jnp.asarray(np.asarray(a)[idx]), tree)
