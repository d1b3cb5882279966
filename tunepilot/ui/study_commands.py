"""`tune show`, `best`, `report`, `rerun`, `dashboard` and `init`: read a study, or start one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tunepilot.errors import ConfigError
from tunepilot.ui.app import (
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
def dashboard(
    storage: Storage = None,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on")] = 8080,
) -> None:
    """Open optuna-dashboard on the studies of a storage: each trial's params, curve, who
    proposed it and the agent's rationale (user attrs `proposer`, `rationale`)."""
    from tunepilot.memory import redact
    from tunepilot.memory.store import open_existing

    with user_errors():
        try:
            from optuna_dashboard import run_server
        except ImportError:
            raise ConfigError("tune dashboard needs optuna-dashboard: pip install "
                              "'tunepilot[dashboard]' (or pip install optuna-dashboard).") from None
        from tunepilot.config import load_config

        url = load_config(storage=storage).storage  # the flag, TUNEPILOT_STORAGE, the default
        opened = open_existing(url)  # a reader creates no table
    typer.echo(f"optuna-dashboard on {redact(url)}: http://{host}:{port}/ (Ctrl-C stops it)")
    run_server(opened, host=host, port=port)


@app.command()
def init(
    trainer: Annotated[str, typer.Option(
        help="lightning | jax | both (the built-in CTR task), or your package.module:function")]
    = "lightning",
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write")]
    = Path("tune.toml"),
) -> None:
    """Write a commented tune.toml to start from: lr, batch size, precision, dropout, the
    budgets, target and storage. Refuses to overwrite a file."""
    from tunepilot.config import starter

    with user_errors():
        if output.exists():
            raise ConfigError(f"{output} exists; tune init does not overwrite a file. Remove it, "
                              "or write elsewhere with --output FILE.")
    output.write_text(starter(trainer, output.name), encoding="utf-8")
    typer.echo(f"wrote {output}; edit it, then: tune run --config {output}")


@app.command()
def show(
    storage: Storage = None,
    study: Study = None,
    config: ConfigFile = None,
    limit: Annotated[int, typer.Option(help="Rows to show")] = 30,
) -> None:
    """The trials of a study as a table, best first, with who proposed each."""
    from tunepilot.memory import History, load_study
    from tunepilot.memory.insights import of_study
    from tunepilot.ui.display import record_line, trials_table

    with user_errors():
        loaded = load_study(*_where(storage, study, config))
    history = History.from_study(loaded)
    console = new_console()
    console.print(trials_table(history, loaded.study_name, limit))
    lines = of_study(loaded, history).lines()
    if lines:
        say(console, "what the history says:\n" + "\n".join(f"  {line}" for line in lines))
    record = record_line(history)
    if record:
        say(console, record)
    if history.notes:
        say(console, f"agent's notes:\n{history.notes}")
    for hint in history.hints:
        say(console, f"hint: {hint}")


@app.command()
def prompt(storage: Storage = None, study: Study = None, config: ConfigFile = None) -> None:
    """The exact prompt the study's LLM would read for its next trial (system and user)."""
    from tunepilot.agent import studies

    with user_errors():
        text = studies.next_prompt(*_where(storage, study, config))
    typer.echo(text)


@app.command()
def best(storage: Storage = None, study: Study = None, config: ConfigFile = None) -> None:
    """The best config of a study as JSON (tuned parameters and fixed settings)."""
    from tunepilot.agent import studies

    with user_errors():
        trial, run_config = studies.best(*_where(storage, study, config))
    typer.echo(f"# trial {trial.number}, validation loss {trial.value:.6g}", err=True)
    typer.echo(json.dumps(run_config, indent=2))


@app.command()
def report(
    storage: Storage = None,
    study: Study = None,
    config: ConfigFile = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="HTML file [default: tunepilot-runs/STUDY.html; for another "
        "storage than the default, tunepilot-runs/STORAGE/STUDY.html]")] = None,
) -> None:
    """Write a study's report: best config, history, importance, curves, LLM use, failures."""
    from tunepilot.memory import load_study
    from tunepilot.ui.report import write_report

    with user_errors():
        url, name = _where(storage, study, config)
        study_obj = load_study(url, name)
    path = write_report(study_obj, output or runs_path(url, study_obj.study_name, ".html"))
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
        typer.echo(f"trial {trial}: {json.dumps(dict(run_config))}")
        typer.echo(f"recorded: {recorded_words(record)}")

    with user_errors():
        again = studies.rerun(*_where(storage, study, config), trial, on_start=start,
                              on_epoch=show)
    if again.result is None:
        error = again.error or {}
        at = f" at {error['where']}" if error.get("where") else ""
        typer.echo(f"now: failed, {error.get('kind')}: {error.get('message')}{at}")
        raise typer.Exit(1)
    typer.echo(f"now: value {again.result.best_val_loss:.6f}")
    if again.difference is not None:
        typer.echo(f"difference: {again.difference:+.2e}")


def recorded_words(record: Any) -> str:
    """A trial as the study recorded it, for `tune rerun`: its state and value or error, its
    curve, and where it ran (what was recorded of that, no "?" for what was not)."""
    if record.state == "fail":
        error = record.error or {}
        what = f"failed, {error.get('kind', 'error')}: {error.get('message', '')}{record.where}"
    else:
        value = f", value {record.value:.6g}" if record.value is not None else ""
        what = f"{record.state}{value}"
    parts = [what]
    if record.curve:
        parts.append(f"curve {[round(v, 6) for v in record.curve]}")
    train = record.train
    if train is not None and train.device:
        parts.append(f"on {train.device}")
    if train is not None and train.versions:
        parts.append(f"with {dict(train.versions)}")
    return "; ".join(parts)


def _where(storage: str | None, study: str | None, config: Path | None) -> tuple[str, str]:
    """The storage URL and the study that flags and a config file name; with none named, the
    only or the newest study, said on stderr (stdout stays the command's output)."""
    from tunepilot.config import load_config
    from tunepilot.memory.store import choose_study

    cfg = load_config(config, storage=storage, study=study)
    name, said = choose_study(cfg.storage, cfg.study_name() if (cfg.study or config) else study)
    if said:
        typer.echo(said, err=True)
    return cfg.storage, name
