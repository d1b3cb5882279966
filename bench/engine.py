"""The engine, held out: tunepilot's samplers beside every optimizer a user could pick instead,
on four families of problems (`bench/families.py`), each problem with and without a declared
default, every strategy on the same problems and seeds in one run.

    python bench/engine.py --seeds 20 --budget 50 --results bench/results/engine.jsonl
    python bench/engine.py --strategies hebo,ax --families hpobench --seeds 10 --budget 30 ...
    python bench/engine.py --results bench/results/engine.jsonl --saved-only   # the tables

Strategies: the peers of `bench/peers.py` (optuna-tpe, optuna-gp, random, hyperopt, smac,
hebo, ax, each with its own defaults) and tunepilot's samplers by their `--sampler` names
(`tp:auto`, `tp:tpe`, `tp:gp`...), run through `tunepilot.Tuner` as `tune run` runs them (the
declared default as the space's `default`, trial 0); `model:EXPERT` and `model+cal:EXPERT` are
the default with a model of known quality beside it (`bench/reviewed.py`).

It prints, per family and pooled over the families (each family weighs the same): the rank of
the best config found (by the loss the optimizer saw; scored by its noise-free loss) at each
budget, mean ± standard error over seeds (the problems of a family and both variants averaged
per seed first), the paired difference against Optuna's `TPESampler()` in standard errors, and
each strategy's own seconds a trial; `--paired-against hebo,ax` adds, per family and pooled,
each strategy's paired difference from those peers (mean ± se over seeds, and the ratio).
`--results FILE` keeps each run as a JSON line and reuses what a file holds, so a long run can
stop, resume, and spread over processes (`--jobs`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from families import FAMILIES, PROBLEMS, Problem, problem
from peers import PEERS, Trial
from warps import warped

BUDGETS = (5, 10, 20, 30, 50)


def _variants() -> None:
    """Variants of the default (not the product's), each with its help line: `auto-gp` is the
    default before its local draws (to 2026-12-04 evening), and the arms measured against it
    are built on it (`every=0`); `auto-seen` is the default before its local draws went near
    the trial the GP rates best (to 2026-12-05), and `auto-local3`, `auto-local2` are built on
    it."""
    from tunepilot.proposers import samplers
    from tunepilot.proposers.auto import Auto

    for name, help, make in (
            ("auto-gp", "the default before its local draws: Latin hypercube, then GP",
             lambda seed, space, number: Auto(seed, space, number, every=0)),
            ("auto-s10", "10 Sobol points, then the default's GP",
             lambda seed, space, number: Auto(seed, space, number, first=10, start="qmc",
                                              every=0)),
            ("auto-sobol", "the default with Sobol points in place of its Latin hypercube",
             lambda seed, space, number: Auto(seed, space, number, start="qmc", every=0)),
            ("auto-rand", "the default with random draws in place of its Latin hypercube",
             lambda seed, space, number: Auto(seed, space, number, start="random", every=0)),
            ("auto-local", "the default with half its start-up near a declared default",
             lambda seed, space, number: Auto(seed, space, number, start=_near_default,
                                              every=0)),
            ("auto-none", "the default before its local draws, run beside its warped arms",
             lambda seed, space, number: Auto(seed, space, number, every=0)),
            ("auto-rank", "the default's GP fitted on the normal scores of the losses' ranks",
             lambda seed, space, number: warped(seed, space, number, warp="rank")),
            ("auto-cap", "the default's GP fitted on the losses with the worse half at the median",
             lambda seed, space, number: warped(seed, space, number, warp="cap")),
            ("auto-log", "the default's GP fitted on the log of each loss's distance from the "
             "best", lambda seed, space, number: warped(seed, space, number, warp="log")),
            ("auto-seen", "the default with its local draws near the best loss seen, not the "
             "trial the GP rates best", lambda seed, space, number: Auto(
                 seed, space, number, local="local-seen")),
            ("auto-local3", "auto-seen: one trial in 3 drawn near the best from twice the "
             "start-up on", lambda seed, space, number: Auto(seed, space, number, every=3,
                                                             local="local-seen")),
            ("auto-local2", "auto-seen with one trial in 2 drawn near the best",
             lambda seed, space, number: Auto(seed, space, number, every=2,
                                              local="local-seen"))):
        samplers.register(samplers.SamplerKind(name, make, help, redraw="random"))


# `auto-local`: start-up points near a declared default, this share of each number's (log)
# range either side.
LOCAL_WIDTH = 0.15


def _near_default(seed: int | None, space: Any, number: int, first: int | None) -> Any:
    """The default's Latin hypercube with points 1 to (n - 1) // 2 of its first block moved
    into a box around the space's declared defaults: numbers within `LOCAL_WIDTH` of their
    (log) range either side, each choice the declared one (measured 2026-12-04, not taken)."""
    import numpy as np
    from optuna._transform import _SearchSpaceTransform
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from tunepilot.proposers.auto import Latin, build

    latin = build("lhs", seed, space, number, first)
    assert isinstance(latin, Latin)
    defaults, local = space.defaults(), (latin._n - 1) // 2

    def sample(study: Any, search_space: dict[str, Any]) -> Any:
        block, row = divmod(latin._number, latin._n)
        u = latin.design(block, len(search_space))[row]
        if block or not 1 <= row <= local or not defaults:
            return u[None, :]
        pseudo = {n: FloatDistribution(0, len(d.choices)) for n, d in search_space.items()
                  if isinstance(d, CategoricalDistribution)}
        at = {n: (search_space[n].choices.index(v) + 0.5 if n in pseudo else v)
              for n, v in defaults.items() if n in search_space}
        rest = {n: d for n, d in (search_space | pseudo).items() if n in at}
        x0 = dict(zip(rest, _SearchSpaceTransform(rest, transform_0_1=True).transform(at),
                      strict=True))
        for i, n in enumerate(search_space):
            if n in x0:
                u[i] = x0[n] if n in pseudo else np.clip(x0[n] + (u[i] - 0.5) * 2 * LOCAL_WIDTH,
                                                         0.0, 1.0 - 1e-9)
        return u[None, :]

    latin._sample_qmc = sample  # type: ignore[method-assign]
    return latin


PEER = "optuna-tpe"  # the paired differences are against Optuna as it comes
TRIAL_S = 60.0  # what a look-up says it took (see `run_tunepilot`)


def run_tunepilot(sampler: str, p: Problem, seed: int, budget: int, llm: Any = None,
                  proposers: list[str] | None = None, **tuner_kw: Any) -> list[Trial]:
    """`tune run`'s engine on `p`: a `Tuner` with the sampler by name, the problem's default
    as the space's default (trial 0), no pruning (one value per trial); with `llm` and
    `tuner_kw` (strategy...), a model beside it, each trial's proposer put in `proposers`."""
    from tunepilot import SearchSpace, TrainResult, Tuner, trainers

    space = p.space
    if p.default is not None:
        space = SearchSpace.of(**{n: param.model_copy(update={"default": p.default[n]})
                                  for n, param in space.params.items()})
    out: list[Trial] = []
    spent = [0.0]

    def train(config: Mapping[str, Any], report: Any) -> TrainResult:
        start = time.perf_counter()
        config = {k: config[k] for k in space.params}
        seen, true = p.loss(config)
        out.append(Trial(dict(config), seen, true, 0.0))
        spent[0] += time.perf_counter() - start
        # A look-up stands in for a training run: said to take a minute, so the default's
        # cost rule lets its sampler spend what it would beside real trials (search quality
        # is measured here; the sampler's own time is bench/samplers.py's).
        return TrainResult(seen, (), TRIAL_S)

    # A new study of its own storage: its first trial is the space's default, as `tune run`
    # runs it (and no other study is there to warm-start from).
    tuner = Tuner(trainers.callable(train), space, storage="sqlite:///:memory:",
                  study=f"{p.family}-{p.name}-{seed}", sampler=sampler, pruner="none",
                  seed=seed, display=None, llm=llm, **tuner_kw)
    start = time.perf_counter()
    result = tuner.run(n_trials=budget)
    if proposers is not None:
        proposers += [t.proposer for t in sorted(result.history, key=lambda t: t.number)]
    own = (time.perf_counter() - start - spent[0]) / max(len(out), 1)
    for t in out:
        t.sampler_s = own
    return out


def run_one(key: tuple[str, str, str, int, bool], budget: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # one process a core, every strategy alike
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    strategy, family, name, seed, declared = key
    _variants()
    p = problem(family, name, seed, declared)
    proposers: list[str] = []
    extra: Mapping[str, Any] = {}
    if strategy.startswith("tp:"):
        trials = run_tunepilot(strategy.removeprefix("tp:"), p, seed, budget)
    elif strategy.startswith("model"):  # the default with an expert beside it
        from reviewed import with_expert

        trials, extra = with_expert(strategy, p, seed, lambda **kw: run_tunepilot(
            "auto", p, seed, budget, proposers=proposers, **kw))
        extra = {**extra, "llm_trials": proposers.count("llm"),
                 "llm_at": [i for i, who in enumerate(proposers) if who == "llm"]}
    else:
        trials = PEERS[strategy](p, seed, budget)
    best, ranks = math.inf, []
    best_true = math.inf
    for t in trials:
        if t.seen < best:  # the config the optimizer would report, scored by its true loss
            best, best_true = t.seen, t.true
        ranks.append(p.rank(best_true))
    return {"strategy": strategy, "family": family, "problem": name, "seed": seed,
            "declared": declared, "budget": budget, "ranks": ranks,
            "true": [t.true for t in trials], "sampler_s": [round(t.sampler_s, 4) for t in trials],
            "date": time.strftime("%Y-%m-%d %H:%M"), **extra}


def _key(r: Mapping[str, Any]) -> tuple[str, str, str, int, bool]:
    return (r["strategy"], r["family"], r["problem"], r["seed"], r["declared"])


def load(paths: Sequence[Path]) -> list[dict[str, Any]]:
    runs = []
    for path in paths:
        if path.exists():
            runs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return runs


def benchmark(strategies: Sequence[str], families: Sequence[str], seeds: Sequence[int],
              budget: int, paths: Sequence[Path], jobs: int = 1,
              problems: Sequence[str] = ()) -> list[dict[str, Any]]:
    runs = load(paths)
    have = {_key(r) for r in runs if r["budget"] >= budget}
    # Seed by seed, so a run stopped early holds every family at fewer seeds.
    todo = [(s, f, n, seed, declared) for seed in seeds for f in families for n in PROBLEMS[f]
            if not problems or n in problems for declared in (False, True) for s in strategies]
    todo = [k for k in todo if k not in have]
    print(f"{len(todo)} runs to do, {len(have)} kept", flush=True)
    start = time.time()

    def keep(run: dict[str, Any]) -> None:
        runs.append(run)
        if paths:
            with paths[-1].open("a") as f:
                f.write(json.dumps(run) + "\n")

    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            for i, run in enumerate(pool.map(run_one, todo, [budget] * len(todo)), 1):
                keep(run)
                if i % 20 == 0:
                    print(f"  {i}/{len(todo)} ({time.time() - start:.0f} s)", flush=True)
    else:
        for i, key in enumerate(todo, 1):
            keep(run_one(key, budget))
            if i % 20 == 0:
                print(f"  {i}/{len(todo)} ({time.time() - start:.0f} s)", flush=True)
    return runs


# The tables ----------------------------------------------------------------------------------

def per_seed(runs: Sequence[Mapping[str, Any]], strategy: str, family: str | None,
             b: int) -> dict[int, float]:
    """Per seed: the strategy's mean rank at budget `b` over the problems (both variants) of
    `family`, or over the families (each the mean of its problems) where `family` is None."""
    cells: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in runs:
        if r["strategy"] == strategy and len(r["ranks"]) >= b and (
                family is None or r["family"] == family):
            cells[(r["seed"], r["family"])].append(r["ranks"][b - 1])
    seeds: dict[int, list[float]] = defaultdict(list)
    for (seed, _), values in cells.items():
        seeds[seed].append(statistics.fmean(values))
    return {s: statistics.fmean(v) for s, v in seeds.items()}


def _se(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0


def common(runs: Sequence[Mapping[str, Any]], strategies: Sequence[str]) -> list[dict[str, Any]]:
    """The runs of problems, variants and seeds that every one of `strategies` ran: only
    those compare."""
    keys: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
    for r in runs:
        keys[r["strategy"]].add((r["family"], r["problem"], r["seed"], r["declared"]))
    shared = set.intersection(*(keys[s] for s in strategies)) if strategies else set()
    return [dict(r) for r in runs if r["strategy"] in strategies
            and (r["family"], r["problem"], r["seed"], r["declared"]) in shared]


def table(runs: Sequence[Mapping[str, Any]], strategies: Sequence[str], family: str | None,
          budgets: Sequence[int]) -> str:
    head = "| strategy | " + " | ".join(f"rank @{b}" for b in budgets) + " | own s/trial |"
    lines = [head, "|" + "---|" * (len(budgets) + 2)]
    for s in strategies:
        cells = []
        for b in budgets:
            mine = per_seed(runs, s, family, b)
            if not mine:
                cells.append("-")
                continue
            cell = f"{statistics.fmean(mine.values()):.4f} ± {_se(list(mine.values())):.4f}"
            against = paired(runs, s, PEER, family, b) if s != PEER else None
            if against and against[1] > 0:
                cell += f" ({against[0] / against[1]:+.1f} se)"
            cells.append(cell)
        own = [x for r in runs if r["strategy"] == s and (family is None or r["family"] == family)
               for x in r["sampler_s"]]
        seeds = len(per_seed(runs, s, family, budgets[0]))
        own_cell = f"{statistics.fmean(own):.3f}" if own else "-"
        lines.append(f"| {s} ({seeds} seeds) | " + " | ".join(cells) + f" | {own_cell} |")
    return "\n".join(lines)


def paired(runs: Sequence[Mapping[str, Any]], mine: str, other: str, family: str | None,
           b: int) -> tuple[float, float, float, int] | None:
    """`mine` less `other` at budget `b`, paired by seed (each seed's mean over the family, or
    the mean of the families' means): (mean difference, its standard error, ratio of the two
    means, seeds), or None where fewer than two seeds hold both."""
    a, t = per_seed(runs, mine, family, b), per_seed(runs, other, family, b)
    both = sorted(set(a) & set(t))
    if len(both) < 2:
        return None
    diffs = [a[k] - t[k] for k in both]
    theirs = statistics.fmean(t[k] for k in both)
    ratio = statistics.fmean(a[k] for k in both) / theirs if theirs else math.inf
    return statistics.fmean(diffs), _se(diffs), ratio, len(both)


def paired_table(runs: Sequence[Mapping[str, Any]], strategies: Sequence[str], against: str,
                 family: str | None, budgets: Sequence[int]) -> str:
    lines = [f"| strategy less {against} | " + " | ".join(f"@{b}" for b in budgets) + " |",
             "|" + "---|" * (len(budgets) + 1)]
    for s in strategies:
        if s == against:
            continue
        cells = []
        for b in budgets:
            got = paired(runs, s, against, family, b)
            cells.append("-" if got is None else
                         f"{got[0]:+.4f} ± {got[1]:.4f} ({got[2]:.2f}x, {got[3]} seeds)")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default="optuna-tpe,optuna-gp,random,hyperopt,tp:auto")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--problems", default="", help="only these problems (names)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--results", type=Path, action="append", default=[])
    parser.add_argument("--saved-only", action="store_true")
    parser.add_argument("--paired-against", default="", metavar="NAMES",
                        help="also print each strategy's paired difference from these (comma "
                             "separated, e.g. hebo,ax): mean ± se over seeds, and the ratio")
    args = parser.parse_args()
    args.strategies_given = "--strategies" in sys.argv
    args.seeds_given = "--seeds" in sys.argv or "--first-seed" in sys.argv
    strategies = [s for s in args.strategies.split(",") if s]
    families = [f for f in args.families.split(",") if f]
    asked = [p for p in args.problems.split(",") if p]
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.saved_only:
        runs = load(args.results)
        if not args.strategies_given:
            strategies = sorted({r["strategy"] for r in runs}, key=lambda s: (s != PEER, s))
    else:
        runs = benchmark(strategies, families, seeds, args.budget, args.results, args.jobs,
                         asked)
    # The tables cover the families and problems asked for, saved runs of others left out, and
    # with --saved-only the seeds asked for where --seeds or --first-seed is given.
    runs = [r for r in runs if r["family"] in families and (not asked or r["problem"] in asked)
            and (not (args.saved_only and args.seeds_given) or r["seed"] in seeds)]
    against = [a for a in args.paired_against.split(",") if a]
    for name in against:
        if not any(r["strategy"] == name for r in runs):
            ran = ", ".join(sorted({r["strategy"] for r in runs})) or "nothing"
            parser.error(f"--paired-against {name}: no runs of it here (these hold: {ran}); "
                         f"run it first with --strategies {name} and the same --results")
    strategies += [a for a in against if a not in strategies]
    budgets = [b for b in BUDGETS if b <= args.budget]
    runs = common(runs, strategies)
    problems = len({(r["family"], r["problem"]) for r in runs})
    print(f"\n{problems} problems x 2 variants x {len({r['seed'] for r in runs})} seeds that "
          "every strategy ran")
    for family in [*families, None]:
        print(f"\n{family or 'pooled (each family weighs the same)'}:\n")
        print(table(runs, strategies, family, budgets))
        for other in against:
            print()
            print(paired_table(runs, strategies, other, family, budgets))


if __name__ == "__main__":
    main()
