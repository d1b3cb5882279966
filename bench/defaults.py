"""The built-in task's first config, measured: the validation log-loss per epoch of the configs
a practitioner would try first on a CTR model (Adam at 1e-3 or 3e-4, batch 256 to 4096,
dropout 0.1 to 0.3), on the built-in Lightning trainer and data, 3 epochs, 32-true.

    python bench/defaults.py

The losses are deterministic (seeded data, model and batches), so the table is the same on
any run of this code on a CPU; seconds are left out (see bench/time_to_target.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunepilot import trainers

CANDIDATES = [(1e-3, 1024, 0.1), (1e-3, 256, 0.1), (1e-3, 512, 0.1), (3e-4, 256, 0.1),
              (3e-4, 1024, 0.1), (3e-3, 1024, 0.1), (1e-3, 256, 0.3), (1e-3, 4096, 0.1)]


def main() -> None:
    data = trainers.load_data("synthetic")
    train = trainers.ctr_lightning(data)
    train({"epochs": 1}, trainers.no_report)  # imports and first-call costs, not counted
    print("| lr | batch_size | dropout | loss per epoch | best |\n|---|---|---|---|---|")
    for lr, batch, dropout in CANDIDATES:
        r = train({"lr": lr, "batch_size": batch, "dropout": dropout, "epochs": 3,
                   "precision": "32-true"}, trainers.no_report)
        print(f"| {lr:g} | {batch} | {dropout} | {' '.join(f'{v:.4f}' for v in r.curve)} | "
              f"{r.best_val_loss:.4f} |", flush=True)


if __name__ == "__main__":
    main()
