"""Runs of the search benchmarks kept as JSON lines (`Run`, `Saved`), their scores against the
optimum and a random-search pool (`Results`), and the tables printed from them."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks import Task

TARGET_SCORE = 0.2  # "reached the target": 80% of the way from random search to the optimum


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


