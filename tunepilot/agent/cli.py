"""`tune`: a thin command line over `Tuner`.

Exit codes: 0 the search ended by its own rules (target or budget), 2 bad input, 130 Ctrl-C.
Only typer and pydantic load at start-up; torch, Lightning, JAX and Optuna load when a command
needs them, so `tune --help` stays fast.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from tunepilot.errors import ConfigError

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

Storage = Annotated[str | None, typer.Option(help="Optuna storage URL "
                                              "[default: sqlite:///tunepilot.db]")]
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
    strategy: Annotated[str | None, typer.Option(help="optuna | llm | hybrid")] = None,
    sampler: Annotated[str | None, typer.Option(help="tpe | random | cmaes | gp")] = None,
    pruner: Annotated[str | None, typer.Option(help="median | none")] = None,
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
    seed: Annotated[int | None, typer.Option(help="Seed of sampler and training [default: 0]")] = None,
    n_workers: Annotated[int, typer.Option(
        help="Worker processes on this machine, sharing the study (needs a PostgreSQL, MySQL "
        "or journal: storage)", min=1)] = 1,
) -> None:
    """Run (or resume) a search."""
    options = {k: v for k, v in locals().items() if k not in ("config", "n_workers")}
    _run(config, options, n_workers=n_workers)


def create(**kwargs: Any) -> None:
    """Create a study (its space, task, strategy, target and budgets) for `tune worker`s to
    run; runs no trial. Takes the same options as `tune run`."""
    config = kwargs.pop("config")
    _run(config, kwargs, create_only=True)


# `tune create` takes `tune run`'s options (one list to keep), all but --n-workers.
_run_sig = inspect.signature(run, eval_str=True)  # typer reads the help from Annotated
create.__signature__ = _run_sig.replace(  # type: ignore[attr-defined]
    parameters=[p for p in _run_sig.parameters.values() if p.name != "n_workers"])
app.command()(create)


def _run(config: Path | None, options: dict[str, Any], *, n_workers: int = 1,
         create_only: bool = False) -> None:
    from rich.console import Console

    from tunepilot.config import load_config

    console = Console(highlight=False, soft_wrap=True)
    with _user_errors():
        cfg = load_config(config, **options)
        if n_workers > 1 or create_only:
            _check_shared(cfg.storage, "--n-workers" if n_workers > 1 else "`tune create`")
        tuner, log, notes = _build(cfg, console)
        for line in notes:
            console.print(line, markup=False)
        from tunepilot.memory import redact

        console.print(f"storage: {redact(cfg.storage)}  study: {cfg.study_name()}", markup=False)
        if create_only or n_workers > 1:
            tuner.study  # noqa: B018 (creates the study and stores its settings)
            if create_only:
                console.print("study created; start workers (on any machine that reaches the "
                              "database) with:\n  " + _worker_command(cfg), markup=False)
                return
            result = _run_workers(tuner, cfg, n_workers, console)
        else:
            from tunepilot.agent import interrupts

            with interrupts.raising():
                result = tuner.run(cfg.n_trials, target=cfg.target, timeout=cfg.timeout,
                                   patience=cfg.patience, min_delta=cfg.min_delta,
                                   llm_budget_usd=cfg.llm_budget,
                                   llm_token_budget=cfg.llm_token_budget)
    _finish(console, tuner, cfg, result, log)


def _build(cfg: Any, console: Any, prefix: str = "", worker: bool = False) -> tuple[Any, Path, list[str]]:
    import optuna

    from tunepilot.agent.build import from_config
    from tunepilot.agent.display import FileLog, PlainDisplay, Tee, console_display

    # The display shows every trial, failures included; Optuna's own lines would repeat them.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    log = Path(RUNS_DIR) / f"{cfg.study_name()}.log"
    shown = PlainDisplay(console, prefix) if prefix else console_display(console)
    tuner, notes = from_config(cfg, display=Tee(shown, FileLog(log)), worker=worker)
    return tuner, log, notes


def _finish(console: Any, tuner: Any, cfg: Any, result: Any, log: Path) -> None:
    from tunepilot.agent.report import write_report

    report = write_report(tuner.study, Path(RUNS_DIR) / f"{cfg.study_name()}.html")
    _print_summary(console, result, cfg.n_trials)
    console.print(f"report: {report}  log: {log}", markup=False)
    if result.interrupted:
        raise typer.Exit(EXIT_TERMINATED if result.terminated else EXIT_INTERRUPTED)


def _check_shared(url: str, what: str) -> None:
    """SQLite allows one writing process; several workers need a shared storage."""
    if url.startswith("sqlite"):
        raise ConfigError(
            f"{what} shares the study with other processes, and SQLite ({url}) allows only one. "
            "Use a database server: --storage postgresql://USER@HOST:5432/DB or "
            "mysql+pymysql://USER@HOST:3306/DB (workers on several machines), or --storage "
            "journal:FILE.log (several processes on one machine)."
        )


def _worker_command(cfg: Any) -> str:
    from tunepilot.memory import redact

    return shlex.join(["tune", "worker", "--storage", redact(cfg.storage), "--study",
                       cfg.study_name()])


def _run_workers(tuner: Any, cfg: Any, n: int, console: Any) -> Any:
    """Starts `n` `tune worker` processes on the study and waits for them; Ctrl-C or SIGTERM
    is passed on to each, which fails its running trial cleanly."""
    import os
    import signal
    import subprocess

    from tunepilot.agent import interrupts
    from tunepilot.errors import Terminated

    # One core's worth of threads each: on a busy machine more threads per process run slower.
    threads = str(max(1, (os.cpu_count() or 1) // n))
    env = {**os.environ, "TUNEPILOT_STORAGE": cfg.storage}  # not in argv: ps shows argv
    env.setdefault("OMP_NUM_THREADS", threads)
    console.print(f"starting {n} workers ({env['OMP_NUM_THREADS']} thread(s) each); on other "
                  f"machines more can join with:\n  {_worker_command(cfg)}", markup=False)
    from tunepilot.memory import History

    before = len(History.from_study(tuner.study).finished())
    procs = [subprocess.Popen([sys.executable, "-m", "tunepilot.agent.cli", "worker", "--study",
                               cfg.study_name(), "--name", f"w{i + 1}"], env=env,
                              start_new_session=True)  # Ctrl-C reaches them through us, once
             for i in range(n)]
    interrupted: KeyboardInterrupt | None = None
    with interrupts.raising():
        while any(p.poll() is None for p in procs):
            try:
                for p in procs:
                    p.wait()
            except KeyboardInterrupt as e:
                interrupted = e
                sig = signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(sig)
    codes = [p.returncode for p in procs]
    if EXIT_BAD_INPUT in codes and interrupted is None:
        raise ConfigError(f"a worker stopped on bad input (exit codes {codes}); see its error "
                          "above.")
    from tunepilot.memory import attrs

    reason = tuner.study.user_attrs.get(attrs.LAST_STOP) or "the workers stopped"
    if interrupted is not None:
        reason = f"interrupted ({'SIGTERM' if isinstance(interrupted, Terminated) else 'Ctrl-C'})"
    return tuner.summary(reason, n_new=len(History.from_study(tuner.study).finished()) - before)


@app.command()
def worker(
    storage: Annotated[str, typer.Option(
        envvar="TUNEPILOT_STORAGE", help="The study's storage URL (PostgreSQL, MySQL or "
        "journal:FILE); or set TUNEPILOT_STORAGE", show_default=False)],
    study: Annotated[str | None, typer.Option(
        help="The study to join [default: the only one in the storage]")] = None,
    name: Annotated[str | None, typer.Option(help="This worker's name in its output lines")] = None,
    llm: Annotated[str | None, typer.Option(help="Override the study's LLM spec")] = None,
    llm_base_url: Annotated[str | None, typer.Option(help="Override its server URL")] = None,
    llm_model_path: Annotated[str | None, typer.Option(help="GGUF file for --llm local")] = None,
    isolate: Annotated[bool | None, typer.Option("--isolate/--no-isolate")] = None,
) -> None:
    """Join a study made by `tune run` or `tune create` and run its trials until the study's
    own rules (target, trial and time budgets) stop it. Start as many as you like, anywhere."""
    from rich.console import Console

    from tunepilot.agent import interrupts
    from tunepilot.config import TuneConfig
    from tunepilot.memory import attrs, load_study

    console = Console(highlight=False, soft_wrap=True)
    with _user_errors():
        _check_shared(storage, "`tune worker`")
        study_obj = load_study(storage, study)
        settings = (study_obj.user_attrs.get(attrs.SETTINGS) or {}).get("config")
        if settings is None:
            raise ConfigError(f"Study {study_obj.study_name} was not made by `tune run` or "
                              "`tune create`, so its trainer and space are unknown; create it "
                              "with `tune create --storage URL ...` first.")
        overrides = {"llm": llm, "llm_base_url": llm_base_url, "llm_model_path": llm_model_path,
                     "isolate": isolate}
        cfg = TuneConfig.model_validate({**settings, "storage": storage,
                                         "study": study_obj.study_name,
                                         **{k: v for k, v in overrides.items() if v is not None}})
        prefix = f"[{name or 'worker'}] "
        tuner, _, notes = _build(cfg, console, prefix=prefix, worker=True)
        console.print(f"{prefix}joined study {cfg.study_name()}; " + "; ".join(
            n for n in notes if n.startswith("strategy")), markup=False)
        with interrupts.raising():
            result = tuner.run(cfg.n_trials, target=cfg.target, timeout=cfg.timeout,
                               patience=cfg.patience, min_delta=cfg.min_delta,
                               llm_budget_usd=cfg.llm_budget,
                               llm_token_budget=cfg.llm_token_budget)
    console.print(f"{prefix}stopped: {result.stop_reason}; {result.n_new} trials run here, "
                  f"{result.n_finished} finished in the study", markup=False)
    if result.interrupted:
        raise typer.Exit(EXIT_TERMINATED if result.terminated else EXIT_INTERRUPTED)


def _print_summary(console: Any, result: Any, n_trials: int) -> None:
    from tunepilot.agent.display import format_params

    history = result.history
    states = {s: sum(t.state == s for t in history) for s in ("complete", "pruned", "fail")}
    console.print(f"\nstopped: {result.stop_reason}", markup=False)
    console.print(
        f"trials: {result.n_finished} finished in study {result.study_name} ({result.n_new} new): "
        f"{states['complete']} complete, {states['pruned']} pruned, {states['fail']} failed",
        markup=False,
    )
    if result.best_params is not None:
        console.print(f"best: trial {result.best_number}, validation loss "
                      f"{result.best_value:.4f}", markup=False)
        console.print(f"  {format_params(result.best_params)}", markup=False)
    else:
        console.print("best: no trial completed yet", markup=False)
    console.print(f"to resume: {resume_command(sys.argv[1:], result, n_trials)}", markup=False)


def resume_command(argv: list[str], result: Any, n_trials: int) -> str:
    """The command that continues this study (with a bigger budget if it was used up)."""
    args = list(argv)
    if result.stop_reason.startswith("budget") or result.target_reached:
        args = _drop_option(args, "--n-trials") + ["--n-trials", str(max(n_trials, 1) * 2)]
    if "--study" not in " ".join(args):
        args += ["--study", result.study_name]
    return shlex.join(["tune", *args])


def _drop_option(args: list[str], name: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


@app.command()
def show(
    storage: Storage = None,
    study: Study = None,
    config: ConfigFile = None,
    limit: Annotated[int, typer.Option(help="Rows to show")] = 30,
) -> None:
    """The trials of a study as a table, best first, with who proposed each."""
    from rich.console import Console
    from rich.table import Table

    from tunepilot.agent.display import format_params
    from tunepilot.memory import History

    with _user_errors():
        study_obj = _load(storage, study, config)
    history = History.from_study(study_obj)
    order = {"complete": 0, "pruned": 1, "running": 2, "waiting": 3, "fail": 4}
    rows = sorted(history, key=lambda t: (order.get(t.state, 5),
                                          t.value if t.value is not None else float("inf"),
                                          t.number))
    table = Table(title=f"study {study_obj.study_name}: {len(history)} trials")
    for col in ("#", "state", "val loss", "by", "time", "config", "note"):
        table.add_column(col, overflow="fold")
    for t in rows[:limit]:
        value = t.value if t.value is not None else (t.curve[-1] if t.curve else None)
        note = t.error["message"][:60] if t.error else (t.rationale or "")[:60]
        table.add_row(str(t.number), t.state, f"{value:.4f}" if value is not None else "-",
                      t.proposer or "?", f"{t.duration_s:.1f}s" if t.duration_s else "-",
                      format_params(t.params), note)
    console = Console()
    console.print(table)
    if history.notes:
        console.print(f"agent's notes:\n{history.notes}", markup=False)
    for hint in history.hints:
        console.print(f"hint: {hint}", markup=False)


@app.command()
def best(storage: Storage = None, study: Study = None, config: ConfigFile = None) -> None:
    """The best config of a study as JSON (tuned parameters and fixed settings)."""
    from tunepilot.memory import History, attrs

    with _user_errors():
        study_obj = _load(storage, study, config)
        trial = History.from_study(study_obj).best_trial
        if trial is None:
            raise ConfigError(f"Study {study_obj.study_name} has no completed trial yet; run "
                              "`tune run` (or wait for it) first.")
    fixed = study_obj.user_attrs.get(attrs.SETTINGS, {}).get("space", {}).get("fixed", {})
    typer.echo(f"# trial {trial.number}, validation loss {trial.value:.6g}", err=True)
    typer.echo(json.dumps({**fixed, **trial.params}, indent=2))


@app.command()
def report(
    storage: Storage = None,
    study: Study = None,
    config: ConfigFile = None,
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="HTML file [default: tunepilot-runs/STUDY.html]")] = None,
) -> None:
    """Write a study's report: best config, history, importance, curves, LLM use, failures."""
    from tunepilot.agent.report import write_report

    with _user_errors():
        study_obj = _load(storage, study, config)
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
    from tunepilot.agent.build import build_trainer
    from tunepilot.config import TuneConfig
    from tunepilot.memory import History, attrs
    from tunepilot.trainers.base import check_finite

    with _user_errors():
        study_obj = _load(storage, study, config)
        history = History.from_study(study_obj)
        record = next((t for t in history if t.number == trial), None)
        if record is None or not record.params:
            raise ConfigError(f"Study {study_obj.study_name} has no trial {trial} with a config; "
                              "`tune show` lists its trials.")
        settings = study_obj.user_attrs.get(attrs.SETTINGS) or {}
        if "config" not in settings:
            raise ConfigError(f"Study {study_obj.study_name} was not created by `tune run`, so "
                              "its trainer is unknown; rerun the config from Python instead.")
        cfg = TuneConfig.model_validate({**settings["config"], "storage": "sqlite://"})
        trainer, _ = build_trainer(cfg)
    run_config = {**settings.get("space", {}).get("fixed", {}), **record.params}
    recorded = record.user_attrs.get(attrs.TRAIN) or {}
    typer.echo(f"trial {trial}: {json.dumps(run_config)}")
    typer.echo(f"recorded: {record.state}, value {record.value}, curve "
               f"{[round(v, 6) for v in record.curve]}, on {recorded.get('device', '?')} with "
               f"{recorded.get('versions', '?')}")

    def report(epoch: int, val_loss: float) -> None:
        check_finite(epoch, val_loss)
        typer.echo(f"  epoch {epoch}: {val_loss:.6f}")

    result = trainer(run_config, report)
    typer.echo(f"now: value {result.best_val_loss:.6f}")
    if record.value is not None:
        typer.echo(f"difference: {result.best_val_loss - record.value:+.2e}")


def _load(storage: str | None, study: str | None, config: Path | None) -> Any:
    from tunepilot.config import load_config
    from tunepilot.memory import load_study

    cfg = load_config(config, storage=storage, study=study)
    return load_study(cfg.storage, cfg.study_name() if (cfg.study or config) else study)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
