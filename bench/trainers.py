"""Trainer throughput: the built-in Lightning and JAX trainers against hand-written loops.

Runs, in one process and on the same model and data, one epoch of:
  torch naive       plain torch, default Adam, sliced batches (the seed's reference)
  torch fused       plain torch, fused Adam (dense embedding gradients), sliced batches
  torch best        plain torch, SparseAdam on the embedding + fused Adam on the MLP
  lightning         tunepilot's built-in Lightning trainer (default: lazy embedding Adam)
  lightning dense   the same with sparse_embeddings=false (dense fused Adam)
  jax best          plain JAX, a jitted per-step function with donated buffers, Optax Adam
  jax built-in      tunepilot's built-in JAX trainer (default: lazy embedding Adam)
  jax dense         the same with sparse_embeddings=false
and prints samples/s, the ratio to the best hand-written loop of the same framework, start-up or
compile time, validation log-loss after the epoch, the fraction of the machine's measured matmul
peak each reaches, and a per-phase breakdown (data, forward, backward, optimizer).

    python bench/trainers.py                  # 200k rows, b2048, fp32 (about 4 minutes here)
    python bench/trainers.py --quick          # 40k rows: a smoke run in about a minute
    python bench/trainers.py --batch-size 8192 --precision bf16-mixed

This is a benchmark, not a test: the machine is shared and noisy, so figures are printed, never
asserted. Ratios are measured within one run.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from tunepilot.trainers.base import no_report
from tunepilot.trainers.data import synthetic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--quick", action="store_true", help="40k rows")
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    ap.add_argument("--buckets", type=int, default=2**16)
    ap.add_argument("--emb-dim", type=int, default=16)
    ap.add_argument("--hidden", default="400-400-400")
    ap.add_argument("--only", default="", help="comma list of variants to run")
    args = ap.parse_args()
    rows = 40_000 if args.quick else args.rows
    hidden = tuple(int(h) for h in args.hidden.split("-"))

    data = synthetic(rows, buckets=args.buckets)
    cfg = {"lr": 1e-3, "batch_size": args.batch_size, "precision": args.precision,
           "dropout": 0.1, "epochs": 1, "emb_dim": args.emb_dim, "hidden": args.hidden}
    n_params = data.n_fields * args.buckets * args.emb_dim + _mlp_params(data, args.emb_dim, hidden)
    flops_per_sample = 3 * _mlp_forward_flops(data, args.emb_dim, hidden)  # fwd + 2x bwd

    import torch

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads, python {platform.python_version()}")
    print(f"data: {data.describe()}")
    print(f"model: emb {args.emb_dim} x {data.n_fields} fields x {args.buckets} buckets + MLP "
          f"{args.hidden}: {n_params / 1e6:.1f}M parameters; {flops_per_sample / 1e6:.2f} "
          f"MFLOP per training sample; batch {args.batch_size}, {args.precision}, 1 epoch")
    peak = matmul_peak(args.precision)
    print(f"matmul peak (measured, {args.precision}): {peak / 1e9:.0f} GFLOP/s\n")

    dense = {**cfg, "sparse_embeddings": False}
    variants = {
        "torch naive": lambda: torch_loop(data, cfg, fused=False, sparse=False),
        "torch fused": lambda: torch_loop(data, cfg, fused=True, sparse=False),
        "torch best": lambda: torch_loop(data, cfg, fused=True, sparse=True),
        "lightning": lambda: builtin("lightning", data, cfg),
        "lightning dense": lambda: builtin("lightning", data, dense),
        "jax best": lambda: jax_loop(data, cfg),
        "jax built-in": lambda: builtin("jax", data, cfg),
        "jax dense": lambda: builtin("jax", data, dense),
    }
    only = [v.strip() for v in args.only.split(",") if v.strip()]
    results = {}
    for name, fn in variants.items():
        if only and name not in only:
            continue
        results[name] = fn()
        r = results[name]
        print(f"  ran {name}: {r['sps']:,.0f} samples/s", flush=True)

    reference = {"torch naive": "torch best", "torch fused": "torch best",
                 "torch best": "torch best", "lightning": "torch best",
                 "lightning dense": "torch fused", "jax best": "jax best",
                 "jax built-in": "jax best", "jax dense": "jax best"}
    print("vs best: ratio to the hand-written loop of the same framework and algorithm "
          "(lightning -> torch best, lightning dense -> torch fused, jax -> jax best)")
    print(f"\n{'variant':<16} {'samples/s':>10} {'vs best':>8} {'vs naive':>9} {'startup s':>10} "
          f"{'val loss':>9} {'% peak':>7}")
    for name, r in results.items():
        ref = results.get(reference[name])
        vs_best = f"{r['sps'] / ref['sps']:.2f}x" if ref else "-"
        naive = results.get("torch naive")
        vs_naive = f"{r['sps'] / naive['sps']:.2f}x" if naive else "-"
        print(f"{name:<16} {r['sps']:>10,.0f} {vs_best:>8} {vs_naive:>9} {r['startup']:>10.2f} "
              f"{r['val_loss']:>9.4f} {100 * r['sps'] * flops_per_sample / peak:>6.1f}%")
    print(f"\n(validation log-loss: base rate {data.base_logloss:.4f}, Bayes-optimal "
          f"{data.bayes_logloss:.4f})")
    for name, r in results.items():
        if r.get("phases"):
            total = sum(r["phases"].values())
            parts = ", ".join(f"{k} {1e3 * v:.1f} ms ({100 * v / total:.0f}%)"
                              for k, v in r["phases"].items())
            print(f"per step, {name}: {parts}")


def _mlp_params(data, emb_dim: int, hidden: tuple[int, ...]) -> int:
    widths = (data.n_fields * emb_dim + data.n_dense, *hidden, 1)
    return sum(a * b + b for a, b in itertools.pairwise(widths))


def _mlp_forward_flops(data, emb_dim: int, hidden: tuple[int, ...]) -> int:
    widths = (data.n_fields * emb_dim + data.n_dense, *hidden, 1)
    return sum(2 * a * b for a, b in itertools.pairwise(widths))


def matmul_peak(precision: str) -> float:
    import torch

    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float32
    a = torch.randn(2048, 2048, dtype=dtype)
    b = torch.randn(2048, 2048, dtype=dtype)
    for _ in range(2):
        a @ b
    best = math.inf
    for _ in range(5):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * 2048**3 / best


def builtin(kind: str, data, cfg) -> dict:
    t = time.perf_counter()
    if kind == "lightning":
        from tunepilot.trainers.lightning_trainer import train_ctr
    else:
        from tunepilot.trainers.jax_trainer import train_ctr
    imported = time.perf_counter() - t
    result = train_ctr(cfg, no_report, data=data)
    train_s = len(data.train) / result.samples_per_s
    # start-up: import + set-up + compilation + one validation pass
    return {"sps": result.samples_per_s, "val_loss": result.best_val_loss,
            "startup": imported + result.wall_time_s - train_s, "phases": None}


def torch_loop(data, cfg, fused: bool, sparse: bool) -> dict:
    import torch
    from torch import nn

    from tunepilot.trainers.ctr_config import parse_config
    from tunepilot.trainers.lightning_trainer import CTRNet

    c = parse_config(cfg)
    t0 = time.perf_counter()
    torch.manual_seed(c.seed)
    net = CTRNet(data.n_fields, data.buckets, data.n_dense, c.emb_dim, c.hidden, c.dropout,
                 sparse=sparse)
    if sparse:
        opts = [torch.optim.SparseAdam([net.embedding.weight], lr=c.lr),
                torch.optim.Adam(net.mlp.parameters(), lr=c.lr, fused=fused)]
    else:
        opts = [torch.optim.Adam(net.parameters(), lr=c.lr, fused=fused)]
    dense, cat, y = (torch.from_numpy(data.train.dense), torch.from_numpy(data.train.cat).long(),
                     torch.from_numpy(data.train.y))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=c.precision == "bf16-mixed")
    startup = time.perf_counter() - t0
    phases = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    steps = 0
    start = time.perf_counter()
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(c.seed))
    for idx in perm.split(c.batch_size):
        t = time.perf_counter()
        xb, cb, yb = dense[idx], cat[idx], y[idx]
        t1 = time.perf_counter()
        with autocast:
            loss = nn.functional.binary_cross_entropy_with_logits(net(xb, cb).float(), yb)
        t2 = time.perf_counter()
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        for opt in opts:
            opt.step()
        t4 = time.perf_counter()
        for k, v in zip(phases, (t1 - t, t2 - t1, t3 - t2, t4 - t3), strict=True):
            phases[k] += v
        steps += 1
    elapsed = time.perf_counter() - start
    net.eval()
    with torch.no_grad(), autocast:
        logits = net(torch.from_numpy(data.val.dense), torch.from_numpy(data.val.cat).long())
        val = nn.functional.binary_cross_entropy_with_logits(
            logits.float(), torch.from_numpy(data.val.y)).item()
    return {"sps": len(y) / elapsed, "val_loss": val, "startup": startup,
            "phases": {k: v / steps for k, v in phases.items()}}


def jax_loop(data, cfg) -> dict:
    """The best plain-JAX loop we could write: one jitted, donated step per batch."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from tunepilot.trainers.ctr_config import parse_config
    from tunepilot.trainers.jax_trainer import _DTYPES, CTRFlax

    c = parse_config(cfg)
    t0 = time.perf_counter()
    model = CTRFlax(data.n_fields, data.buckets, data.n_dense, c.emb_dim, c.hidden,
                    dtype=_DTYPES[c.precision], rngs=nnx.Rngs(params=c.seed))
    graphdef, params = nnx.split(model)
    tx = optax.adam(c.lr)
    opt_state = tx.init(params)
    dense, cat, y = (jnp.asarray(data.train.dense), jnp.asarray(data.train.cat),
                     jnp.asarray(data.train.y))

    def loss_fn(p, xb, cb, yb, key):
        logits = nnx.merge(graphdef, p)(xb, cb, c.dropout, key)
        return optax.sigmoid_binary_cross_entropy(logits, yb).mean()

    @jax.jit
    def forward(p, xb, cb, yb, key):
        return loss_fn(p, xb, cb, yb, key)

    @jax.jit
    def backward(p, xb, cb, yb, key):
        return jax.grad(loss_fn)(p, xb, cb, yb, key)

    @functools_partial_donate
    def update(p, s, g):
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s

    @functools_partial_donate
    def step(p, s, xb, cb, yb, key):
        loss, g = jax.value_and_grad(loss_fn)(p, xb, cb, yb, key)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    n = len(data.train)
    steps = n // c.batch_size  # drop the ragged last batch: one compiled shape
    perm = jnp.asarray(np.random.default_rng(c.seed).permutation(n)[: steps * c.batch_size]
                       .reshape(steps, c.batch_size))
    key = jax.random.key(c.seed)
    xb, cb, yb = dense[perm[0]], cat[perm[0]], y[perm[0]]
    params, opt_state, loss = step(params, opt_state, xb, cb, yb, key)  # compile
    loss.block_until_ready()
    startup = time.perf_counter() - t0
    start = time.perf_counter()
    for i in range(1, steps):
        idx = perm[i]
        key, sub = jax.random.split(key)
        params, opt_state, loss = step(params, opt_state, dense[idx], cat[idx], y[idx], sub)
    loss.block_until_ready()
    elapsed = time.perf_counter() - start

    # Phases: the same work as separate jitted calls on one batch, timed with a sync each.
    idx = perm[1]
    xb, cb, yb = dense[idx], cat[idx], y[idx]
    forward(params, xb, cb, yb, key).block_until_ready()
    grads = backward(params, xb, cb, yb, key)
    jax.block_until_ready(grads)
    params, opt_state = update(params, opt_state, grads)
    phases = {"data": 0.0, "forward": 0.0, "backward (incl. forward)": 0.0, "optimizer": 0.0}
    reps = 5
    for _ in range(reps):
        t = time.perf_counter()
        xb, cb, yb = dense[idx], cat[idx], y[idx]
        jax.block_until_ready((xb, cb, yb))
        t1 = time.perf_counter()
        forward(params, xb, cb, yb, key).block_until_ready()
        t2 = time.perf_counter()
        grads = backward(params, xb, cb, yb, key)
        jax.block_until_ready(grads)
        t3 = time.perf_counter()
        params, opt_state = update(params, opt_state, grads)
        jax.block_until_ready(params)
        t4 = time.perf_counter()
        for k, v in zip(phases, (t1 - t, t2 - t1, t3 - t2, t4 - t3), strict=True):
            phases[k] += v / reps

    logits = nnx.merge(graphdef, params)(jnp.asarray(data.val.dense), jnp.asarray(data.val.cat))
    val = float(optax.sigmoid_binary_cross_entropy(logits, jnp.asarray(data.val.y)).mean())
    return {"sps": (steps - 1) * c.batch_size / elapsed, "val_loss": val, "startup": startup,
            "phases": phases}


def functools_partial_donate(fn):
    import jax

    return jax.jit(fn, donate_argnums=(0, 1))


if __name__ == "__main__":
    main()
