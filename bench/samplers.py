"""The sampler's own time per trial as a study grows, through the product's path (`Tuner` with
`--sampler NAME`, the repeat check included), beside trials said to take `--trial-s` seconds
(they take none: the trainer reports that time, which is what the default's cost rule reads).

    python bench/samplers.py [--trials 200] [--gp-trials 60] [--trial-s 1]

Per sampler, the mean over trials 1-10, 11-20, 41-50, 91-100, 191-200 of its own time a trial
(the draw and the repeat check) and of the whole time a trial spends outside the trainer (the
storage's reads and writes too: `bench/workers.py` measures those); and the sampler's worst
window as a share of a trial, and the sampler's share of the whole search (its time over the
trials' time: what `auto` keeps under 10% beside 1-second trials). One thread
(OMP_NUM_THREADS=1), an in-memory SQLite study, a 5-parameter space like HPOBench's MLP (4
numbers and a choice); every sampler runs a short study first, so no row pays for imports.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tunepilot import Categorical, Float, Int, SearchSpace, TrainResult, Tuner, trainers

SPACE = SearchSpace.of(lr=Float(1e-5, 1.0, log=True), alpha=Float(1e-8, 1.0, log=True),
                       width=Int(16, 1024, log=True), depth=Int(1, 3),
                       activation=Categorical(["relu", "tanh"]))
WINDOWS = ((1, 10), (11, 20), (41, 50), (91, 100), (191, 200))


def per_trial_seconds(sampler: str, n: int,
                      trial_s: float = 1.0) -> tuple[list[float], list[float]]:
    """Each trial's sampler time (its draw and the repeat check: `AgentSampler.sample_relative`)
    and its whole time outside the trainer (the storage's reads and writes too), in order."""
    from tunepilot.proposers.suggest import AgentSampler

    drawing: dict[int, float] = {}
    outside: list[float] = []
    last = [time.perf_counter()]
    original = AgentSampler.sample_relative

    def timed(self, study, trial, search_space):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        try:
            return original(self, study, trial, search_space)
        finally:
            drawing[trial.number] = drawing.get(trial.number, 0.0) + time.perf_counter() - began

    def train(config, report):  # type: ignore[no-untyped-def]
        outside.append(time.perf_counter() - last[0])  # since the last training ended
        value = (math.log10(config["lr"]) + 2.5) ** 2 + 0.1 * (config["depth"] - 2) ** 2
        last[0] = time.perf_counter()
        return TrainResult(value, (), trial_s)

    AgentSampler.sample_relative = timed  # type: ignore[method-assign]
    try:
        Tuner(trainers.callable(train), SPACE, storage="sqlite:///:memory:",
              study=f"cost-{sampler}", sampler=sampler, pruner="none",
              display=None).run(n_trials=n + 1)
    finally:
        AgentSampler.sample_relative = original  # type: ignore[method-assign]
    # Trial 0 is left out: it pays for opening the study.
    return [drawing.get(i, 0.0) for i in range(1, n + 1)], outside[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--gp-trials", type=int, default=60, help="GP's own time grows fast")
    parser.add_argument("--trial-s", type=float, default=1.0,
                        help="what each trial says it took, in seconds")
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    print(f"# time per trial (ms), trials of no time; {time.strftime('%Y-%m-%d %H:%M')}, "
          f"optuna {optuna.__version__}, {os.cpu_count()} cores, one thread. Each cell: the "
          "sampler's own time / the whole time outside the trainer\n")
    print("| sampler | " + " | ".join(f"trials {a}-{b}" for a, b in WINDOWS)
          + f" | worst window, share of a {args.trial_s:g} s trial | share of the search |")
    print("|---|" + "---|" * (len(WINDOWS) + 2))
    names = ("auto", "tpe", "cmaes-tpe", "random", "gp")
    for sampler in names:
        per_trial_seconds(sampler, 6)  # imports (cmaes, torch for GP) paid here
    for sampler in names:
        n = args.gp_trials if sampler == "gp" else args.trials
        drawing, outside = per_trial_seconds(sampler, n, args.trial_s)
        cells, worst = [], 0.0
        for a, b in WINDOWS:
            if b > n:
                cells.append("-")
                continue
            own = statistics.fmean(drawing[a - 1:b])  # drawing[0] is trial 1
            worst = max(worst, own)
            cells.append(f"{own * 1000:.0f} / {statistics.fmean(outside[a - 1:b]) * 1000:.0f}")
        whole = sum(drawing) / (n * args.trial_s)
        print(f"| {sampler} | " + " | ".join(cells) + f" | {worst / args.trial_s:.0%} | "
              f"{whole:.1%} |", flush=True)


if __name__ == "__main__":
    main()
