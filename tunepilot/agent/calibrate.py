"""`tune calibrate`: what a chat model is worth as a tuner, measured in minutes on published
tables before a night is spent on it, and kept so every later run starts from it.

The model runs as `tune run` runs it (the same prompts, structured output, retries, opening,
`review` with its earned share, the default sampler) on HPOBench's tables as published and
disguised (`calibration_tables`), and the sampler runs alone on the same tables and seeds. The
verdict compares the two on the disguised tables, pair by pair (a table and a seed), so a model
gets no credit for having read the published results; where the published tables go much
better than the disguised ones, it says the model recalls them.

    report = calibrate(LLMSettings("openai:gpt-4o-mini"))
    print(report.summary)           # "4 tables x 2 seeds, disguised: ... worth its turns"
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tunepilot.agent.calibration_tables import Table, tables
from tunepilot.llm.models import LLMSettings
from tunepilot.memory import History, calibrations, trust
from tunepilot.memory.calibrations import LEVEL, RECALLS, TOO_FEW, WORSE, WORTH, Calibration
from tunepilot.memory.text import plural

DEFAULT_TABLES: tuple[str, ...] = ("australian", "car", "credit_g", "segment")
DEFAULT_SEEDS = 2
BUDGET = 20
TOP = 0.01  # "the top 1%" of a table
BUDGETS = (5, 10, 20)
SIGNIFICANT = 2.0  # standard errors
# Pairs (table x seed) of a variant below which no verdict is given: a standard error from
# fewer says little, and from one it is not defined.
MIN_PAIRS = 4


@dataclass(frozen=True)
class Run:
    """One search of one table, with the model or the sampler alone."""

    table: Table
    with_model: bool
    ranks: tuple[float, ...]  # the best config's rank after each trial
    judged: int = 0
    wins: int = 0
    overrides: int = 0
    overrides_won: int = 0
    invalid: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float | None = None
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def rank_at(self, n: int) -> float:
        return self.ranks[min(n, len(self.ranks)) - 1]

    @property
    def to_top(self) -> int | None:
        """The trial (from 1) whose best is in the table's top 1%; None: not within the run."""
        return next((i + 1 for i, r in enumerate(self.ranks) if r < TOP), None)


@dataclass(frozen=True)
class Comparison:
    """The model against the sampler alone on one variant: paired per table and seed."""

    pairs: int
    gain: float  # `area` of the model's run minus the sampler's, mean over pairs (< 0: helps)
    se: float
    model_rank: dict[int, float]
    sampler_rank: dict[int, float]
    model_to_top: float  # median trial to the top 1% (a miss: never, inf)
    sampler_to_top: float

    @property
    def judgeable(self) -> bool:
        """Enough pairs for a verdict (`MIN_PAIRS`)."""
        return self.pairs >= MIN_PAIRS and math.isfinite(self.se)

    @property
    def helps(self) -> bool:
        return self.gain < 0 and abs(self.gain) > SIGNIFICANT * self.se

    @property
    def hurts(self) -> bool:
        return self.gain > 0 and abs(self.gain) > SIGNIFICANT * self.se


@dataclass(frozen=True)
class Report:
    model: str
    endpoint: str
    runs: tuple[Run, ...]
    published: Comparison
    disguised: Comparison
    recall: tuple[float, float]  # published minus disguised, in the same units (mean, se)
    verdict: str
    summary: str
    seconds: float
    stopped: str | None = None  # why it stopped before every run ran (the LLM budget)

    def calibration(self, prompt_version: str) -> Calibration:
        mine = [r for r in self.runs if r.with_model and r.table.disguised]
        return Calibration(
            model=self.model, endpoint=self.endpoint, prompt_version=prompt_version,
            date=time.strftime("%Y-%m-%d %H:%M"), verdict=self.verdict, summary=self.summary,
            wins=sum(r.wins for r in mine), judged=sum(r.judged for r in mine),
            tasks=len({r.table.dataset for r in self.runs}),
            seeds=len({r.table.seed for r in self.runs}),
            figures={"published": _figures(self.published), "disguised": _figures(
                self.disguised)})


def _figures(c: Comparison) -> dict[str, Any]:
    """A comparison's figures as plain JSON: what is not finite (a standard error from one
    pair, a top 1% never reached) is null, which every JSON reader takes, not `Infinity`."""
    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {"pairs": c.pairs, "gain": round(c.gain, 4), "se": finite(round(c.se, 4)),
            "model_rank": c.model_rank, "sampler_rank": c.sampler_rank,
            "model_to_top": finite(c.model_to_top), "sampler_to_top": finite(c.sampler_to_top)}


