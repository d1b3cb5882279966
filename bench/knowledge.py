"""What an LLM's knowledge buys, and what a bad model costs: experts of known quality
(bench/experts.py, served on loopback HTTP) reviewing tunepilot's sampler, side by side with
Optuna alone, on HPOBench-MLP's published tables (8 data sets, 30,000 configs each), the classic
tasks and the built-in CTR task of bench/search.py.

    python bench/knowledge.py --seeds 20 --results bench/results/knowledge-hpobench-20.jsonl
    python bench/knowledge.py --seeds 2 --tasks hpobench-credit_g     # a few minutes
    python bench/knowledge.py --tasks classic --seeds 20 --results FILE

A task without a published table gets a pool in its place: 2^k configs drawn once by scrambled
Sobol points (Optuna's `QMCSampler`, seed 0) over the task's space and evaluated, kept in
`bench/results/pool-TASK.jsonl` and read back on later runs (built at the first run that needs
it: seconds for the analytic tasks, minutes for the trained ones). Its ranking is what the
experts know, and the rank of a search's best is the share of the pool at least as good (0 when
the search found a config better than every pooled one).

Strategies (every one on the same tasks and seeds, trial 0 the task's default config):

- `optuna-tpe`: Optuna alone as its users run it (`TPESampler(seed=seed)`), the peer;
- `auto`: tunepilot without a key (its sampler rule, no LLM);
- `review+open:EXPERT`: tunepilot's default with a model (`--strategy auto` with a key is
  `review`, over the default sampler rule `auto`): the expert's zero-shot opening (one turn, a
  tenth of the budget in configs) after trial 0, then the sampler's candidate every trial, the
  expert accepts or overrides it, its share of overrides earned from its record
  (tunepilot/memory/trust.py);
- `review:EXPERT`: the same without the opening (`opening=0`);
- `fixed:EXPERT`: `review` with the share fixed at 30%, as before this round;
- `hybrid:EXPERT`, `hybrid+open:EXPERT`: `--strategy hybrid` (the expert proposes the first 2
  trials, then the share of trials its record earns), without and with the opening.

EXPERT is one of bench/experts.py's kinds, or `local`: the embedded model (SmolLM2-135M
in-process through llama.cpp, what `--llm local` runs) in the expert's place.

Measures: the best config's rank in the table after 5/10/20/30 trials, as the share of the
table's 30,000 configs at least as good (0.01 = the top 1%), mean ± standard error over tasks
and seeds; the median trials to the target, the table's top 1% (a run that never reaches it
counts as never: ">30"); how many trials the LLM proposed, and requests made.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experts import Expert
from scores import Run, Saved
from search import run_one
from tasks import CLASSIC, HPOBENCH, _hpobench_table, get_task

EXPERTS = ("oracle:1%", "noisy:0.5", "misleading", "accept", "garbage")
STRATEGIES = ("optuna-tpe", "auto", *(f"review+open:{e}" for e in EXPERTS),
              *(f"review+open+cal:{e}" for e in ("oracle:1%", "misleading")),
              *(f"review:{e}" for e in EXPERTS), "fixed:oracle:1%", "fixed:misleading")
BUDGETS = (5, 10, 20, 30)
TOP = 0.01
POOLS = Path(__file__).resolve().parent / "results"
# Configs per pool (powers of 2 for Sobol points): the 1% an oracle knows is 10-80 configs.
POOL_SIZE = {"branin": 8192, "mixed": 8192, "svm-cancer": 4096, "forest-wine": 2048,
             "boosting-diabetes": 2048, "mlp-digits": 1024, "ctr-lightning": 1024}


def _pool_path(task: str) -> Path:
    return POOLS / f"pool-{task}.jsonl"


def build_pool(task_name: str) -> str:
    """Evaluate the task's pool of Sobol configs once and keep it (see the module's text)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    task = get_task(task_name)
    rows: list[dict[str, Any]] = []

    def objective(trial: optuna.Trial) -> float:
        config = {k: v for k, v in task.space.sample(trial).items() if k in task.space.params}
        loss = task.fn(config)
        rows.append({"config": config, "loss": loss})
        return loss

    start = time.time()
    study = optuna.create_study(sampler=optuna.samplers.QMCSampler(
        qmc_type="sobol", scramble=True, seed=0, warn_independent_sampling=False))
    study.optimize(objective, n_trials=POOL_SIZE[task_name])
    path = _pool_path(task_name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)
    return f"{task_name}: {len(rows)} configs in {time.time() - start:.0f} s -> {path}"


