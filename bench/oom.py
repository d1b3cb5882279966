"""Out of memory as a cost: how many trials each search spends on configs that do not fit.

    python bench/oom.py [--seeds 20] [--trials 30] [--jobs 2]

A stand-in of a GPU task, honest about what matters here: a config's memory is batch size x
width x bytes per value (4 for `32-true`, 2 for `bf16-mixed`), and past the card's limit the
trial raises torch's own `OutOfMemoryError` (as a CUDA card does; the OOM tests raise it the
same way on the CPU), which fails the trial as kind `oom`. Its loss is a bowl in log lr, log
batch size and log width with a small penalty for the other precision; the optimum lies just
inside the limit (at 50-90% of it), at a random place per seed, as a real task's best batch is
often the largest that fits. About a sixth of the space does not fit. A trial that fits declares
a minute of training (`wall_time_s`); one that does not fails at once.

Every search runs through `Tuner` as `tune run` does (no model, no pruner), `--trials` trials:
tunepilot's default (`auto`: its GP models an OOM trial at the study's worst loss) beside Optuna's
`TPESampler(seed=seed)` and `GPSampler(seed=seed)` as their users run them (both leave failed
trials out of their models). A row: OOM trials per run, those in the second half of the run
(still proposing next to what did not fit), and the regret of the best trial at the end (its
loss less the optimum's), mean +- standard error over seeds.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LIMIT_LOG2 = 20  # log2 of the card's memory, in the stand-in's units
BYTES = {"32-true": 4, "bf16-mixed": 2}
STRATEGIES = ("tp:auto", "optuna-tpe", "optuna-gp")


def task(seed: int) -> tuple[dict[str, float], object]:
    """The optimum of seed `seed` and the trainer: a function of the config, or OOM."""
    import random

    import torch

    from tunepilot import TrainResult

    rng = random.Random(seed)
    precision = rng.choice(list(BYTES))
    width = rng.uniform(6.0, 9.0)  # log2
    fill = math.log2(rng.uniform(0.5, 0.9))
    batch = min(11.5, max(5.0, LIMIT_LOG2 + fill - math.log2(BYTES[precision]) - width))
    best = {"lr": rng.uniform(math.log10(3e-4), math.log10(3e-2)), "batch_size": batch,
            "width": width, "precision": precision}

    def train(config, report):
        used = (math.log2(config["batch_size"]) + math.log2(config["width"])
                + math.log2(BYTES[config["precision"]]))
        if used > LIMIT_LOG2:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {2 ** (used - LIMIT_LOG2):.1f}x the card")
        # A minute of training declared, as a GPU trial's would be (the default's sampler weighs
        # its own time against the trials').
        return TrainResult(regret(config, best), wall_time_s=60.0)

    return best, train


def regret(config: dict, best: dict) -> float:
    return (0.08 * (math.log10(config["lr"]) - best["lr"]) ** 2
            + 0.02 * (math.log2(config["batch_size"]) - best["batch_size"]) ** 2
            + 0.02 * (math.log2(config["width"]) - best["width"]) ** 2
            + (0.01 if config["precision"] != best["precision"] else 0.0))


def one(args: tuple[str, int, int]) -> dict:
    import optuna

    from tunepilot import Categorical, Float, Int, SearchSpace, Tuner, trainers
    from tunepilot.memory import History

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    strategy, seed, n_trials = args
    _, train = task(seed)
    space = SearchSpace.of(lr=Float(1e-4, 1e-1, log=True), batch_size=Int(16, 4096, log=True),
                           width=Int(32, 1024, log=True),
                           precision=Categorical(list(BYTES)))
    sampler: object = "auto"
    if strategy == "optuna-tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    elif strategy == "optuna-gp":
        sampler = optuna.samplers.GPSampler(seed=seed)
    start = time.perf_counter()
    tuner = Tuner(trainers.callable(train), space, storage="sqlite:///:memory:",
                  study=f"oom-{seed}", sampler=sampler, seed=seed, pruner="none", display=None)
    tuner.run(n_trials=n_trials)
    trials = History.from_study(tuner.study).trials
    oom = [t.number for t in trials if t.error and t.error.get("kind") == "oom"]
    values = [t.value for t in trials if t.state == "complete" and t.value is not None]
    return {"strategy": strategy, "seed": seed, "oom": len(oom),
            "late": sum(n >= n_trials // 2 for n in oom),
            "regret": min(values) if values else float("inf"),
            "s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(s, seed, args.trials) for seed in seeds for s in STRATEGIES]
    print(f"# oom bench {time.strftime('%Y-%m-%d %H:%M')}: seeds {seeds.start}-"
          f"{seeds.stop - 1}, {args.trials} trials", flush=True)
    rows = []
    with Pool(args.jobs) as pool:
        for row in pool.imap(one, jobs):  # each run's line as it ends (the GP's runs take minutes)
            rows.append(row)
            print(f"raw {row['strategy']} seed {row['seed']} oom {row['oom']} late {row['late']} "
                  f"regret {row['regret']:.5f} s {row['s']:.1f}", flush=True)
    print("| search | OOM trials a run | in trials "
          f"{args.trials // 2}-{args.trials - 1} | regret at {args.trials} |")
    print("|---|---|---|---|")

    def cell(xs: list[float], digits: int) -> str:
        se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
        return f"{statistics.mean(xs):.{digits}f} ± {se:.{digits}f}"

    for s in STRATEGIES:
        mine = [r for r in rows if r["strategy"] == s]
        print(f"| {s} | {cell([r['oom'] for r in mine], 1)} | {cell([r['late'] for r in mine], 1)}"
              f" | {cell([r['regret'] for r in mine], 4)} |")


if __name__ == "__main__":
    main()
