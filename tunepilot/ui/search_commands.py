"""`tune run`, `tune create` and `tune worker`: start or join a search."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from tunepilot.errors import ConfigError
from tunepilot.proposers import pruners, samplers
from tunepilot.proposers.strategies import STRATEGIES
from tunepilot.runtime import startup
from tunepilot.ui.app import (
    EXIT_INTERRUPTED,
    EXIT_REPEATED_FAILURE,
    EXIT_TERMINATED,
    ConfigFile,
    Storage,
    Study,
    app,
    new_console,
    runs_path,
    say,
    user_errors,
)


@app.command()
def run(
    config: ConfigFile = None,
    trainer: Annotated[str | None, typer.Option(
        help="lightning | jax | both (built-in CTR task; both: the framework a choice of each "
        "trial), package.module:function, or "
        "lightning:package.module:factory")] = None,
    data: Annotated[str | None, typer.Option(
        help="synthetic[:ROWS] | criteo:PATH | csv:PATH | parquet:PATH")] = None,
    rows: Annotated[int | None, typer.Option(help="Read at most ROWS rows of the data")] = None,
    buckets: Annotated[int | None, typer.Option(
        help="Hash buckets per categorical field [default: 1024 synthetic, 65536 files]")] = None,
    label: Annotated[str | None, typer.Option(help="Label column of csv/parquet data")] = None,
    categorical: Annotated[str | None, typer.Option(
        help="Comma-separated categorical columns of csv/parquet data")] = None,
    strategy: Annotated[str | None, typer.Option(help=" | ".join(STRATEGIES))] = None,
    sampler: Annotated[str | None, typer.Option(
        help=" | ".join(samplers.names()) + " (Optuna's; auto: by the space and the trials' "
        "length, named with its reason when a run starts) [default: auto]")] = None,
    pruner: Annotated[str | None, typer.Option(
        help=" | ".join(pruners.names()) + " (stop unpromising trials early) "
        "[default: auto: median; successive-halving with a target or timeout]")] = None,
    llm: Annotated[str | None, typer.Option(help="LLM spec, e.g. openai:gpt-4o-mini")] = None,
    llm_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL")] = None,
    llm_model_path: Annotated[str | None, typer.Option(
        help="GGUF chat model file for --llm local")] = None,
    llm_time_share: Annotated[float | None, typer.Option(
        help="Past this share of the wall time spent waiting for the LLM, the sampler takes "
        "its turns (1 = no cap) [default: 0.2 where --llm and --strategy are auto; no cap for a "
        "model or strategy you name]")] = None,
    max_override_share: Annotated[float | None, typer.Option(
        help="review: fix the share of trials on which the LLM may override the sampler's "
        "candidate; hybrid: the share of trials it proposes after its first two "
        "[default: earned by its record: 30% to start, 5% for a model whose "
        "overrides lose, up to 80% for one whose overrides keep winning]")] = None,
    opening: Annotated[int | None, typer.Option(
        help="With an LLM: configs one turn asks it for on a new study, run first in place of "
        "the sampler's first draws (0: none) [default: a tenth of --n-trials, at most 5, none "
        "under 10]")] = None,
    storage: Storage = None,
    study: Study = None,
    heartbeat: Annotated[int | None, typer.Option(
        help="Seconds between a trial's heartbeats; a trial silent for 3x this (its process "
        "died) is marked FAIL and retried once [default: 10]")] = None,
    n_trials: Annotated[int | None, typer.Option(
        help="Total trials of the study (a rerun finishes the rest) [default: 20]")] = None,
    timeout: Annotated[str | None, typer.Option(help="Wall-time budget: 90s, 20m, 8h")] = None,
    trial_timeout: Annotated[str | None, typer.Option(
        help="Kill and FAIL a trial running longer than this (implies --isolate)")] = None,
    isolate: Annotated[bool | None, typer.Option(
        "--isolate/--no-isolate", help="Run each trial in its own process [default: on with "
        "--timeout or --trial-timeout]")] = None,
    target: Annotated[float | None, typer.Option(
        help="Stop when a validation loss <= TARGET")] = None,
    patience: Annotated[int | None, typer.Option(
        help="Stop after this many trials without improvement")] = None,
    min_delta: Annotated[float | None, typer.Option(
        help="The improvement --patience waits for [default: 0]")] = None,
    llm_budget: Annotated[float | None, typer.Option(
        help="Stop when the study's LLM spend reaches this many USD")] = None,
    llm_token_budget: Annotated[int | None, typer.Option(
        help="Stop when the study's LLM tokens (in + out) reach this many")] = None,
    epochs: Annotated[int | None, typer.Option(help="Epochs per trial [default: 3]")] = None,
    epoch_patience: Annotated[int | None, typer.Option(
        help="Stop a trial whose validation loss has not improved for this many epochs, "
        "keeping its best epoch (0: off) [default: a third of its epochs, 1 to 3]")] = None,
    seed: Annotated[int | None, typer.Option(
        help="Seed of sampler and training [default: 0]")] = None,
    accept_changes: Annotated[bool | None, typer.Option(
        "--accept-changes", help="Resume a study with another trainer, data, space or fixed "
        "setting on purpose (recorded in the study)")] = None,
    track: Annotated[list[str] | None, typer.Option(
        metavar="SPEC", help="Log every trial to an experiment tracker: mlflow (a local "
        "sqlite:///mlflow.db), mlflow:URI, wandb (offline without WANDB_API_KEY), "
        "wandb:PROJECT, tensorboard:DIR; repeatable")] = None,
    n_workers: Annotated[str, typer.Option(
        help="Worker processes on this machine, sharing the study (needs a PostgreSQL or MySQL "
        "storage); auto: one per GPU (or per --gpus-per-trial GPUs)")] = "1",
    gpus_per_trial: Annotated[int | None, typer.Option(
        help="GPUs each worker gets, pinned with CUDA_VISIBLE_DEVICES [default: 1 when the "
        "machine has GPUs]", min=1)] = None,
) -> None:
    """Run (or resume) a search."""
    options = {k: v for k, v in locals().items()
               if k not in ("config", "n_workers", "gpus_per_trial")}
    with user_errors():
        workers = _workers(n_workers)
    _run(config, options, n_workers=workers, gpus_per_trial=gpus_per_trial)


def _workers(value: str) -> int | None:
    """--n-workers: a count, or auto (None: one per GPU group)."""
    if value == "auto":
        return None
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise ConfigError(f"--n-workers {value!r}: expected a number of workers (1, 4...) or auto.")


def create(**kwargs: Any) -> None:
    """Create a study (its space, task, strategy, target and budgets) for `tune worker`s to
    run; runs no trial. Takes the same options as `tune run`."""
    config = kwargs.pop("config")
    _run(config, kwargs, create_only=True)


# `tune create` takes `tune run`'s options (one list to keep), all but --n-workers.
_run_sig = inspect.signature(run, eval_str=True)  # typer reads the help from Annotated
create.__signature__ = _run_sig.replace(  # type: ignore[attr-defined]
    parameters=[p for p in _run_sig.parameters.values()
                if p.name not in ("n_workers", "gpus_per_trial")])
app.command()(create)


def _run(config: Path | None, options: dict[str, Any], *, n_workers: int | None = 1,
         gpus_per_trial: int | None = None, create_only: bool = False) -> None:
    from tunepilot.agent import studies
    from tunepilot.config import read_config
    from tunepilot.memory import redact

    console = new_console()
    pooled = n_workers is None or n_workers > 1 or gpus_per_trial is not None
    with user_errors(), startup.until_first_trial():
        cfg, sources = read_config(config, **options)
        display, log = _display(cfg, console)
        with _logged(log):
            if (settings := sources.line(cfg)) is not None:
                display.say(settings)
            if create_only:
                tuner, notes = studies.create(cfg, display)
            else:
                if pooled:
                    studies.check_shared(cfg.storage, "--n-workers")
                from tunepilot.agent.build import from_config

                tuner, notes = from_config(cfg, display=display)
            for line in notes:
                display.say(line)
            display.say(f"storage: {redact(cfg.storage)}  study: {cfg.study_name()}")
            if create_only:
                say(console, "study created; start workers (on any machine that reaches the "
                    "database) with:\n  " + studies.worker_command(cfg))
                return
            if pooled:
                startup.end()  # this process trains nothing: it waits for its workers
                how_many = f"{n_workers} workers" if n_workers else "one worker per GPU group"
                say(console, f"starting {how_many}; on other machines more can join with:\n  "
                    f"{studies.worker_command(cfg)}")
                result = studies.run_workers(tuner, cfg, n_workers,
                                             gpus_per_trial=gpus_per_trial)
            else:
                result = studies.run(tuner, cfg)
    _finish(console, tuner, cfg, result, log)


@contextlib.contextmanager
def _logged(log: Path) -> Iterator[None]:
    """Bad input found once the run's log is open goes into the log too, after its settings
    line: a log that ends in its settings says nothing of why the run did not start."""
    from tunepilot.errors import ConfigError
    from tunepilot.ui.display import FileLog

    try:
        yield
    except ConfigError as e:
        FileLog(log).say(f"error (nothing ran): {e}")
        raise


def _display(cfg: Any, console: Any, prefix: str = "") -> tuple[Any, Path]:
    """What a run shows: the terminal (live panel or lines) and the study's log file."""
    import optuna

    from tunepilot.agent.observer import Tee
    from tunepilot.ui.display import FileLog, PlainDisplay, console_display

    # The display shows every trial, failures included; Optuna's own lines would repeat them.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    from tunepilot.ui.trackers import trackers

    log = runs_path(cfg.storage, cfg.study_name(), ".log")
    shown = PlainDisplay(console, prefix) if prefix else console_display(console)
    return Tee(shown, FileLog(log), *trackers(cfg.track, cfg.study_name())), log