def ranked(task: str) -> tuple[list[dict[str, Any]], list[float]]:
    """The task's configs best first, and their losses in that order."""
    if not task.startswith("hpobench-"):
        with _pool_path(task).open() as f:
            pool = sorted((json.loads(line) for line in f),
                          key=lambda r: (r["loss"], json.dumps(r["config"], sort_keys=True)))
        return [r["config"] for r in pool], [r["loss"] for r in pool]
    bench, table = _hpobench_table(task.removeprefix("hpobench-"))
    names = list(bench.search_space)
    rows = sorted(table.items(), key=lambda kv: (kv[1], kv[0]))
    configs = [{n: bench.search_space[n][int(key[i])] for i, n in enumerate(names)}
               for key, _ in rows]
    return configs, [loss for _, loss in rows]


def one(task_name: str, strategy: str, seed: int, budget: int) -> Run:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    task = get_task(task_name)
    if strategy in ("optuna-tpe", "auto"):
        return run_one(task, strategy, seed, budget)
    mode, _, kind = strategy.partition(":")
    calibrated = mode.endswith("+cal")  # its record starts from its `tune calibrate` verdict
    mode = mode.removesuffix("+cal")
    tuner_kw: dict[str, Any] = {
        "sampler": "auto", "max_override_share": 0.3 if mode == "fixed" else None,
        "opening": None if mode.endswith("+open") else 0,
        "calibration": expert_calibration(kind) if calibrated else False}
    how = "hybrid" if mode.startswith("hybrid") else "review"
    if kind == "local":
        from tunepilot.llm import local
        from tunepilot.llm.models import LLMSettings

        run = run_one(task, how, seed, budget, local.chat_model(LLMSettings("local")),
                      **tuner_kw)
        run.strategy = strategy
        return run
    configs, _ = ranked(task_name)
    with Expert(kind, configs, seed) as expert:
        # The product's default with a key: review over the default sampler rule.
        run = run_one(task, how, seed, budget, expert.chat_model(), **tuner_kw)
        requests = expert.requests
    run.strategy, run.model = strategy, f"expert {kind}; requests {requests}"
    return run


def expert_calibration(kind: str) -> Any:
    """The expert's `tune calibrate` verdict (the default calibration, on seeds apart from the
    runs'), computed once and kept in bench/results/calibration-experts.json."""
    from calibration import expert_for

    from tunepilot.agent import calibrate as cal
    from tunepilot.memory.calibrations import Calibration
    from tunepilot.prompts import version

    path = POOLS / "calibration-experts.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    if kind not in kept:
        seeds = range(1000, 1000 + cal.DEFAULT_SEEDS)
        with expert_for(kind, seeds) as expert:
            report = cal.calibrate(expert.chat_model(), first_seed=seeds.start)
        kept[kind] = report.calibration(version()).to_record()
        path.write_text(json.dumps(kept, indent=1))
    return Calibration.from_record(kept[kind])


def _quantile(losses: Sequence[float], value: float) -> float:
    """The share of the table at least as good as `value` (the best config: 1/30000)."""
    return bisect.bisect_right(losses, value + 1e-12) / len(losses)


def _mean_se(xs: Sequence[float]) -> str:
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return f"{statistics.fmean(xs):.4f} ± {se:.4f}"


