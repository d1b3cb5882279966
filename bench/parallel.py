"""Four workers on one study against one worker, the same total trials: does the default's
sampler account for the trials still running, or do workers spend trials on one region?

    python bench/parallel.py --seeds 10 --trials 32 [--workers 4] [--storage URL]

Each worker is a `Tuner` on one PostgreSQL study (the real storage, heartbeats and the study
lock), in a thread of this process; a trial is a synthetic problem's look-up followed by a
one-second sleep, so several run at once as on a real night. Per seed and worker count: the
best config's rank after all trials, and for each trial the distance (in the unit cube of the
space) from its config to the nearest config of the trials that were running when it was
drawn, beside the distance to the nearest earlier trial: the first near 0 would mean two
workers on one region.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from families import _unit, problem

from tunepilot import TrainResult, Tuner, trainers
from tunepilot.memory import History, open_storage

PROBLEM = ("synthetic", "syn-4-choice")


def one(seed: int, workers: int, trials: int, url: str, sleep_s: float) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    p = problem(*PROBLEM, seed, False)
    truth: dict[str, float] = {}

    def train(config: Any, report: Any) -> TrainResult:
        seen, true = p.loss({k: config[k] for k in p.space.params})
        truth[repr(sorted((k, config[k]) for k in p.space.params))] = true
        time.sleep(sleep_s)
        return TrainResult(seen, (), sleep_s)

    study = f"parallel-{seed}-{workers}-{uuid.uuid4().hex[:6]}"
    storages = [open_storage(url) for _ in range(workers)]
    tuners = [Tuner(trainers.callable(train), p.space, storage=storage, study=study,
                    sampler="auto", pruner="none", seed=seed, display=None,
                    warm_start=i == 0) for i, storage in enumerate(storages)]
    tuners[0].study  # noqa: B018 (created once, by the first)
    threads = [threading.Thread(target=t.run, kwargs={"n_trials": trials}) for t in tuners]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    history = History.from_study(tuners[0].study)
    done = sorted(history.completed(), key=lambda t: t.number)
    best = min(done, key=lambda t: t.value if t.value is not None else math.inf)
    rank = p.rank(truth[repr(sorted((k, best.params[k]) for k in p.space.params))])
    to_running, to_earlier = [], []
    for t in done:
        here = _unit(p.space, t.params)
        running = [o for o in done if o.number != t.number and o.start is not None
                   and t.start is not None and o.start < t.start and (o.end or math.inf) > t.start]
        earlier = [o for o in done if o.number < t.number]
        if running:
            to_running.append(min(_distance(here, _unit(p.space, o.params)) for o in running))
        if earlier:
            to_earlier.append(min(_distance(here, _unit(p.space, o.params)) for o in earlier))
    optuna.delete_study(study_name=study, storage=storages[0])
    for storage in storages:  # each holds connections: a long run would use up the server's
        storage.engine.dispose()
    return {"seed": seed, "workers": workers, "rank": rank, "wall": wall,
            "to_running": to_running, "to_earlier": to_earlier}


def _distance(a: Any, b: Any) -> float:
    return float(math.sqrt(((a - b) ** 2).sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--storage", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    rows = []
    for seed in range(args.seeds):
        for n in (1, args.workers):
            rows.append(one(seed, n, args.trials, args.storage, args.sleep))
            r = rows[-1]
            print(f"seed {seed}, {n} worker(s): rank {r['rank']:.4f}, wall {r['wall']:.0f} s",
                  flush=True)
    print(f"\n{PROBLEM[1]}, {args.trials} trials, {args.seeds} seeds, trials of "
          f"{args.sleep:g} s\n")
    print("| workers | best rank (mean ± se) | wall s | distance to a running trial's config "
          "(median) | to the nearest earlier trial's (median) |")
    print("|---|---|---|---|---|")
    for n in (1, args.workers):
        mine = [r for r in rows if r["workers"] == n]
        ranks = [r["rank"] for r in mine]
        se = statistics.stdev(ranks) / math.sqrt(len(ranks)) if len(ranks) > 1 else 0.0
        running = [d for r in mine for d in r["to_running"]]
        earlier = [d for r in mine for d in r["to_earlier"]]
        print(f"| {n} | {statistics.fmean(ranks):.4f} ± {se:.4f} | "
              f"{statistics.fmean(r['wall'] for r in mine):.0f} | "
              f"{statistics.median(running) if running else float('nan'):.3f} | "
              f"{statistics.median(earlier):.3f} |")


if __name__ == "__main__":
    main()
