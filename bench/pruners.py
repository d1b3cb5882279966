"""Pruners on the built-in CTR task: time to a target and the best loss at a fixed wall time.

    python bench/pruners.py [--seconds 75] [--seeds 0 1 2] [--target 0.41] [--epochs 4]

Every run: Lightning CTR model on synthetic:40000, 4 epochs per trial, Optuna's TPE with the
run's seed, the same space (lr, batch size, dropout; precision fixed at 32-true, so that one
slow bf16 trial does not decide a short run), and the same wall-time budget. Pruners side by
side in one run, seed by seed, so the machine's load falls on all alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna

from tunepilot import Categorical, Float, SearchSpace, Tuner, trainers
from tunepilot.memory import History

PRUNERS = ("none", "median", "hyperband")


def one_run(pruner: str, seed: int, seconds: float, target: float, data: object,
            epochs: int) -> dict:
    space = SearchSpace.of(lr=Float(1e-5, 1e-1, log=True),
                           batch_size=Categorical([256, 512, 1024, 2048, 4096]),
                           dropout=Float(0.0, 0.5), precision="32-true", epochs=epochs,
                           seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        tuner = Tuner(trainers.from_spec("lightning", data), space,
                      storage=f"sqlite:///{tmp}/s.db", study="bench", sampler="tpe",
                      seed=seed, pruner=pruner, display=None)
        tuner.run(n_trials=10_000, timeout=seconds)
        history = History.from_study(tuner.study)
    start = min(t.start for t in history if t.start is not None)
    done = sorted((t for t in history.completed() if t.end is not None), key=lambda t: t.end)
    reached = next((t.end - start for t in done if t.value <= target), None)
    best = min((t.value for t in done), default=float("nan"))
    return {"reached_s": reached, "best": best, "trials": len(history.finished()),
            "pruned": sum(t.state == "pruned" for t in history)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=75.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=0.41)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    data = trainers.load_data("synthetic:40000")
    results: dict[str, list[dict]] = {p: [] for p in PRUNERS}
    for seed in args.seeds:
        for pruner in PRUNERS:
            began = time.monotonic()
            r = one_run(pruner, seed, args.seconds, args.target, data, args.epochs)
            results[pruner].append(r)
            reached = f"{r['reached_s']:.0f} s" if r["reached_s"] is not None else "missed"
            print(f"seed {seed} {pruner:>10}: target {reached:>7}, best {r['best']:.4f}, "
                  f"{r['trials']} trials ({r['pruned']} pruned), {time.monotonic() - began:.0f} s",
                  flush=True)
    print(f"\npruner      time to {args.target} (median; missed)   best at {args.seconds:g} s "
          "(mean ± std)   trials   pruned")
    for pruner, rs in results.items():
        times = [r["reached_s"] for r in rs if r["reached_s"] is not None]
        missed = sum(r["reached_s"] is None for r in rs)
        median = f"{statistics.median(times):.0f} s" if times else "-"
        bests = [r["best"] for r in rs]
        spread = statistics.stdev(bests) if len(bests) > 1 else 0.0
        print(f"{pruner:<10}  {median:>8} ({missed} of {len(rs)} missed)            "
              f"{statistics.mean(bests):.4f} ± {spread:.4f}        "
              f"{statistics.mean(r['trials'] for r in rs):5.1f}   "
              f"{statistics.mean(r['pruned'] for r in rs):5.1f}")


if __name__ == "__main__":
    main()
