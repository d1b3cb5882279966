"""A seeded, Criteo-shaped synthetic CTR data set with a planted ground truth.

13 integer count features (log-normal, some missing) and 26 categorical fields (skewed value
frequencies, cardinalities from 3 to 200k, hashed into buckets). The click probability comes from
a planted logistic model with dense effects, per-category effects, and interactions (dense x
dense, a threshold, and a pair of categorical fields), so that model capacity, learning rate
and regularisation all matter. Because the true probabilities are known, the Bayes-optimal
log-loss is reported: no model can do better on average.

Generated data is cached under ``$TUNEPILOT_CACHE`` (default ``~/.cache/tunepilot``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from tunepilot.trainers.data.ctr import (
    CTRData,
    Split,
    base_rate_logloss,
    hash_buckets,
    log_loss,
    standardise,
)

_VERSION = 1  # bump when the generator changes, so stale caches are not reused
N_DENSE, N_FIELDS = 13, 26
# Criteo's fields range from a handful of values to millions; scaled down to stay cheap.
_CARDINALITIES = (
    1_400, 550, 200_000, 90_000, 300, 24, 12_000, 630, 3, 27_000,
    5_000, 150_000, 3_000, 26, 10_000, 80_000, 10, 4_000, 2_000, 4,
    120_000, 17, 15, 40_000, 100, 30_000,
)
_EFFECT_FIELDS = (0, 1, 4, 5, 7, 8, 12, 13, 16, 19, 21, 22)  # fields that move the click rate
_PAIR = (5, 13)  # a categorical x categorical interaction


def synthetic(rows: int = 20_000, *, seed: int = 0, buckets: int = 1024,
              val_fraction: float = 0.2, cache: bool = True) -> CTRData:
    """The synthetic CTR data set (rows split into train and validation at a fixed point).

    Example:
        >>> data = synthetic(2_000, seed=1, cache=False)
        >>> data.train.cat.shape, round(data.bayes_logloss, 2) < round(data.base_logloss, 2)
        ((1600, 26), True)
    """
    if rows < 100:
        raise ValueError(f"rows must be at least 100, found {rows}")
    path = cache_dir() / f"synthetic-v{_VERSION}-{rows}-{seed}.npz"
    if cache and path.exists():
        with np.load(path) as f:
            dense_raw, values, y, p = f["dense"], f["values"], f["y"], f["p"]
    else:
        dense_raw, values, y, p = _generate(rows, seed)
        if cache:
            _save_atomic(path, dense=dense_raw, values=values, y=y, p=p)

    cat = np.stack([hash_buckets(values[:, f], f, buckets) for f in range(N_FIELDS)], axis=1)
    n_val = max(1, int(rows * val_fraction))
    cut = rows - n_val
    dense_tr, dense_va = standardise(dense_raw[:cut], dense_raw[cut:])
    train = Split(dense_tr, cat[:cut], y[:cut])
    val = Split(dense_va, cat[cut:], y[cut:])
    return CTRData(
        name=f"synthetic CTR (seed {seed})",
        train=train,
        val=val,
        buckets=buckets,
        base_logloss=base_rate_logloss(train.y, val.y),
        bayes_logloss=log_loss(val.y, p[cut:]),
    )


def _generate(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # The planted model is drawn from a FIXED seed so every data seed shares one ground truth;
    # `seed` only changes which rows are sampled.
    truth = np.random.default_rng(12345)
    rng = np.random.default_rng(seed)

    mu = truth.uniform(0.0, 4.0, N_DENSE)
    sigma = truth.uniform(0.5, 1.5, N_DENSE)
    missing = truth.uniform(0.0, 0.3, N_DENSE)
    dense = np.floor(np.exp(rng.normal(mu, sigma, (rows, N_DENSE))))
    dense[rng.random((rows, N_DENSE)) < missing] = np.nan

    # Skewed category frequencies: value = floor(card * u**3) puts most mass on a few values.
    cards = np.array(_CARDINALITIES)
    values = np.floor(cards * rng.random((rows, N_FIELDS)) ** 3).astype(np.int64)

    # Population-standardised log counts drive the truth (missing -> 0, as the model sees it).
    z = np.log1p(np.nan_to_num(dense, nan=0.0))
    z = (z - np.log1p(np.exp(mu))) / sigma

    w = truth.normal(0.0, 0.3, N_DENSE) * (truth.random(N_DENSE) < 0.7)
    logit = z @ w + 0.45 * z[:, 0] * z[:, 1] - 0.6 * np.maximum(z[:, 2] - 0.5, 0.0)
    for f in _EFFECT_FIELDS:
        # Only the 300 most frequent values carry an effect; the long tail is noise.
        effect = truth.normal(0.0, 0.6, 300)
        v = values[:, f]
        logit += np.where(v < 300, effect[np.minimum(v, 299)], 0.0)
    a, b = _PAIR
    pair_effect = truth.normal(0.0, 0.7, (_CARDINALITIES[a], _CARDINALITIES[b]))
    logit += pair_effect[values[:, a], values[:, b]]

    # Shift so that about a quarter of the rows are clicks, as in Criteo.
    lo, hi = -10.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if (1 / (1 + np.exp(-(logit + mid)))).mean() < 0.25:
            lo = mid
        else:
            hi = mid
    p = 1 / (1 + np.exp(-(logit + lo)))
    y = (rng.random(rows) < p).astype(np.float32)
    return dense.astype(np.float32), values.astype(np.int32), y, p.astype(np.float32)


def cache_dir() -> Path:
    """Where tunepilot caches data and compiled programs ($TUNEPILOT_CACHE)."""
    return Path(os.environ.get("TUNEPILOT_CACHE", Path.home() / ".cache" / "tunepilot"))


def _save_atomic(path: Path, **arrays: np.ndarray) -> None:
    # Two processes may generate the same file at once (parallel workers): write, then rename.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
