"""Time to a target on the built-in task: Optuna as its users run it, tunepilot before this
round's engine, and tunepilot's default, seed by seed, side by side in one run.

    python bench/time_to_target.py [--trainer both] [--target 0.402] [--n-trials 30] [--seeds 10]

The task (since 2026-12-07): `--trainer both`, the framework a choice of each trial (the JAX
trainer runs this task's epochs about twice as fast as Lightning here), target 0.402: a loss the
declared default (Lightning, lr 1e-3, batch 256, dropout 0.1) misses with every training seed
0-19 on either framework, and that configs with more dropout reach on some (the scan:
bench/log/2026-12-07.md). Before: `--trainer lightning --target 0.403`, which the declared
default reached at trial 1 on some seeds.

- `optuna-gp`: Optuna's `GPSampler(seed=seed)` with no pruner (the sampler's users' way: it
  fits complete trials only), built as `optuna` is.
- `sh`, `hyperband`, `median` (with `--variants`): `default` with `--pruner successive-halving`,
  `hyperband` or `median` (`nopruner`: with none). Since 2026-12-07 the default's pruner
  (`auto`) is successive halving where the goal is a target, as here; the median before.
- `optuna`: the peer, built with Optuna's own defaults and not through tunepilot:
  `optuna.create_study(sampler=TPESampler(seed=seed), pruner=MedianPruner())` over the built-in
  space, each trial the built-in Lightning trainer reporting every epoch to `trial.report`,
  trained with the seed `seed` as `tune run --seed SEED` trains (before 2026-12-03 the peer
  trained every seed's trials with seed 0).
- `before`: `tune run` as it was: `--sampler tpe`, no default config, every epoch trained
  (`--epoch-patience 0`).
- `default`: `tune run` today: `--sampler auto`, the space's defaults as trial 0, a trial stopped
  after a third of its epochs without a better loss (1 of 3; 2 before 2026-12-03 afternoon, which
  never stopped a 3-epoch trial), and at the epoch that reaches the target.
- `auto`, `defaults`, `patience` (with `--steps`): `before` with one of the three changes.
- `rung1`, `nopruner`, `rows` (with `--pruners`): `default` with the median pruner judging from
  epoch 1 (Optuna's `n_warmup_steps=0`; tunepilot's median waits for epoch 2), with no pruner,
  and with a data-size rung first: each config trains its epochs on the first quarter of the
  training rows, and goes on to the full data (a fresh model) only when that loss is at or under
  the median of the earlier trials' quarter-data losses (after 5 trials).
- `cmaes-tpe` (with `--variants`): `default` with the sampler of before 2026-12-04 (CMA-ES to
  trial 9, its choices by TPE, then TPE).
- `tp:NAME` (with `--variants`): `default` with the sampler NAME, one of tunepilot's or of the
  engine benchmark's start-up variants (`bench/engine.py`: `auto-sobol`, `auto-rand`).
- `pm` (with `--variants`): `cmaes-tpe` with its choices left to chance for TPE's 10 random
  start-up draws under its CMA-ES, as before 2026-12-03 evening (the afternoon's default).

The tunepilot runs go through the CLI's config path (`from_config`) on a fresh SQLite study in a
temporary directory, with no LLM (`--strategy optuna`). "Time to target": seconds from the run's
first trial start to the end of the first trial whose validation loss is at or under the
target; "missed" when none of the N trials reached it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna

from tunepilot import SearchSpace, trainers
from tunepilot.agent import studies
from tunepilot.agent.build import from_config
from tunepilot.config import TuneConfig
from tunepilot.memory import History
from tunepilot.proposers import samplers
from tunepilot.trainers.data.ctr import Split

VARIANTS = ("optuna", "optuna-gp", "default")
STEPS = ("auto", "defaults", "patience")
PRUNERS = ("rung1", "nopruner", "rows")
ROWS_FRACTION = 0.25


def screened(data: Any, fraction: float = ROWS_FRACTION) -> Any:
    """The built-in trainer behind a data-size rung: the config on `fraction` of the training
    rows first (all its epochs; about that share of the full trial's time), pruned when that
    loss is above the median of the earlier trials' (after 5), else trained on all rows."""
    t = data.train
    n = int(len(t) * fraction)
    small = trainers.ctr_lightning(dataclasses.replace(data, train=Split(t.dense[:n], t.cat[:n],
                                                                         t.y[:n])))
    full = trainers.ctr_lightning(data)
    seen: list[float] = []

    def train(config: Any, report: Any) -> Any:
        loss = small(config, trainers.no_report).best_val_loss
        passed = len(seen) < 5 or loss <= statistics.median(seen)
        seen.append(loss)
        if not passed:
            raise optuna.TrialPruned(f"{loss:.4f} on {fraction:.0%} of the rows")
        return full(config, report)

    return train


@contextlib.contextmanager
def undone(variant: str) -> Iterator[None]:
    """`auto` with its choices left to chance for TPE's 10 start-up draws, for the run."""
    saved = samplers.CHOICES_STARTUP
    if variant == "pm":
        samplers.CHOICES_STARTUP = 10
    try:
        yield
    finally:
        samplers.CHOICES_STARTUP = saved


def _no_defaults(trainer: str) -> dict[str, Any]:
    """The built-in space with its `default`s taken out (the space as it was)."""
    space = trainers.default_space(trainer)
    return {name: {k: v for k, v in p.model_dump().items() if k != "default"}
            for name, p in space.params.items()}


def tunepilot_run(variant: str, seed: int, target: float, n_trials: int,
                  data: Any, trainer: str) -> dict[str, Any]:
    before = {"sampler": "tpe", "space": _no_defaults(trainer), "epoch_patience": 0}
    settings = {"default": {}, "before": before,
                "auto": {**before, "sampler": "auto"},
                "defaults": {**before, "space": {}},
                "patience": {**before, "epoch_patience": 2},
                "rung1": {}, "nopruner": {"pruner": "none"}, "rows": {},
                "sh": {"pruner": "successive-halving"}, "hyperband": {"pruner": "hyperband"},
                "median": {"pruner": "median"},
                "pm": {"sampler": "cmaes-tpe"},
                "cmaes-tpe": {"sampler": "cmaes-tpe"}}.get(variant)
    if settings is None and variant.startswith("tp:"):  # `default` with another sampler
        from engine import _variants

        _variants()
        settings = {"sampler": variant.removeprefix("tp:")}
    if settings is None:
        raise SystemExit(f"unknown variant {variant!r}")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TuneConfig(strategy="optuna", seed=seed, target=target, n_trials=n_trials,
                         trainer=trainer, storage=f"sqlite:///{tmp}/s.db", **settings)
        tuner, _ = from_config(cfg)
        if variant == "rung1":
            tuner.pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0)
        if variant == "rows":
            if trainer != "lightning":
                raise SystemExit("the `rows` variant trains Lightning: --trainer lightning")
            tuner.trainer = screened(data)
        began = time.monotonic()
        with undone(variant):
            studies.run(tuner, cfg)
        wall = time.monotonic() - began
        history = History.from_study(tuner.study)
    start = min(t.start for t in history if t.start is not None)
    done = sorted((t for t in history.completed() if t.end is not None), key=lambda t: t.end)
    hit = next((t for t in done if t.value is not None and t.value <= target), None)
    return {"reached_s": None if hit is None else hit.end - start,
            "reached_trial": None if hit is None else hit.number + 1,
            "by": None if hit is None else hit.params.get("framework", trainer),
            "best": min((t.value for t in done if t.value is not None), default=math.nan),
            "trials": len(history.finished()), "wall_s": wall,
            "stopped_early": sum(1 for t in history if t.train and t.train.stopped_early)}


