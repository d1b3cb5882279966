"""Do the Lightning and JAX trainers give the same numbers? Per-epoch validation log-loss gaps.

Same model, the same initial-weight distributions (not the same draws), the same optimizer
rules and the same data; the random streams of the two frameworks differ, so the gap measures
run-to-run noise plus any real difference. tests/test_jax.py asserts a 0.015 tolerance.

    python bench/parity.py            # 4 configs x 3 seeds, 20k rows, 3 epochs (about 1 minute)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunepilot.trainers.base import no_report
from tunepilot.trainers.data import synthetic

CONFIGS = [
    {"lr": 3e-3, "batch_size": 512, "dropout": 0.1},
    {"lr": 1e-3, "batch_size": 2048, "dropout": 0.3, "precision": "bf16-mixed"},
    {"lr": 1e-2, "batch_size": 256, "dropout": 0.0, "weight_decay": 1e-5},
    {"lr": 3e-3, "batch_size": 1024, "dropout": 0.2, "sparse_embeddings": False},
]


def main() -> None:
    from tunepilot.trainers.jax_trainer import train_ctr as jax_train
    from tunepilot.trainers.lightning_trainer import train_ctr as lightning_train

    data = synthetic(20_000)
    print(data.describe())
    gaps, best_gaps = [], []
    for config in CONFIGS:
        best = {"jax": [], "lightning": []}
        for seed in range(3):
            cfg = {**config, "epochs": 3, "seed": seed}
            a = jax_train(cfg, no_report, data=data).curve
            b = lightning_train(cfg, no_report, data=data).curve
            best["jax"].append(min(a))
            best["lightning"].append(min(b))
            gap = [abs(x - y) for x, y in zip(a, b, strict=True)]
            gaps += gap
            print(f"  seed {seed}: jax {[round(x, 4) for x in a]} lightning "
                  f"{[round(x, 4) for x in b]}")
        j, t = np.array(best["jax"]), np.array(best["lightning"])
        best_gaps.append(abs(j.mean() - t.mean()))
        print(f"{config}: best val loss jax {j.mean():.4f} +- {j.std():.4f}, lightning "
              f"{t.mean():.4f} +- {t.std():.4f} (mean +- std over seeds); difference of means "
              f"{abs(j.mean() - t.mean()):.4f}\n")
    print(f"best validation loss, |mean jax - mean lightning| per config: max "
          f"{max(best_gaps):.4f}")
    print(f"per-epoch |jax - lightning| (same seed): mean {np.mean(gaps):.4f}, max "
          f"{max(gaps):.4f} over {len(gaps)} epochs (late epochs of overfitting runs are chaotic "
          "within one framework too)")


if __name__ == "__main__":
    main()
