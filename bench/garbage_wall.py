"""What a model that never answers with JSON costs in wall time: 30 one-second trials with
tunepilot alone (no model) and with the `garbage` expert (bench/experts.py) on loopback HTTP,
under `review` with the opening, seed by seed in one run.

    python bench/garbage_wall.py [--seeds 2] [--n-trials 30]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experts import Expert

from tunepilot import Float, SearchSpace, Tuner, trainers

SPACE = SearchSpace.of(x=Float(-10.0, 10.0), y=Float(-10.0, 10.0))


def one_second(config: Mapping[str, Any], report: Any) -> float:
    time.sleep(1.0)
    return (config["x"] - 2.0) ** 2 + (config["y"] + 1.0) ** 2


def run(seed: int, n_trials: int, model: object | None) -> tuple[float, int]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tuner = Tuner(trainers.callable(one_second), SPACE, storage="sqlite:///:memory:",
                  study=f"g-{seed}", llm=model, strategy="review" if model else "auto",
                  pruner="none", seed=seed, display=None)
    began = time.monotonic()
    result = tuner.run(n_trials=n_trials)
    return time.monotonic() - began, len(result.history)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--n-trials", type=int, default=30)
    args = parser.parse_args()
    print(f"# {args.n_trials} one-second trials, seeds 0..{args.seeds - 1}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    for seed in range(args.seeds):
        alone, _ = run(seed, args.n_trials, None)
        with Expert("garbage", [{"x": 0.0, "y": 0.0}], seed) as expert:
            garbage, _ = run(seed, args.n_trials, expert.chat_model())
            requests = expert.requests
        print(f"seed {seed}: no model {alone:.1f} s; garbage model {garbage:.1f} s "
              f"({garbage / alone:.3f}x), {requests} requests", flush=True)


if __name__ == "__main__":
    main()
