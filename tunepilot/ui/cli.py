"""`tune`: a thin command line over `Tuner`.

Exit codes: 0 the search ended by its own rules (target or budget), 2 bad input, 3 the same
error again and again (a broken trainer), 130 Ctrl-C, 143 SIGTERM.
Only typer and pydantic load at start-up; torch, Lightning, JAX and Optuna load when a command
needs them, so `tune --help` stays fast.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from tunepilot.config import PRUNERS, SAMPLERS, STRATEGIES
from tunepilot.errors import ConfigError
from tunepilot.memory.store import DEFAULT_STORAGE

app = typer.Typer(
    name="tune",
    help="tunepilot: an LLM-driven hyperparameter tuning agent (Optuna fallback).\n\n"
    "Quick demo: `tune run` tunes a CTR model on synthetic data in about 1.5 minutes, with the "
    "embedded LLM (or OpenAI when OPENAI_API_KEY is set) and Optuna taking turns.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

RUNS_DIR = "tunepilot-runs"  # each study's log and report, in the working directory
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_REPEATED_FAILURE = 3  # the same error again and again: the trainer looks broken

# Every command reads the storage URL from TUNEPILOT_STORAGE too: a password in argv shows in ps.
Storage = Annotated[str | None, typer.Option(
    envvar="TUNEPILOT_STORAGE", show_envvar=True,
    help=f"Optuna storage URL, or set TUNEPILOT_STORAGE [default: {DEFAULT_STORAGE}]")]
Study = Annotated[str | None, typer.Option(help="Study name [default: from trainer and data]")]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c",
                                                 help="TOML or YAML file; flags override it")]


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    """Bad input: one paragraph on stderr, exit code 2, no traceback."""
    try:
        yield
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None


@app.command()
def run(
    config: ConfigFile = None,
    trainer: Annotated[str | None, typer.Option(
        help="lightning | jax (built-in CTR task), package.module:function, or "
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
    sampler: Annotated[str | None, typer.Option(help=" | ".join(SAMPLERS))] = None,
    pruner: Annotated[str | None, typer.Option(
        help=" | ".join(PRUNERS) + " (stop unpromising trials early) [default: median]")] = None,
    llm: Annotated[str | None, typer.Option(help="LLM spec, e.g. openai:gpt-4o-mini")] = None,
    llm_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL")] = None,
    llm_model_path: Annotated[str | None, typer.Option(
        help="GGUF chat model file for --llm local")] = None,
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
    seed: Annotated[int | None, typer.Option(
        help="Seed of sampler and training [default: 0]")] = None,
    accept_changes: Annotated[bool | None, typer.Option(
        "--accept-changes", help="Resume a study with another trainer, data, space or fixed "
        "setting on purpose (recorded in the study)")] = None,
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
    with _user_errors():
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
    from tunepilot.config import load_config
    from tunepilot.memory import redact

    console = _console()
    pooled = n_workers is None or n_workers > 1 or gpus_per_trial is not None
    with _user_errors():
        cfg = load_config(config, **options)
        display, log = _display(cfg, console)
        if create_only:
            tuner, notes = studies.create(cfg, display)
        else:
            if pooled:
                studies.check_shared(cfg.storage, "--n-workers")
            from tunepilot.agent.build import from_config

            tuner, notes = from_config(cfg, display=display)
        for line in notes:
            _print(console, line)
        _print(console, f"storage: {redact(cfg.storage)}  study: {cfg.study_name()}")
        if create_only:
            _print(console, "study created; start workers (on any machine that reaches the "
                   "database) with:\n  " + studies.worker_command(cfg))
            return
        if pooled:
            _print(console, f"starting {n_workers or 'one per GPU group of'} workers; on other "
                   f"machines more can join with:\n  {studies.worker_command(cfg)}")
            result = studies.run_workers(tuner, cfg, n_workers, gpus_per_trial=gpus_per_trial)
        else:
            result = studies.run(tuner, cfg)
    _finish(console, tuner, cfg, result, log)


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _print(console: Any, text: str) -> None:
    console.print(text, markup=False)  # text from a model or a trainer is never markup


def _display(cfg: Any, console: Any, prefix: str = "") -> tuple[Any, Path]:
    """What a run shows: the terminal (live panel or lines) and the study's log file."""
    import optuna

    from tunepilot.agent.observer import Tee
    from tunepilot.ui.display import FileLog, PlainDisplay, console_display

    # The display shows every trial, failures included; Optuna's own lines would repeat them.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    log = Path(RUNS_DIR) / f"{cfg.study_name()}.log"
    shown = PlainDisplay(console, prefix) if prefix else console_display(console)
    return Tee(shown, FileLog(log)), log


def _finish(console: Any, tuner: Any, cfg: Any, result: Any, log: Path) -> None:
    from tunepilot.agent.studies import resume_command
    from tunepilot.ui.display import summary_lines
    from tunepilot.ui.report import write_report

    report = write_report(tuner.study, Path(RUNS_DIR) / f"{cfg.study_name()}.html")
    for line in summary_lines(result):
        _print(console, line)
    _print(console, f"to resume: {resume_command(sys.argv[1:], result, cfg.n_trials)}")
    _print(console, f"report: {report}  log: {log}")
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

    console = _console()
    prefix = f"[{name or 'worker'}] "
    with _user_errors():
        tuner, cfg, notes = studies.join(storage, study, llm=llm, llm_base_url=llm_base_url,
                                         llm_model_path=llm_model_path, isolate=isolate)
        tuner.display, _ = _display(cfg, console, prefix)
        _print(console, f"{prefix}joined study {cfg.study_name()}; " + "; ".join(
            n for n in notes if n.startswith("strategy")))
        result = studies.run(tuner, cfg)
    _print(console, f"{prefix}stopped: {result.stop_reason}; {result.n_new} trials run here, "
           f"{result.n_finished} finished in the study")
    _exit(result)


