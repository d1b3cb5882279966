"""The click-through-rate data every built-in trainer reads: dense counts + hashed categories.

One layout for both backends: ``dense`` float32 [n, 13] already log-transformed and standardised
with statistics of the training split only, ``cat`` int32 [n, fields] bucket ids in
``[0, buckets)`` per field, ``y`` float32 [n] in {0, 1}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: device caches key on it
class Split:
    dense: np.ndarray
    cat: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class CTRData:
    """A train/validation pair plus the reference log-losses that tell users where the floor is."""

    name: str
    train: Split
    val: Split
    buckets: int  # hash buckets per categorical field
    base_logloss: float  # predicting the training positive rate for every validation row
    bayes_logloss: float | None = None  # the planted model's own log-loss (synthetic data only)

    @property
    def n_dense(self) -> int:
        return self.train.dense.shape[1]

    @property
    def n_fields(self) -> int:
        return self.train.cat.shape[1]

    def describe(self) -> str:
        pos = float(self.train.y.mean())
        floor = f", Bayes-optimal {self.bayes_logloss:.4f}" if self.bayes_logloss else ""
        return (
            f"{self.name}: {len(self.train):,} train / {len(self.val):,} validation rows, "
            f"{self.n_dense} dense + {self.n_fields} categorical fields ({self.buckets:,} buckets "
            f"each), {pos:.1%} positives; validation log-loss of the base rate "
            f"{self.base_logloss:.4f}{floor}"
        )


def log_loss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p.astype(np.float64), 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def standardise(train_raw: np.ndarray, val_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log1p of counts (missing -> 0), standardised by the TRAINING split's mean and std."""

    def transform(raw: np.ndarray) -> np.ndarray:
        x = np.nan_to_num(raw.astype(np.float64), nan=0.0)
        return np.log1p(np.maximum(x, 0.0))

    tr, va = transform(train_raw), transform(val_raw)
    mean, std = tr.mean(axis=0), tr.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return ((tr - mean) / std).astype(np.float32), ((va - mean) / std).astype(np.float32)


def base_rate_logloss(train_y: np.ndarray, val_y: np.ndarray) -> float:
    rate = float(train_y.mean())
    if rate in (0.0, 1.0) or math.isnan(rate):
        return float("nan")
    return log_loss(val_y, np.full(len(val_y), rate))


def hash_buckets(values: np.ndarray, field: int, buckets: int) -> np.ndarray:
    """Deterministic hash of (field, value) into ``[0, buckets)`` (splitmix64 finaliser)."""
    x = values.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(field + 1)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return (x % np.uint64(buckets)).astype(np.int32)
