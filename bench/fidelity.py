"""How well a cheap look at a config ranks it on the built-in task: its loss after epoch 1, after
epochs 1-2, and after all 3 epochs on a quarter or a half of the training rows, each against the
full trial's best loss (3 epochs, all rows), over random configs of the built-in space.

    python bench/fidelity.py [--configs 24] [--seed 0]

Prints one line per config (losses and seconds), then per fidelity: Spearman's rank correlation
with the full trial, its time as a share of the full trial's, how many of the full trials' best
5 it keeps in its better half, and the configs it would stop that do better at epoch 3 after a
worse epoch 2 (what an epoch patience of 1 loses). Training is seeded (seed 0), so the losses
repeat; the seconds do not (run it alone).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna
from scipy.stats import spearmanr

from tunepilot import trainers
from tunepilot.trainers.data.ctr import CTRData, Split

FRACTIONS = (0.25, 0.5)


def first_rows(data: CTRData, fraction: float) -> CTRData:
    t, n = data.train, int(len(data.train) * fraction)
    return dataclasses.replace(data, train=Split(t.dense[:n], t.cat[:n], t.y[:n]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0, help="of the random configs [0]")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    data = trainers.load_data("synthetic")
    full_train = trainers.ctr_lightning(data)
    parts = {f: trainers.ctr_lightning(first_rows(data, f)) for f in FRACTIONS}
    full_train({"epochs": 1}, trainers.no_report)  # imports and first-call costs, not counted
    space = trainers.default_space("lightning")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=args.seed))
    rows: list[dict[str, Any]] = []
    for i in range(args.configs):
        trial = study.ask()
        config = {**space.sample(trial), "epochs": 3, "seed": 0}
        began = time.perf_counter()
        full = full_train(config, trainers.no_report)
        row: dict[str, Any] = {"full": full.best_val_loss, "s_full": time.perf_counter() - began,
                               "epoch 1": full.curve[0], "epochs 1-2": min(full.curve[:2])}
        for f, train in parts.items():
            began = time.perf_counter()
            row[f"{f:.0%} rows"] = train(config, trainers.no_report).best_val_loss
            row[f"s_{f:.0%} rows"] = time.perf_counter() - began
        study.tell(trial, row["full"])
        rows.append(row)
        print(f"{i:>2} lr {config['lr']:.2e} batch {config['batch_size']:>4} dropout "
              f"{config['dropout']:.2f}: " + ", ".join(
                  f"{k} {v:.4f}" for k, v in row.items() if not k.startswith("s_"))
              + f"; {row['s_full']:.1f} s full", flush=True)
    full_losses = [r["full"] for r in rows]
    best5 = sorted(range(len(rows)), key=lambda i: full_losses[i])[:5]
    mean_full_s = statistics.mean(r["s_full"] for r in rows)
    print(f"\n{len(rows)} random configs (seed {args.seed}); full trial {mean_full_s:.2f} s on "
          "average\n\n| fidelity | Spearman with the full trial | time share | full's best 5 in "
          "its better half |\n|---|---|---|---|")
    for key in ("epoch 1", "epochs 1-2", *(f"{f:.0%} rows" for f in FRACTIONS)):
        values = [r[key] for r in rows]
        half = set(sorted(range(len(rows)), key=lambda i: values[i])[:len(rows) // 2])
        share = (statistics.mean(r[f"s_{key}"] for r in rows) / mean_full_s
                 if f"s_{key}" in rows[0] else {"epoch 1": 1 / 3, "epochs 1-2": 2 / 3}[key])
        print(f"| {key} | {spearmanr(values, full_losses)[0]:.3f} | {share:.2f} | "
              f"{sum(i in half for i in best5)} of 5 |")
    lost = [i for i, r in enumerate(rows) if r["epochs 1-2"] == r["epoch 1"] > r["full"]]
    print(f"\nConfigs better at epoch 3 after a worse epoch 2 (an epoch patience of 1 stops "
          f"them): {len(lost)} of {len(rows)} {lost if lost else ''}")


if __name__ == "__main__":
    main()