@app.command()
def dashboard(
    storage: Storage = None,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on")] = 8080,
) -> None:
    """Open optuna-dashboard on the studies of a storage: each trial's params, curve, who
    proposed it and the agent's rationale (user attrs `proposer`, `rationale`)."""
    from tunepilot.memory import open_storage, redact

    with _user_errors():
        try:
            from optuna_dashboard import run_server
        except ImportError:
            raise ConfigError("tune dashboard needs optuna-dashboard: pip install "
                              "'tunepilot[dashboard]' (or pip install optuna-dashboard).") from None
        url = storage or DEFAULT_STORAGE
        opened = open_storage(url, heartbeat_s=None)  # a reader beats for no trial
    typer.echo(f"optuna-dashboard on {redact(url)}: http://{host}:{port}/ (Ctrl-C stops it)")
    run_server(opened, host=host, port=port)


@app.command()
def init(
    trainer: Annotated[str, typer.Option(
        help="lightning | jax (the built-in CTR task), or your package.module:function")]
    = "lightning",
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write")]
    = Path("tune.toml"),
) -> None:
    """Write a commented tune.toml to start from: lr, batch size, precision, dropout, the
    budgets, target and storage. Refuses to overwrite a file."""
    from tunepilot.config import starter

    with _user_errors():
        if output.exists():
            raise ConfigError(f"{output} exists; tune init does not overwrite a file. Remove it, "
                              "or write elsewhere with --output FILE.")
    output.write_text(starter(trainer), encoding="utf-8")
    typer.echo(f"wrote {output}; edit it, then: tune run --config {output}")


@app.command()
def show(
    storage: Storage = None,
    study: Study = None,
    config: ConfigFile = None,
    limit: Annotated[int, typer.Option(help="Rows to show")] = 30,
) -> None:
    """The trials of a study as a table, best first, with who proposed each."""
    from tunepilot.ui.display import trials_table

    with _user_errors():
        history, name = _history(storage, study, config)
    console = _console()
    console.print(trials_table(history, name, limit))
    if history.notes:
        _print(console, f"agent's notes:\n{history.notes}")
    for hint in history.hints:
        _print(console, f"hint: {hint}")


@app.command()
def best(storage: Storage = None, study: Study = None, config: ConfigFile = None) -> None:
    """The best config of a study as JSON (tuned parameters and fixed settings)."""
    from tunepilot.agent import studies

    with _user_errors():
        trial, run_config = studies.best(*_where(storage, study, config))
    typer.echo(f"# trial {trial.number}, validation loss {trial.value:.6g}", err=True)
    typer.echo(json.dumps(run_config, indent=2))


@app.command()
def report(
    storage: Storage = None,
    study: Study = None,
    config: ConfigFile = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="HTML file [default: tunepilot-runs/STUDY.html]")] = None,
) -> None:
    """Write a study's report: best config, history, importance, curves, LLM use, failures."""
    from tunepilot.memory import load_study
    from tunepilot.ui.report import write_report

    with _user_errors():
        study_obj = load_study(*_where(storage, study, config))
    path = write_report(study_obj, output or Path(RUNS_DIR) / f"{study_obj.study_name}.html")
    typer.echo(f"report: {path}")


@app.command()
def rerun(
    trial: Annotated[int, typer.Argument(help="The trial number to run again")],
    storage: Storage = None,
    study: Study = None,
    config: ConfigFile = None,
) -> None:
    """Run one trial of a study again with its recorded config and seed, and compare."""
    from tunepilot.agent import studies

    def show(epoch: int, val_loss: float) -> None:
        typer.echo(f"  epoch {epoch}: {val_loss:.6f}")

    def start(run_config: Any, record: Any) -> None:
        train = record.train
        typer.echo(f"trial {trial}: {json.dumps(dict(run_config))}")
        typer.echo(f"recorded: {record.state}, value {record.value}, curve "
                   f"{[round(v, 6) for v in record.curve]}, on {train.device if train else '?'} "
                   f"with {dict(train.versions) if train else '?'}")

    with _user_errors():
        again = studies.rerun(*_where(storage, study, config), trial, on_start=start,
                              on_epoch=show)
    typer.echo(f"now: value {again.result.best_val_loss:.6f}")
    if again.difference is not None:
        typer.echo(f"difference: {again.difference:+.2e}")


def _where(storage: str | None, study: str | None, config: Path | None) -> tuple[str, str | None]:
    """The storage URL and study name that flags and a config file name."""
    from tunepilot.config import load_config

    cfg = load_config(config, storage=storage, study=study)
    return cfg.storage, cfg.study_name() if (cfg.study or config) else study


def _history(storage: str | None, study: str | None, config: Path | None) -> tuple[Any, str]:
    from tunepilot.memory import History, load_study

    loaded = load_study(*_where(storage, study, config))
    return History.from_study(loaded), loaded.study_name


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
