"""The built-in CTR task on JAX: the same model as the Lightning one, in Flax NNX + Optax.

Speed choices (bench/README.md#trainers):
- A whole epoch is ONE jitted call: `lax.scan` over batches, batches gathered on the device from a
  per-epoch permutation. No Python dispatch and no host sync per step.
- The ragged last batch is padded and masked, so every step has one shape: one compilation per
  (batch size, precision, model shape), reused by every later trial with the same shape.
- The learning rate, weight decay and dropout rate are traced values (Optax
  `inject_hyperparams`, dropout from a traced rate), so trials that differ only in them reuse
  the compiled epoch.
- Parameters and optimizer state are donated to the step, so XLA updates them in place.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from tunepilot.errors import ConfigError, Diverged
from tunepilot.trainers.base import PeakMemory, Report, TrainResult
from tunepilot.trainers.ctr_config import EXPLODED, CTRConfig, parse_config
from tunepilot.trainers.data.ctr import CTRData, Split

_DTYPES = {"32-true": jnp.float32, "bf16-mixed": jnp.bfloat16}
_EVAL_CHUNK = 8192
_compile_seconds = [0.0]  # tracing + lowering + XLA compilation in this process


def _count_compile_time(event: str, seconds: float, **_: Any) -> None:
    if event.startswith("/jax/core/compile/"):
        _compile_seconds[0] += seconds


jax.monitoring.register_event_duration_secs_listener(_count_compile_time)

# Compiled programs persist on disk, so isolated trials (one process each) and resumed runs do
# not compile the same epoch again. Only programs that took a while are worth a file.
if jax.config.jax_compilation_cache_dir is None:
    from tunepilot.trainers.data.synthetic import cache_dir

    jax.config.update("jax_compilation_cache_dir", str(cache_dir() / "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def _torch_like_kernel(key: jax.Array, shape: tuple[int, ...],
                       dtype: Any = jnp.float32) -> jax.Array:
    # torch.nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)); same start as Lightning.
    bound = 1.0 / math.sqrt(shape[0])
    return jax.random.uniform(key, shape, dtype, -bound, bound)


def _torch_like_bias(fan_in: int) -> Any:
    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        bound = 1.0 / math.sqrt(fan_in)
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class CTRFlax(nnx.Module):
    """Embeddings of every field (one table) + dense features -> MLP with dropout -> 1 logit."""

    def __init__(self, n_fields: int, buckets: int, n_dense: int, emb_dim: int,
                 hidden: tuple[int, ...], *, dtype: Any = jnp.float32, rngs: nnx.Rngs):
        self.n_fields, self.buckets = n_fields, buckets
        self.embedding = nnx.Embed(n_fields * buckets, emb_dim, dtype=dtype,
                                   embedding_init=nnx.initializers.normal(0.01), rngs=rngs)
        widths = (n_fields * emb_dim + n_dense, *hidden)
        self.layers = nnx.List([
            nnx.Linear(a, b, dtype=dtype, kernel_init=_torch_like_kernel,
                       bias_init=_torch_like_bias(a), rngs=rngs)
            for a, b in itertools.pairwise(widths)
        ])
        self.head = nnx.Linear(widths[-1], 1, dtype=dtype, kernel_init=_torch_like_kernel,
                               bias_init=_torch_like_bias(widths[-1]), rngs=rngs)
        self.dtype = dtype

    def __call__(self, dense: jax.Array, cat: jax.Array, dropout: jax.Array | float = 0.0,
                 key: jax.Array | None = None) -> jax.Array:
        return self.top(self.embedding(self.ids(cat)), dense, dropout, key)

    def ids(self, cat: jax.Array) -> jax.Array:
        """Rows of the shared table for per-field bucket ids [batch, fields]."""
        return cat + jnp.arange(self.n_fields, dtype=cat.dtype) * self.buckets

    def top(self, rows: jax.Array, dense: jax.Array, dropout: jax.Array | float = 0.0,
            key: jax.Array | None = None) -> jax.Array:
        """The MLP over embedding rows [batch, fields, dim] and dense features."""
        x = jnp.concatenate([rows.reshape(rows.shape[0], -1).astype(self.dtype),
                             dense.astype(self.dtype)], axis=1)
        for i, layer in enumerate(self.layers):
            x = jax.nn.relu(layer(x))
            if key is not None:
                # Inverted dropout with a TRACED rate: a new rate does not recompile.
                keep = jax.random.bernoulli(jax.random.fold_in(key, i), 1.0 - dropout, x.shape)
                x = jnp.where(keep, x / (1.0 - dropout), 0).astype(x.dtype)
        return self.head(x)[:, 0].astype(jnp.float32)  # loss in float32 under bf16


def _adam_l2(learning_rate: float, weight_decay: float) -> optax.GradientTransformation:
    # torch.optim.Adam's weight_decay is an L2 term added to the gradient; match it.
    return optax.chain(optax.add_decayed_weights(weight_decay), optax.adam(learning_rate))


# One transformation for every trial: the hyperparameters live in the optimizer state.
_TX = optax.inject_hyperparams(_adam_l2)


class DeviceData(NamedTuple):
    dense: jax.Array
    cat: jax.Array
    y: jax.Array


@functools.lru_cache(maxsize=4)
def _on_device(split: Split) -> DeviceData:
    # Cached per split object: trials of one search share one copy on the device.
    return DeviceData(jnp.asarray(split.dense), jnp.asarray(split.cat), jnp.asarray(split.y))


class TableState(NamedTuple):
    """Adam moments of the embedding table, kept outside Optax so rows can be updated lazily."""

    mu: jax.Array
    nu: jax.Array
    count: jax.Array


_B1, _B2, _EPS = 0.9, 0.999, 1e-8  # optax.adam's and torch's defaults


def _table_update(table: jax.Array, state: TableState, ids: jax.Array, row_grads: jax.Array,
                  lr: jax.Array, weight_decay: jax.Array, lazy: bool
                  ) -> tuple[jax.Array, TableState]:
    """Adam on the embedding table from the gradients of the rows a batch gathered.

    lazy=True is torch's SparseAdam: duplicate rows are summed, and only the touched rows'
    parameters and moments change. lazy=False is dense Adam (with L2 weight decay) over every row,
    as torch.optim.Adam does.
    """
    count = state.count + 1
    c1, c2 = 1 - _B1**count, 1 - _B2**count
    flat_ids = ids.reshape(-1)
    flat_grads = row_grads.reshape(flat_ids.shape[0], -1)
    if lazy:
        n = flat_ids.shape[0]
        rows, inverse = jnp.unique(flat_ids, size=n, fill_value=table.shape[0],
                                   return_inverse=True)
        g = jnp.zeros_like(flat_grads).at[inverse.reshape(-1)].add(flat_grads)
        mu = _B1 * state.mu.at[rows].get(mode="fill", fill_value=0) + (1 - _B1) * g
        nu = _B2 * state.nu.at[rows].get(mode="fill", fill_value=0) + (1 - _B2) * g * g
        step = lr * (mu / c1) / (jnp.sqrt(nu / c2) + _EPS)
        return (table.at[rows].add(-step, mode="drop"),
                TableState(state.mu.at[rows].set(mu, mode="drop"),
                           state.nu.at[rows].set(nu, mode="drop"), count))
    g = jnp.zeros_like(table).at[flat_ids].add(flat_grads) + weight_decay * table
    mu = _B1 * state.mu + (1 - _B1) * g
    nu = _B2 * state.nu + (1 - _B2) * g * g
    return table - lr * (mu / c1) / (jnp.sqrt(nu / c2) + _EPS), TableState(mu, nu, count)


@functools.partial(jax.jit, static_argnums=(0, 8), donate_argnums=(1, 2))
def train_epoch(graphdef: nnx.GraphDef, params: nnx.State, opt_state: tuple[Any, TableState],
                data: DeviceData, batches: jax.Array, weights: jax.Array, dropout: jax.Array,
                key: jax.Array, lazy: bool) -> tuple[nnx.State, Any, jax.Array]:
    """One epoch: `batches` [steps, batch] row indices, `weights` 0 on padding rows."""
    tx = _TX(learning_rate=0.0, weight_decay=0.0)  # values come from opt_state.hyperparams
    table_state, rest = nnx.split_state(params, nnx.PathContains("embedding"), ...)
    (table,), table_def = jax.tree.flatten(table_state)

    def step(carry, xs):
        table, rest, (mlp_opt, table_opt) = carry
        idx, weight, step_key = xs
        model = nnx.merge(graphdef, table_state, rest)
        ids = model.ids(data.cat[idx])

        def loss_fn(rest: nnx.State, rows: jax.Array) -> jax.Array:
            logits = nnx.merge(graphdef, table_state, rest).top(rows, data.dense[idx], dropout,
                                                                step_key)
            losses = optax.sigmoid_binary_cross_entropy(logits, data.y[idx])
            return jnp.sum(losses * weight) / jnp.maximum(jnp.sum(weight), 1.0)

        loss, (rest_grads, row_grads) = jax.value_and_grad(loss_fn, argnums=(0, 1))(
            rest, table[ids])
        updates, mlp_opt = tx.update(rest_grads, mlp_opt, rest)
        hp = mlp_opt.hyperparams
        table, table_opt = _table_update(table, table_opt, ids, row_grads,
                                         hp["learning_rate"], hp["weight_decay"], lazy)
        return (table, optax.apply_updates(rest, updates), (mlp_opt, table_opt)), loss

    keys = jax.random.split(key, batches.shape[0])
    (table, rest, opt_state), losses = jax.lax.scan(step, (table, rest, opt_state),
                                                    (batches, weights, keys))
    params = nnx.merge_state(jax.tree.unflatten(table_def, [table]), rest)
    return params, opt_state, losses


@functools.partial(jax.jit, static_argnums=0)
def eval_loss_sum(graphdef: nnx.GraphDef, params: nnx.State, data: DeviceData,
                  chunks: jax.Array, weights: jax.Array) -> jax.Array:
    model = nnx.merge(graphdef, params)

    def chunk(total, xs):
        idx, weight = xs
        logits = model(data.dense[idx], data.cat[idx])
        losses = optax.sigmoid_binary_cross_entropy(logits, data.y[idx])
        return total + jnp.sum(losses * weight), None

    total, _ = jax.lax.scan(chunk, jnp.zeros((), jnp.float32), (chunks, weights))
    return total


def padded_batches(order: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """[steps, batch] indices and 0/1 weights; the last batch is padded with masked rows."""
    n = len(order)
    steps = max(1, math.ceil(n / batch_size))
    idx = np.zeros(steps * batch_size, dtype=np.int32)
    idx[:n] = order
    weight = np.zeros(steps * batch_size, dtype=np.float32)
    weight[:n] = 1.0
    return idx.reshape(steps, batch_size), weight.reshape(steps, batch_size)


def compilations() -> int:
    """How many epoch/eval programs have been compiled in this process (for tests, benches)."""
    return train_epoch._cache_size() + eval_loss_sum._cache_size()


def train_ctr(config: Mapping[str, Any], report: Report, *, data: CTRData) -> TrainResult:
    """Trains the CTR model on `data` with `config`; returns the best validation log-loss."""
    cfg = parse_config(config)
    if cfg.precision not in _DTYPES:
        raise ConfigError(
            f"precision {cfg.precision!r} is not available on the JAX trainer; use one of "
            f"{sorted(_DTYPES)} (bf16-mixed computes in bfloat16 with float32 parameters)."
        )
    start = time.perf_counter()
    peak = PeakMemory()
    compiled_before = compilations()
    graphdef, params, opt_state = init_state(data, cfg)
    train, val = _on_device(data.train), _on_device(data.val)
    val_idx, val_w = padded_batches(np.arange(len(data.val), dtype=np.int32),
                                    min(_EVAL_CHUNK, len(data.val)))
    val_idx, val_w = jnp.asarray(val_idx), jnp.asarray(val_w)
    rng = np.random.default_rng(cfg.seed)
    key = nnx.Rngs(dropout=cfg.seed).dropout()  # the dropout stream; split once per epoch
    dropout = jnp.float32(cfg.dropout)
    explode_at = EXPLODED * data.base_logloss
    curve: list[float] = []
    train_time = 0.0
    compile_before = _compile_seconds[0]
    for epoch in range(1, cfg.epochs + 1):
        t0, c0 = time.perf_counter(), _compile_seconds[0]
        batches, weights = padded_batches(rng.permutation(len(data.train)).astype(np.int32),
                                          cfg.batch_size)
        key, epoch_key = jax.random.split(key)
        params, opt_state, losses = train_epoch(graphdef, params, opt_state, train,
                                                jnp.asarray(batches), jnp.asarray(weights),
                                                dropout, epoch_key, cfg.sparse_embeddings)
        losses.block_until_ready()
        train_time += time.perf_counter() - t0 - (_compile_seconds[0] - c0)
        loss = float(eval_loss_sum(graphdef, params, val, val_idx, val_w)) / len(data.val)
        curve.append(loss)
        if not math.isfinite(loss) or not bool(jnp.isfinite(losses).all()):
            raise Diverged(epoch, loss)
        if loss > explode_at:
            raise Diverged(epoch, loss, f", over {explode_at:.3g} ({EXPLODED} x the base "
                           "rate's): the training blew up")
        report(epoch, loss)
    return TrainResult(
        best_val_loss=min(curve),
        curve=tuple(curve),
        wall_time_s=time.perf_counter() - start,
        samples_per_s=len(data.train) * cfg.epochs / max(train_time, 1e-9),
        peak_memory_mb=peak.mb(),
        extra={"compilations": compilations() - compiled_before,
               "compile_s": _compile_seconds[0] - compile_before,
               "device": f"jax:{jax.devices()[0].device_kind}"},
    )


def init_state(data: CTRData, cfg: CTRConfig) -> tuple[nnx.GraphDef, nnx.State, Any]:
    """The model's graph and parameters; Optax state of the MLP and Adam state of the table."""
    model = CTRFlax(data.n_fields, data.buckets, data.n_dense, cfg.emb_dim, cfg.hidden,
                    dtype=_DTYPES[cfg.precision], rngs=nnx.Rngs(params=cfg.seed))
    graphdef, params = nnx.split(model)
    table_state, rest = nnx.split_state(params, nnx.PathContains("embedding"), ...)
    # Lazy tables take no weight decay (as torch's SparseAdam); dense ones take L2 as Adam does.
    mlp_opt = _TX(learning_rate=cfg.lr, weight_decay=cfg.weight_decay).init(rest)
    (table,) = jax.tree.leaves(table_state)
    table_opt = TableState(jnp.zeros_like(table), jnp.zeros_like(table), jnp.zeros((), jnp.int32))
    return graphdef, params, (mlp_opt, table_opt)
