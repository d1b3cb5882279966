"""Time to a target on the built-in task: `auto` (what `tune run` does with the embedded model)
against `--strategy optuna`, seed by seed, side by side in one run.

    python bench/time_to_target.py [--target 0.403] [--n-trials 30] [--seeds 0 1 2 3 4]

Each run is `tune run --target T --n-trials N --seed S [--strategy optuna]` built through the
same config path as the CLI (`from_config`), on a fresh SQLite study in a temporary directory.
"Time to target": seconds from the run's first trial start to the end of the first trial whose
validation loss is at or under the target; "missed" when none of the N trials reached it.
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

from tunepilot.agent import studies
from tunepilot.agent.build import from_config
from tunepilot.config import TuneConfig
from tunepilot.memory import History

STRATEGIES = ("auto", "optuna")


def one_run(strategy: str, seed: int, target: float, n_trials: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TuneConfig(strategy=strategy, seed=seed, target=target, n_trials=n_trials,
                         storage=f"sqlite:///{tmp}/s.db")
        tuner, notes = from_config(cfg)
        began = time.monotonic()
        studies.run(tuner, cfg)
        wall = time.monotonic() - began
        history = History.from_study(tuner.study)
    start = min(t.start for t in history if t.start is not None)
    done = sorted((t for t in history.completed() if t.end is not None), key=lambda t: t.end)
    hit = next((t for t in done if t.value <= target), None)
    return {"reached_s": None if hit is None else hit.end - start,
            "reached_trial": None if hit is None else hit.number + 1,
            "best": min((t.value for t in done), default=float("nan")),
            "trials": len(history.finished()), "wall_s": wall,
            "llm_turns": sum(1 for t in history if t.llm),
            "llm_s": history.llm_seconds(),
            "overrides": history.overrides(),
            "strategy_line": next((n for n in notes if n.startswith("strategy")), "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=0.403)
    parser.add_argument("--n-trials", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    print(f"# time to target {args.target}, {args.n_trials}-trial cap, seeds {args.seeds}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    results: dict[str, list[dict]] = {s: [] for s in STRATEGIES}
    for seed in args.seeds:
        for strategy in STRATEGIES:
            r = one_run(strategy, seed, args.target, args.n_trials)
            results[strategy].append(r)
            reached = (f"{r['reached_s']:.0f} s (trial {r['reached_trial']})"
                       if r["reached_s"] is not None else "missed")
            print(f"seed {seed} {strategy:>6}: target {reached:>16}, best {r['best']:.4f}, "
                  f"{r['trials']} trials in {r['wall_s']:.0f} s; LLM {r['llm_turns']} turns "
                  f"{r['llm_s']:.0f} s, {r['overrides']} overrides", flush=True)
    print("\nstrategy   reached   median time (reached runs)   median trials   mean wall   "
          "LLM s / run")
    for strategy, rs in results.items():
        times = [r["reached_s"] for r in rs if r["reached_s"] is not None]
        trials = [r["reached_trial"] for r in rs if r["reached_trial"] is not None]
        print(f"{strategy:<9}  {len(times)} of {len(rs)}   "
              f"{f'{statistics.median(times):.0f} s' if times else '-':>10}                  "
              f"{f'{statistics.median(trials):.0f}' if trials else '-':>6}        "
              f"{statistics.mean(r['wall_s'] for r in rs):6.0f} s   "
              f"{statistics.mean(r['llm_s'] for r in rs):6.0f}")
    # Counting a miss as the whole run's wall time, the median over all seeds:
    for strategy, rs in results.items():
        all_times = [r["reached_s"] if r["reached_s"] is not None else float("inf") for r in rs]
        print(f"{strategy}: median time to target over all seeds (a miss = never): "
              f"{statistics.median(all_times):.0f} s")
    print(f"\n{results['auto'][0]['strategy_line']}")


if __name__ == "__main__":
    main()