def run_table(table: Table, llm: LLMSettings | Any | None, budget: int = BUDGET) -> Run:
    """One search of `table` as `tune run` runs it: the model reviewing the default sampler
    (with its opening and earned share), or, with `llm` None, the sampler alone."""
    from tunepilot.agent.tuner import Tuner
    from tunepilot.trainers import callable as plain_trainer

    def lookup(config: Any, report: Any) -> float:
        return table.loss({k: config[k] for k in table.space.params})

    start = time.perf_counter()
    tuner = Tuner(plain_trainer(lookup), table.space, llm=llm, task=table.task,
                  metric="loss" if table.disguised else "1 - validation accuracy",
                  storage="sqlite:///:memory:",
                  study=f"calibrate-{table.dataset}-{table.seed}", sampler="auto",
                  pruner="none", seed=table.seed, display=None, warm_start=False,
                  calibration=False)
    history = tuner.run(n_trials=budget).history
    seconds = time.perf_counter() - start
    best, ranks = math.inf, []
    for t in sorted(history, key=lambda t: t.number):
        if t.value is not None:
            best = min(best, t.value)
        ranks.append(table.rank(best))
    record = trust.record(history) if llm is not None else trust.TrackRecord()
    overrides = [t for t in history if t.review is not None and t.review.verdict == "override"]
    won = {j.number for j in record.judged if j.won}
    return Run(table, llm is not None, tuple(ranks), judged=len(record.judged),
               wins=record.wins, overrides=len(overrides),
               overrides_won=sum(1 for t in overrides if t.number in won),
               invalid=record.invalid,
               tokens_in=sum(c.tokens_in for c in history.llm_calls()),
               tokens_out=sum(c.tokens_out for c in history.llm_calls()),
               usd=_spend(history), seconds=seconds)


def _spend(history: History) -> float | None:
    calls = history.llm_calls()
    if any(c.cost_usd is None and (c.tokens_in or c.tokens_out) for c in calls):
        return None  # a model without a price: tokens only
    return history.llm_spend()


def area(run: Run) -> float:
    """How a search went, in one number: the mean over its trials of log10(best rank so far
    + 0.001), so finding the top 0.1% at trial 2 counts more than at trial 19 (lower is
    better; each factor of ten in rank, held for the whole run, is 1)."""
    return statistics.fmean(math.log10(r + 1e-3) for r in run.ranks)


def compare(runs: Sequence[Run], disguised: bool, budget: int) -> Comparison:
    """The model against the sampler on one variant, pair by pair: the gain in `area`, and the
    mean rank at each budget (for the person)."""
    budgets = [b for b in BUDGETS if b <= budget] or [budget]

    mine = {(r.table.dataset, r.table.seed): r for r in runs
            if r.with_model and r.table.disguised == disguised}
    alone = {(r.table.dataset, r.table.seed): r for r in runs
             if not r.with_model and r.table.disguised == disguised}
    keys = sorted(set(mine) & set(alone))
    diffs = [area(mine[k]) - area(alone[k]) for k in keys]

    def to_top(rs: list[Run]) -> float:
        return statistics.median([r.to_top or math.inf for r in rs]) if rs else math.inf

    return Comparison(
        len(keys), statistics.fmean(diffs) if diffs else 0.0,
        statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.inf,
        {b: statistics.fmean(mine[k].rank_at(b) for k in keys) for b in budgets} if keys else {},
        {b: statistics.fmean(alone[k].rank_at(b) for k in keys) for b in budgets} if keys
        else {},
        to_top([mine[k] for k in keys]), to_top([alone[k] for k in keys]))


def verdict(published: Comparison, disguised: Comparison) -> str:
    """The verdict from the disguised tables; a model that helps on the published ones and not
    on their disguised copies recalls them; none from too few pairs."""
    if not disguised.judgeable:
        return TOO_FEW
    if disguised.helps:
        return WORTH
    if published.helps:
        return RECALLS if not disguised.hurts else RECALLS.replace("level", "behind the sampler")
    return WORSE if disguised.hurts else LEVEL


def _when(trial: float) -> str:
    return "never in its trials" if math.isinf(trial) else f"by trial {trial:g}"


