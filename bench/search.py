"""Search quality: strategies side by side on tasks with known (or best-known) answers.

Every strategy gets the same tasks, seeds, budgets and starting point: trial 0 of every run is
the task's default config (what a person would try first, and what the LLM sees first), so an
LLM's lead from a good first guess is not counted as search. Each run goes to the largest
budget; its best-so-far is read at every smaller one.

Per task and budget it prints the best validation loss (mean and standard deviation over
seeds), the trials needed to reach the task's target (the median over seeds; ">B" when a seed
never reached it), and Bayesmark's normalized score: (best - optimum) / (random - optimum),
where "random" is the mean best-so-far of a reference pool of random searches (seeds apart from
the benchmarked ones) at the same budget, and "optimum" is the known minimum (analytic tasks)
or the best value any run found (others). Random search scores about 1; 0 is the optimum.

    python bench/search.py --quick                   # a few minutes: 3 cheap tasks, 2 seeds
    python bench/search.py                           # the full run: hours with the embedded LLM
    python bench/search.py --tasks hpobench --strategies random,tpe,cmaes,review
    python bench/search.py --llm openai:gpt-4o-mini  # or any OpenAI-compatible endpoint:
    python bench/search.py --llm openai:MODEL --llm-base-url http://127.0.0.1:8000/v1

Runs of the embedded model take hours, so `--results FILE` keeps every finished run (one JSON
line each) and reuses the runs a file already holds (same task, strategy, seed and model, at
least as many trials) instead of running them again: a run can be stopped and resumed, spread
over several processes (one file each, all of them named for the tables), and its tables
printed again from the files alone.

    python bench/search.py --tasks hpobench --strategies review --budgets 20 --results r.jsonl
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings, when loaded by path

from scores import TARGET_SCORE, Results, Run, Saved, ranks, review_stats, summary, table, versus
from tasks import CLASSIC, HPOBENCH, TASKS, Task, get_task

from tunepilot import Tuner, trainers

STRATEGIES = ("random", "tpe", "cmaes", "llm", "hybrid", "review")
# Also accepted: the samplers `optuna-tpe` (the peer: a plain
# `optuna.create_study(sampler=TPESampler(seed=seed))`, as a user of Optuna would run it, not
# through tunepilot), `gp` (Optuna's GPSampler as it comes), `auto` (tunepilot's --sampler auto),
# and two start-ups tried for it: `sobol-tpe` and `sobol-gp` (4 Sobol points after the default, then
# TPE or GP from trial 5), and `cmaes-tpe:K` (CMA-ES before trial K, TPE from it: `auto` with
# CMAES_UNTIL = K).
SAMPLER_STRATEGIES = {"random": "random", "tpe": "tpe", "cmaes": "cmaes", "gp": "gp",
                      "auto": "auto"}
SOBOL_STARTUP = 5


def run_one(task: Task, strategy: str, seed: int, budget: int, llm: Any = None,
            **tuner_kw: Any) -> Run:
    """One search of `budget` trials, its trial 0 the task's default config; `tuner_kw` go to
    the `Tuner` (max_override_share...)."""
    def train(config: Mapping[str, Any], report: Any) -> float:
        return task.fn(config)

    if strategy == "optuna-tpe":
        return _plain_optuna(task, seed, budget)
    kind: Any = SAMPLER_STRATEGIES.get(strategy, "tpe")
    if strategy in ("sobol-tpe", "sobol-gp"):
        kind = _sobol_then(strategy.removeprefix("sobol-"), f"{task.name}-{seed}", seed)
    if strategy.startswith("cmaes-tpe:"):
        kind = _cmaes_until(int(strategy.split(":")[1]), task, seed)
    uses_llm = strategy in ("llm", "hybrid", "review")
    kind = tuner_kw.pop("sampler", kind)
    tuner = Tuner(trainers.callable(train), task.space,
                  llm=llm if uses_llm else None,
                  strategy=strategy if uses_llm else "auto",
                  task=task.description, storage="sqlite:///:memory:",
                  # One name per task and seed: the samplers' draws are seeded by it, so every
                  # strategy with the sampler's turns draws what TPE alone would.
                  study=f"{task.name}-{seed}", sampler=kind,
                  pruner="none", seed=seed, display=None, warm_start=False,
                  # Trials here are look-ups or seconds long, so the product's cap on the LLM's
                  # share of wall time would give the sampler nearly every turn: lifted, so the
                  # benchmark measures the LLM's decisions (time-to-target measures its time).
                  llm_time_share=1.0, **tuner_kw)
    tuner.enqueue(dict(task.default))
    start = time.perf_counter()
    result = tuner.run(n_trials=budget)
    seconds = time.perf_counter() - start
    trials = sorted(result.history, key=lambda t: t.number)
    values = [t.value if t.value is not None else math.inf for t in trials]
    reviews = [(t.number, t.review.verdict, v, v if t.review.verdict == "accepted"
                else task.fn(task.space.snap(t.review.candidate)))
               for t, v in zip(trials, values, strict=True) if t.review is not None]
    return Run(task.name, strategy, seed, values, [dict(t.params) for t in trials],
               [t.proposer for t in trials], seconds, reviews,
               _model_name(llm) if uses_llm else "none")


def _sobol_then(model: str, study: str, seed: int) -> Callable[[int], Any]:
    """Trial number -> sampler: scrambled Sobol points (one sequence per study) before trial
    SOBOL_STARTUP, then TPE (tunepilot's settings) or GP, seeded as the product seeds."""
    import optuna

    from tunepilot.proposers.samplers import study_seed

    base = study_seed(study, seed)

    def per_trial(number: int) -> Any:
        own = (base + number) % 2**32
        if number < SOBOL_STARTUP:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.samplers.QMCSampler(
                    qmc_type="sobol", scramble=True, seed=base, warn_independent_sampling=False,
                    warn_asynchronous_seeding=False)
        if model == "gp":
            return optuna.samplers.GPSampler(seed=own, n_startup_trials=SOBOL_STARTUP,
                                             warn_independent_sampling=False)
        return optuna.samplers.TPESampler(seed=own, multivariate=True, constant_liar=True,
                                          n_startup_trials=SOBOL_STARTUP)

    return per_trial


def _cmaes_until(switch: int, task: Task, seed: int) -> Callable[[int], Any]:
    """`auto`'s rule with another switch from CMA-ES to TPE, seeded as the product seeds."""
    from tunepilot.proposers import samplers

    auto = samplers.per_trial_sampler("auto", f"{task.name}-{seed}", seed, task.space)
    tpe = samplers.per_trial_sampler("tpe", f"{task.name}-{seed}", seed, task.space)
    return lambda number: auto(number) if number < switch else tpe(number)


def _plain_optuna(task: Task, seed: int, budget: int) -> Run:
    """What a user of Optuna runs: its default sampler (TPE, 10 random start-up trials) seeded,
    the task's default config enqueued as trial 0 like every strategy's."""
    import optuna

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial(dict(task.default))
    start = time.perf_counter()
    study.optimize(lambda trial: task.fn(task.space.sample(trial)), n_trials=budget)
    seconds = time.perf_counter() - start
    trials = study.get_trials(deepcopy=False)
    return Run(task.name, "optuna-tpe", seed, [float(t.value) for t in trials],
               [dict(t.params) for t in trials], ["optuna"] * len(trials), seconds)


def benchmark(tasks: Sequence[Task], strategies: Sequence[str], seeds: Sequence[int],
              budget: int, reference_repeats: int, llm: Any = None,
              log: Callable[[str], None] = print, saved: Saved | None = None,
              run_missing: bool = True) -> Results:
    """Every strategy on every task and seed; runs `saved` already holds are reused (cut to
    `budget`). `run_missing=False`: only those, whatever their length (the tables read each
    budget from the runs that reached it)."""
    saved = saved if saved is not None else Saved([])
    results = Results(model=_model_name(llm))
    for task in tasks:
        # The reference pool: random search with seeds none of the benchmarked runs use.
        results.reference[task.name] = [run_one(task, "random", 10_000 + i, budget)
                                        for i in range(reference_repeats)]
        for strategy in strategies:
            uses_llm = strategy in ("llm", "hybrid", "review")
            model = results.model if uses_llm else "none"
            for seed in seeds:
                run = saved.find(task.name, strategy, seed, model, budget if run_missing else 1)
                if run is not None and run_missing:
                    run = run.first(budget)
                elif run is None and not run_missing:
                    continue
                elif run is None:
                    run = run_one(task, strategy, seed, budget, llm)
                    saved.add(run)
                    log(f"  {task.name:<18} {strategy:<7} seed {seed}: best "
                        f"{min(run.values):.4g} in {run.seconds:.0f} s")
                results.runs.append(run)
    return results


def _model_name(llm: Any) -> str:
    if llm is None:
        return "none"
    spec = getattr(llm, "spec", llm)
    if spec in ("local", "auto"):
        from tunepilot.llm import local

        return f"local: {local.LABEL}"
    if not isinstance(spec, str):  # a chat model object (langchain's ChatOpenAI, ...)
        spec = f"{type(spec).__name__}:{getattr(spec, 'model_name', None) or '?'}"
    base = getattr(llm, "base_url", None) or getattr(llm, "openai_api_base", None)
    return f"{spec}" + (f" at {base}" if base else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 cheap tasks, 2 seeds, 10 trials")
    parser.add_argument("--tasks", help=f"comma-separated, of {', '.join(TASKS)}, "
                        "hpobench-DATASET (" + ", ".join(HPOBENCH) + "), or the groups "
                        "classic and hpobench")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=int, help="seeds per strategy [5; quick 2]")
    parser.add_argument("--budgets", help="comma-separated trial budgets [5,10,20,50]")
    parser.add_argument("--repeats", type=int, help="random-search reference runs per task [6]")
    parser.add_argument("--llm", default="local", help="LLM spec for llm/hybrid [local]")
    parser.add_argument("--llm-base-url", help="OpenAI-compatible endpoint for --llm openai:MODEL")
    parser.add_argument("--results", action="append", type=Path, default=[], metavar="FILE",
                        help="keep finished runs in FILE (JSON lines) and reuse those it holds; "
                        "repeatable: runs are read from all, new ones appended to the last")
    parser.add_argument("--peer", default="optuna-tpe",
                        help="the strategy every other is compared with task by task")
    parser.add_argument("--saved-only", action="store_true",
                        help="run nothing new: the tables of the runs the --results files hold "
                        "(each budget from the runs that reached it)")
    args = parser.parse_args()
    import optuna

    from tunepilot.llm.models import LLMSettings

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # sklearn and torch on one core each trial
    if args.quick:
        names, seeds, budgets, repeats = ["branin", "mixed", "hpobench-credit_g"], 2, [5, 10], 6
    else:
        names = CLASSIC + [f"hpobench-{d}" for d in HPOBENCH]
        seeds, budgets, repeats = 5, [5, 10, 20, 50], 6
    if args.tasks:
        groups = {"classic": CLASSIC, "hpobench": [f"hpobench-{d}" for d in HPOBENCH]}
        names = [n for part in args.tasks.split(",") for n in groups.get(part, [part])]
    tasks = [get_task(n) for n in names]
    seeds = args.seeds or seeds
    budgets = [int(b) for b in args.budgets.split(",")] if args.budgets else budgets
    repeats = args.repeats or repeats
    strategies = args.strategies.split(",")
    llm = LLMSettings(args.llm, args.llm_base_url, timeout=120.0)
    results = Results()
    saved = Saved(args.results)
    start = time.time()
    print(f"# search benchmark, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}: "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, optuna "
          f"{optuna.__version__}")
    print(f"tasks {names}; strategies {strategies}; seeds 0..{seeds - 1}; budgets {budgets}; "
          f"random reference pool {repeats} runs per task")
    for task in tasks:
        part = benchmark([task], strategies, range(seeds), max(budgets), repeats, llm,
                         saved=saved, run_missing=not args.saved_only)
        results.runs += part.runs
        results.reference.update(part.reference)
        results.model = part.model
    print(f"\nLLM: {results.model}; wall {time.time() - start:.0f} s\n")
    print("Per task: mean best loss ± std over seeds; normalized score (0 = optimum, 1 = random "
          f"search) ± std; median trials to reach score {TARGET_SCORE}.\n")
    print(table(results, tasks, strategies, budgets))
    print("\nMean normalized score over the tasks (lower is better) ± standard error (of the "
          "per-seed means over the tasks):\n")
    print(summary(results, tasks, strategies, budgets))
    if args.peer in strategies:
        print(f"\nTask by task against {args.peer} (beyond 2 standard errors of the "
              "difference):\n")
        print(versus(results, tasks, strategies, budgets, args.peer))
    print("\nMean rank over the tasks (1 = best of the strategies run):\n")
    print(ranks(results, tasks, strategies, budgets))
    if "review" in strategies:
        print("\n" + review_stats(results))


if __name__ == "__main__":
    main()