def optuna_run(variant: str, seed: int, target: float, n_trials: int, data: Any,
               trainer: str) -> dict[str, Any]:
    # The same fixed settings as `tune run --seed SEED`: the training seed is the run's too (a
    # config's loss moves by ~0.005 with it, as much as the gap to the target).
    space = SearchSpace.of(epochs=3, seed=seed).merged(trainers.default_space(trainer))
    train = trainers.from_spec(trainer, data)
    study = optuna.create_study(
        sampler=optuna.samplers.GPSampler(seed=seed) if variant == "optuna-gp"
        else optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.NopPruner() if variant == "optuna-gp"
        else optuna.pruners.MedianPruner())
    ends: dict[int, float] = {}
    frameworks: dict[int, str] = {}

    def objective(trial: optuna.Trial) -> float:
        def report(epoch: int, loss: float) -> None:
            trial.report(loss, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()

        result = train(space.sample(trial), report)
        ends[trial.number] = time.monotonic()
        frameworks[trial.number] = result.extra.get("framework", trainer)
        return result.best_val_loss

    def stop_at_target(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.value is not None and trial.value <= target:
            study.stop()

    began = time.monotonic()
    study.optimize(objective, n_trials=n_trials, callbacks=[stop_at_target])
    wall = time.monotonic() - began
    hit = next((t for t in study.trials if t.value is not None and t.value <= target), None)
    values = [t.value for t in study.trials if t.value is not None]
    return {"reached_s": None if hit is None else ends[hit.number] - began,
            "reached_trial": None if hit is None else hit.number + 1,
            "by": None if hit is None else frameworks[hit.number],
            "best": min(values, default=math.nan), "trials": len(study.trials), "wall_s": wall,
            "stopped_early": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", default="both", choices=("both", "lightning", "jax"),
                        help="the built-in trainer [both: the framework a choice per trial]")
    parser.add_argument("--target", type=float, default=0.402)
    parser.add_argument("--n-trials", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=10, help="seeds FIRST..FIRST+N-1 [10]")
    parser.add_argument("--first-seed", type=int, default=0, help="FIRST [0]")
    parser.add_argument("--steps", action="store_true",
                        help="also `before` with each of the three changes alone")
    parser.add_argument("--variants", help="comma-separated, instead of the default set")
    parser.add_argument("--pruners", action="store_true",
                        help="also `default` with the first rung at epoch 1, and with no pruner")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    variants = VARIANTS + (STEPS if args.steps else ()) + (PRUNERS if args.pruners else ())
    if args.variants:
        variants = tuple(args.variants.split(","))
    print(f"# time to target {args.target}, --trainer {args.trainer}, {args.n_trials}-trial cap, "
          f"seeds {args.first_seed}.."
          f"{args.first_seed + args.seeds - 1}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    data = trainers.load_data("synthetic")
    # One epoch on each framework first, so no variant's first trial pays for importing it.
    for framework in ("lightning", "jax") if args.trainer == "both" else (args.trainer,):
        trainers.from_spec(framework, data)({"epochs": 1}, trainers.no_report)
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for variant in variants:
            r = (optuna_run(variant, seed, args.target, args.n_trials, data, args.trainer)
                 if variant.startswith("optuna")
                 else tunepilot_run(variant, seed, args.target, args.n_trials, data,
                                    args.trainer))
            results[variant].append(r)
            reached = (f"{r['reached_s']:.0f} s (trial {r['reached_trial']}, {r['by']})"
                       if r["reached_s"] is not None else "missed")
            print(f"seed {seed} {variant:>9}: target {reached:>26}, best {r['best']:.4f}, "
                  f"{r['trials']} trials in {r['wall_s']:.0f} s, {r['stopped_early']} stopped "
                  "early", flush=True)
    print("\n| variant | reached | at trial 1 | median time (a miss = never) ± bootstrap se | "
          "/ optuna's | median trials, reached runs | reached by (lightning/jax) | mean wall |\n"
          "|---|---|---|---|---|---|---|---|")
    peer = _median_s(results["optuna"]) if "optuna" in results else math.nan
    for variant, rs in results.items():
        trials = [r["reached_trial"] for r in rs if r["reached_trial"] is not None]
        every = _median_s(rs)
        by = [r.get("by") for r in rs if r["reached_s"] is not None]
        print(f"| {variant} | {len(trials)} of {len(rs)} | {trials.count(1)} | {every:.0f} s ± "
              f"{_bootstrap_se(rs):.0f} | {every / peer:.2f} | "
              f"{statistics.median(trials) if trials else '-'} | "
              f"{by.count('lightning')}/{by.count('jax')} | "
              f"{statistics.mean(r['wall_s'] for r in rs):.0f} s |")


def _median_s(rs: list[dict[str, Any]]) -> float:
    return statistics.median(r["reached_s"] if r["reached_s"] is not None else math.inf
                             for r in rs)


def _bootstrap_se(rs: list[dict[str, Any]], draws: int = 2000) -> float:
    """The standard error of the median time over seeds, by resampling the seeds (a miss is
    never; the median of a resample that is never is left out)."""
    import random

    rng = random.Random(0)
    medians = [m for m in (_median_s(rng.choices(rs, k=len(rs))) for _ in range(draws))
               if math.isfinite(m)]
    return statistics.stdev(medians) if len(medians) > 1 else math.nan


if __name__ == "__main__":
    main()
