"""Connections a `tune run` opens to a PostgreSQL server, counted by the pool's `connect`
events in one process, with where each was opened (the storage call), and the seconds per trial.

    python bench/connections.py [--url postgresql://postgres@127.0.0.1:5432/test] [--trials 10]

Each trial reports 3 epochs and sleeps no time, so the calls between trainings and those made
while a trial trains (its epoch reports, heartbeats) are both seen.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy
from sqlalchemy.pool import Pool

from tunepilot import Float, SearchSpace, Tuner, trainers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--sampler", default="tpe")
    args = parser.parse_args()
    opened: collections.Counter[str] = collections.Counter()

    @sqlalchemy.event.listens_for(Pool, "connect")
    def connect(dbapi_connection: object, record: object) -> None:
        frames = [f.name for f in traceback.extract_stack()
                  if "tunepilot" in f.filename or "optuna/storages" in f.filename]
        opened[" < ".join(reversed(frames[-3:]))] += 1

    def train(config: dict, report: object) -> float:
        for epoch in range(1, 4):
            report(epoch, (config["x"] - 2.0) ** 2 + 1.0 / epoch)  # type: ignore[operator]
        return (config["x"] - 2.0) ** 2

    space = SearchSpace.of(x=Float(-10.0, 10.0), y=Float(-10.0, 10.0))
    name = f"connections-{int(time.time())}"
    start = time.perf_counter()
    tuner = Tuner(trainers.callable(train), space, storage=args.url, study=name,
                  sampler=args.sampler, pruner="none", display=None, seed=1)
    tuner.run(n_trials=args.trials)
    wall = time.perf_counter() - start
    import optuna

    optuna.delete_study(study_name=name, storage=args.url)
    print(f"{args.trials} trials in {wall:.2f} s: {sum(opened.values())} connections opened "
          f"({sum(opened.values()) / args.trials:.1f} a trial)")
    for where, n in opened.most_common(12):
        print(f"{n:5d}  {where}")


if __name__ == "__main__":
    main()