def _finish(console: Any, tuner: Any, cfg: Any, result: Any, log: Path) -> None:
    from tunepilot.agent.studies import resume_command
    from tunepilot.ui.display import summary_lines
    from tunepilot.ui.report import write_report

    report = write_report(tuner.study, runs_path(cfg.storage, cfg.study_name(), ".html"))
    for line in summary_lines(result):
        say(console, line)
    say(console, f"to resume: {resume_command(sys.argv[1:], result, cfg.n_trials)}")
    say(console, f"report: {report}  log: {log}")
    _exit(result)


def _exit(result: Any) -> None:
    if result.interrupted:
        raise typer.Exit(EXIT_TERMINATED if result.terminated else EXIT_INTERRUPTED)
    if result.failed_alike:
        raise typer.Exit(EXIT_REPEATED_FAILURE)


@app.command()
def worker(
    storage: Annotated[str, typer.Option(
        envvar="TUNEPILOT_STORAGE", help="The study's storage URL (PostgreSQL, MySQL or "
        "journal:FILE); or set TUNEPILOT_STORAGE", show_default=False)],
    study: Annotated[str | None, typer.Option(
        help="The study to join [default: the only one in the storage]")] = None,
    name: Annotated[str | None, typer.Option(help="This worker's name in its output lines")] = None,
    llm: Annotated[str | None, typer.Option(help="Override the study's LLM spec")] = None,
    llm_base_url: Annotated[str | None, typer.Option(
        envvar="TUNEPILOT_LLM_BASE_URL",
        help="The LLM server's URL; needed (the same as the study's) to send OPENAI_API_KEY "
        "to a server the study names")] = None,
    llm_model_path: Annotated[str | None, typer.Option(help="GGUF file for --llm local")] = None,
    isolate: Annotated[bool | None, typer.Option("--isolate/--no-isolate")] = None,
) -> None:
    """Join a study made by `tune run` or `tune create` and run its trials until the study's
    own rules (target, trial and time budgets) stop it. Start as many as you like, anywhere."""
    from tunepilot.agent import studies
    from tunepilot.memory.text import plural

    console = new_console()
    prefix = f"[{name or 'worker'}] "
    with user_errors(), startup.until_first_trial():
        tuner, cfg, notes = studies.join(storage, study, llm=llm, llm_base_url=llm_base_url,
                                         llm_model_path=llm_model_path, isolate=isolate)
        tuner.display, _ = _display(cfg, console, prefix)
        # The GPUs this worker was pinned to (`tune run --n-workers` on a GPU machine, or the
        # user's own CUDA_VISIBLE_DEVICES), so a log shows which worker ran where.
        pinned = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" on GPU{'s' if ',' in pinned else ''} {pinned}" if pinned else ""
        say(console, f"{prefix}joined study {cfg.study_name()}{where}; " + "; ".join(
            n for n in notes if n.startswith(("strategy", "study "))))
        result = studies.run(tuner, cfg)
    say(console, f"{prefix}stopped: {result.stop_reason}; {plural(result.n_new, 'trial')} "
        f"run here, {result.n_finished} finished in the study")
    _exit(result)