def summarize(report_runs: Sequence[Run], published: Comparison, disguised: Comparison,
              said: str) -> str:
    mine = [r for r in report_runs if r.with_model and r.table.disguised]
    tables_n = len({r.table.dataset for r in report_runs})
    seeds_n = len({r.table.seed for r in report_runs})
    judged, wins = sum(r.judged for r in mine), sum(r.wins for r in mine)
    won = f"{wins} of its {judged} judged trials beat the sampler's typical trial" if judged \
        else "none of its trials was judged"
    gain = (f"its searches' log-rank {disguised.gain:+.2f} ± {disguised.se:.2f} against the "
            "sampler's" if disguised.judgeable else
            f"{plural(disguised.pairs, 'disguised search')} beside the sampler's, under the "
            f"{MIN_PAIRS} a verdict needs (more --tasks or --seeds)")
    return (f"{plural(tables_n, 'table')} x {plural(seeds_n, 'seed')}, disguised: top 1% "
            f"{_when(disguised.model_to_top)} against the sampler's "
            f"{_when(disguised.sampler_to_top).removeprefix('by ')} (medians); {won}; "
            f"{gain}; {said}")


def calibrate(llm: LLMSettings | Any, *, datasets: Sequence[str] = DEFAULT_TABLES,
              seeds: int = DEFAULT_SEEDS, first_seed: int = 0, budget: int = BUDGET,
              llm_budget_usd: float | None = None, jobs: int = 4,
              on_run: Callable[[Run, int, int], None] | None = None) -> Report:
    """Runs the calibration (see the module's docstring); `on_run(run, done, total)` sees each
    finished run. `jobs` searches at a time (the model's answers are waited for, not
    computed here; the embedded model, which computes here, runs one at a time)."""
    import optuna

    from tunepilot.memory.calibrations import endpoint_of

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the runs' own lines are not news
    problems = tables(tuple(datasets), range(first_seed, first_seed + seeds))
    settings = llm if isinstance(llm, LLMSettings) else None
    if settings is not None and settings.spec.strip() == "local":
        jobs = 1
    model, endpoint = _name(llm), endpoint_of(settings.base_url if settings else getattr(
        llm, "openai_api_base", None))
    start = time.perf_counter()
    work = [(t, arm) for t in problems for arm in (True, False)]
    runs: list[Run] = []
    spent = [0.0]
    stopped = None

    def one(item: tuple[Table, bool]) -> Run | None:
        table, with_model = item
        if with_model and llm_budget_usd is not None and spent[0] >= llm_budget_usd:
            return None
        return run_table(table, llm if with_model else None, budget)

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for run in pool.map(one, work):
            if run is None:
                stopped = f"the LLM budget of ${llm_budget_usd:g} was spent"
                continue
            runs.append(run)
            spent[0] += run.usd or 0.0
            if on_run is not None:
                on_run(run, len(runs), len(work))
    published = compare(runs, False, budget)
    disguised = compare(runs, True, budget)
    pairs = _recall(runs)
    said = verdict(published, disguised)
    summary = summarize(runs, published, disguised, said)
    return Report(model, endpoint, tuple(runs), published, disguised, pairs, said, summary,
                  time.perf_counter() - start, stopped)


def _recall(runs: Sequence[Run]) -> tuple[float, float]:
    """Published minus disguised gain, paired per table and seed (< 0: better on the published
    tables)."""
    def gain(model: Run, alone: Run) -> float:
        return area(model) - area(alone)

    by = {(r.table.dataset, r.table.seed, r.table.disguised, r.with_model): r for r in runs}
    diffs = []
    for (dataset, seed, disguised, with_model), r in by.items():
        if disguised or not with_model:
            continue
        keys = [(dataset, seed, False, False), (dataset, seed, True, True),
                (dataset, seed, True, False)]
        if all(k in by for k in keys):
            diffs.append(gain(r, by[keys[0]]) - gain(by[keys[1]], by[keys[2]]))
    if len(diffs) < 2:
        return 0.0, math.inf
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))


def _name(llm: Any) -> str:
    if isinstance(llm, LLMSettings):
        from tunepilot.llm.models import choose

        return choose(llm).name
    return str(getattr(llm, "model_name", None) or getattr(llm, "model", None)
               or type(llm).__name__)


def save(report: Report) -> tuple[Calibration, str]:
    """Keeps the report's calibration for every later run with this model; and where."""
    from tunepilot.prompts import version

    calibration = report.calibration(version())
    return calibration, str(calibrations.save(calibration))
