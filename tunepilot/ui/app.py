"""The `tune` command line's shared parts: the Typer app, exit codes, the options every
command takes, and how bad input and text are printed. The commands live in
`search_commands` (run, create, worker) and `study_commands` (show, best, report, rerun,
dashboard, init); `cli` puts them together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from tunepilot.errors import ConfigError, StorageUnavailable
from tunepilot.memory.store import DEFAULT_STORAGE

app = typer.Typer(
    name="tune",
    help="tunepilot: an LLM-driven hyperparameter tuning agent (Optuna fallback).\n\n"
    "Quick demo: `tune run` tunes a CTR model on synthetic data (a minute or two on a laptop's "
    "CPU). Without OPENAI_API_KEY Optuna proposes every trial; with it, gpt-4o-mini reviews "
    "Optuna's candidates. The first lines of a run say which, and why.",
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
EXIT_STORAGE_GONE = 4  # the database server stayed away past the outage limit

# Every command reads the storage URL from TUNEPILOT_STORAGE too (a password in argv shows in
# ps): the config layer reads it, between the file and the flags (config.ENVIRONMENT).
Storage = Annotated[str | None, typer.Option(
    help=f"Optuna storage URL, or set TUNEPILOT_STORAGE [default: {DEFAULT_STORAGE}]")]
Study = Annotated[str | None, typer.Option(help="Study name [default: from trainer and data]")]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c",
                                                 help="TOML or YAML file; flags override it")]


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Bad input: one paragraph on stderr, exit code 2, no traceback; a database that stayed
    away past its outage limit likewise, exit code 4."""
    try:
        yield
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except StorageUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(EXIT_STORAGE_GONE) from None



def runs_path(storage: str, study: str, suffix: str) -> Path:
    """Where a study's log (".log") and report (".html") go: `tunepilot-runs/STUDY.log` for the
    default storage, `tunepilot-runs/STORAGE/STUDY.log` for any other (its URL as a folder
    name, the password left out), so studies of one name in two storages never share a file.

    Example:
        >>> str(runs_path("sqlite:///other.db", "s", ".log"))
        'tunepilot-runs/sqlite-other.db/s.log'
    """
    import re

    from tunepilot.memory import redact

    if storage == DEFAULT_STORAGE:
        return Path(RUNS_DIR) / f"{study}{suffix}"
    folder = re.sub(r"[^A-Za-z0-9_.@-]+", "-", redact(storage)).strip("-.") or "storage"
    return Path(RUNS_DIR) / folder[-120:] / f"{study}{suffix}"


def new_console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def say(console: Any, text: str) -> None:
    console.print(text, markup=False)  # text from a model or a trainer is never markup