def report(runs: list[Run], tasks: Sequence[str], strategies: Sequence[str], budget: int) -> str:
    tables = {t: ranked(t)[1] for t in tasks}
    lines = ["| strategy | " + " | ".join(f"rank @{b}" for b in BUDGETS if b <= budget)
             + " | median trials to top 1% | reached | LLM trials | requests/run |",
             "|---|" + "---|" * (len([b for b in BUDGETS if b <= budget]) + 4)]
    per_task: dict[str, dict[str, float]] = {}
    for s in strategies:
        mine = [r for r in runs if r.strategy == s and r.task in tables]
        if not mine:
            continue
        cells = [_mean_se([_quantile(tables[r.task], r.best_at(b)) for r in mine])
                 for b in BUDGETS if b <= budget]
        hits = []
        for r in mine:
            target = tables[r.task][max(0, int(TOP * len(tables[r.task])) - 1)]
            hits.append(next((i + 1 for i, v in enumerate(r.values[:budget])
                              if v <= target + 1e-12), math.inf))
        median = statistics.median(hits)
        reached = sum(1 for h in hits if math.isfinite(h))
        llm_trials = statistics.fmean(sum(1 for p in r.proposers[:budget] if p == "llm")
                                      for r in mine)
        requests = [int(r.model.rsplit(" ", 1)[1]) for r in mine if "requests" in r.model]
        asked = f"{statistics.fmean(requests):.1f}" if requests else "-"
        lines.append(f"| {s} | " + " | ".join(cells)
                     + f" | {median if math.isfinite(median) else f'>{budget}'} | "
                     f"{reached} of {len(mine)} | {llm_trials:.1f} | {asked} |")
        per_task[s] = {t: statistics.fmean(
            1.0 if _quantile(tables[t], r.best_at(10)) <= TOP else 0.0
            for r in mine if r.task == t) for t in tasks if any(r.task == t for r in mine)}
    lines += ["", "Share of seeds whose best after 10 trials is in the table's top 1%, per task:",
              "", "| strategy | " + " | ".join(t.removeprefix("hpobench-") for t in tasks)
              + " |", "|---|" + "---|" * len(tasks)]
    for s, shares in per_task.items():
        lines.append(f"| {s} | " + " | ".join(f"{shares.get(t, math.nan):.2f}" for t in tasks)
                     + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="hpobench",
                        help="comma-separated: hpobench-DATASET, a classic task, ctr-lightning, "
                        "or the groups hpobench and classic [hpobench]")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2, help="processes [2]")
    parser.add_argument("--results", type=Path, action="append", default=[], metavar="FILE",
                        help="keep finished runs (JSON lines) and reuse those it holds")
    parser.add_argument("--saved-only", action="store_true",
                        help="run nothing: the tables of the runs the --results files hold")
    args = parser.parse_args()
    groups = {"classic": CLASSIC, "hpobench": [f"hpobench-{d}" for d in HPOBENCH]}
    tasks = [n for part in args.tasks.split(",") for n in groups.get(part, [part])]
    strategies = args.strategies.split(",")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # sklearn and torch on one core a process
    missing = [t for t in tasks if not t.startswith("hpobench-") and not _pool_path(t).exists()]
    if missing and not args.saved_only:
        with ProcessPoolExecutor(args.jobs) as pool:
            for line in pool.map(build_pool, missing):
                print(f"pool {line}", flush=True)
    saved = Saved(args.results)
    print(f"# knowledge benchmark, {time.strftime('%Y-%m-%d %H:%M')}: tasks {tasks}; seeds "
          f"0..{args.seeds - 1}; {args.budget} trials", flush=True)
    runs: list[Run] = []
    todo = []
    for task in tasks:
        for s in strategies:
            for seed in range(args.seeds):
                kept = [r for r in saved.runs if (r.task, r.strategy, r.seed) == (task, s, seed)
                        and len(r.values) >= args.budget]
                if kept:
                    runs.append(kept[0].first(args.budget))
                elif not args.saved_only:
                    todo.append((task, s, seed))
    start = time.time()
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(one, t, s, seed, args.budget) for t, s, seed in todo]
        for (t, s, seed), f in zip(todo, futures, strict=True):
            run = f.result()
            saved.add(run)
            runs.append(run)
            print(f"  {t:<26} {s:<20} seed {seed:>2}: best {min(run.values):.4f} in "
                  f"{run.seconds:.1f} s", flush=True)
    print(f"\nwall {time.time() - start:.0f} s\n")
    print(report(runs, tasks, strategies, args.budget))


if __name__ == "__main__":
    main()
