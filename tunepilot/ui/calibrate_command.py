"""`tune calibrate`: measure a chat model as a tuner before a night is spent on it."""

from __future__ import annotations

import math
import time
from typing import Annotated, Any

import typer

from tunepilot.ui.app import app, new_console, say, user_errors


@app.command()
def calibrate(
    llm: Annotated[str, typer.Option(
        help="The model to measure, as `tune run --llm` takes it: openai:MODEL, "
        "PROVIDER:MODEL, local")],
    llm_base_url: Annotated[str | None, typer.Option(
        envvar="TUNEPILOT_LLM_BASE_URL", help="OpenAI-compatible server URL")] = None,
    llm_model_path: Annotated[str | None, typer.Option(
        help="GGUF chat model file for --llm local")] = None,
    llm_budget: Annotated[float | None, typer.Option(
        help="Stop starting searches with the model once its spend reaches this many USD")]
    = None,
    price: Annotated[str | None, typer.Option(
        metavar="IN,OUT", help="The model's price in USD per million input and output tokens, "
        "where the built-in table has none (gpt-4o-mini: 0.15,0.60)")] = None,
    tasks: Annotated[str | None, typer.Option(
        help="Tables, comma-separated, or how many of the 8 [default: australian, car, "
        "credit_g, segment]")] = None,
    seeds: Annotated[int, typer.Option(help="Seeds per table (each table is also disguised "
                                            "anew per seed)", min=1)] = 2,
    first_seed: Annotated[int, typer.Option(help="The first seed")] = 0,
    trials: Annotated[int, typer.Option(help="Trials per search", min=5)] = 20,
    jobs: Annotated[int, typer.Option(help="Searches at a time", min=1)] = 4,
) -> None:
    """Measure what a chat model is worth as a tuner: it reviews tunepilot's sampler, as `tune
    run` runs it, on HPOBench's published tables and on disguised copies (renamed, rescaled),
    beside the sampler alone. The verdict (from the disguised copies, so no credit for having
    read the tables) is kept on this machine: later runs with the model start from it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from tunepilot.agent import calibrate as cal
    from tunepilot.agent.calibration_tables import DATASETS
    from tunepilot.errors import ConfigError
    from tunepilot.llm.models import LLMSettings
    from tunepilot.memory.text import plural

    console = new_console()
    with user_errors():
        prices = None
        if price is not None:
            try:
                low, high = (float(x) for x in price.split(","))
            except ValueError:
                raise ConfigError(f"--price {price!r}: expected IN,OUT in USD per million "
                                  "tokens, e.g. 0.15,0.60") from None
            prices = {llm.partition(":")[2] or llm: (low, high)}
        datasets = cal.DEFAULT_TABLES
        if tasks is not None:
            datasets = (DATASETS[: int(tasks)] if tasks.isdigit()
                        else tuple(t.strip() for t in tasks.split(",") if t.strip()))
        settings = LLMSettings(llm, llm_base_url, prices=prices, model_path=llm_model_path)
        say(console, f"calibrating {llm} on {plural(len(datasets), 'table')} x "
            f"{plural(seeds, 'seed')}, published and disguised, {trials} trials a search, "
            "beside the sampler alone")
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=console, transient=True) as progress:
            bar = progress.add_task("searches", total=len(datasets) * seeds * 4)

            started = time.monotonic()
            step = max(1, (len(datasets) * seeds * 4) // 8)

            def seen(run: Any, done: int, total: int) -> None:
                progress.update(bar, completed=done)
                if not console.is_terminal and (done % step == 0 or done == total):
                    # no bar in a log or a pipe: a line now and then says it is moving
                    say(console, f"searches: {done} of {total} done "
                        f"({time.monotonic() - started:.0f} s)")

            report = cal.calibrate(settings, datasets=datasets, seeds=seeds,
                                   first_seed=first_seed, budget=trials, llm_budget_usd=llm_budget,
                                   jobs=jobs, on_run=seen)
        for line in report_lines(report):
            say(console, line)
        calibration, path = cal.save(report)
    say(console, f"kept in {path}: runs with {calibration.model} start from it")


def report_lines(report: Any) -> list[str]:
    """What `tune calibrate` prints: each variant's figures, the model's turns, its cost."""
    lines = [""]
    budgets = sorted(report.disguised.model_rank) or sorted(report.published.model_rank)
    head = "  ".join(f"rank@{b:<6}" for b in budgets)
    lines.append(f"{'':<26}{head}  top 1% (median trial)")
    for name, c in (("published", report.published), ("disguised", report.disguised)):
        for who, ranks, top in (("model", c.model_rank, c.model_to_top),
                                ("sampler alone", c.sampler_rank, c.sampler_to_top)):
            cells = "  ".join(f"{ranks.get(b, math.nan):<11.4f}" for b in budgets)
            lines.append(f"{name + ', ' + who:<26}{cells}  "
                         f"{'never' if math.isinf(top) else f'{top:g}'}")
    mine = [r for r in report.runs if r.with_model]
    tokens = sum(r.tokens for r in mine)
    usd = [r.usd for r in mine]
    cost = "unknown (no price for this model: --price IN,OUT)" if any(
        u is None for u in usd) else f"${sum(u or 0.0 for u in usd):.4f}"
    # Per variant, as the verdict counts them: the disguised tables' are the verdict's.
    for name, disguised in (("disguised (the verdict's)", True), ("published", False)):
        runs = [r for r in mine if r.table.disguised == disguised]
        over, over_won = sum(r.overrides for r in runs), sum(r.overrides_won for r in runs)
        judged, wins = sum(r.judged for r in runs), sum(r.wins for r in runs)
        lines.append(f"its trials on the {name} tables: {wins} of {judged} judged won "
                     f"({_share(wins, judged)}); overrides: {over_won} of {over} won "
                     f"({_share(over_won, over)}); invalid answers: "
                     f"{sum(r.invalid for r in runs)}")
    lines.append(f"cost: {tokens:,} tokens, {cost}; wall time {report.seconds:.0f} s")
    if report.stopped:
        lines.append(f"stopped early: {report.stopped}")
    if report.recall[0] < 0 and math.isfinite(report.recall[1]) and \
            abs(report.recall[0]) > 2 * report.recall[1]:
        lines.append("it does better on the published tables than on their disguised copies "
                     f"(log-rank {report.recall[0]:+.2f} ± {report.recall[1]:.2f}): it recalls "
                     "them")
    lines.append(f"verdict: {report.summary}")
    return lines


def _share(a: int, b: int) -> str:
    return f"{a / b:.0%}" if b else "-"
