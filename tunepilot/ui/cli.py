"""`tune`: a thin command line over `Tuner`.

Exit codes: 0 the search ended by its own rules (target or budget), 2 bad input, 3 the same
error again and again (a broken trainer), 4 the database stayed away past the outage limit,
130 Ctrl-C, 143 SIGTERM.
Only typer and pydantic load at start-up; torch, Lightning, JAX and Optuna load when a command
needs them, so `tune --help` stays fast.
"""

from __future__ import annotations

import gc
import sys

import typer

from tunepilot.errors import Terminated

# Importing the command modules registers their commands on the app.
from tunepilot.ui import calibrate_command, search_commands, study_commands  # noqa: F401
from tunepilot.ui.app import EXIT_INTERRUPTED, EXIT_TERMINATED, app

__all__ = ["app", "main"]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"tunepilot {version('tunepilot')}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print tunepilot's version and exit")) -> None:
    """tunepilot: an LLM-driven hyperparameter tuning agent."""
    from tunepilot.memory import outage

    # A database server that goes away (or is full) before a run's display is up: said on
    # stderr as it happens, while the command waits for it.
    outage.ANNOUNCE[:] = [lambda text: typer.echo(f"! {text}", err=True)]


def _only_the_command_asked(args: list[str]) -> None:
    """Typer builds the options of every command at each start, paid by each worker
    (bench/log/2026-12-07.md); where the first argument names a command, that one is
    built alone (its help, its errors and its run are the same). Anything else (`--help`,
    `--version`, a mistyped command) sees them all."""
    from typer.main import get_command_name

    if not args:
        return
    asked = [c for c in app.registered_commands
             if get_command_name(c.name or getattr(c.callback, "__name__", None) or "") == args[0]]
    if asked:
        app.registered_commands[:] = asked


def _interrupt(e: BaseException) -> KeyboardInterrupt | None:
    """The interrupt in `e`'s chain of causes, if any."""
    seen: BaseException | None = e
    for _ in range(32):  # (a chain is short; this bounds a looped one)
        if seen is None or isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def main() -> None:
    everything = list(app.registered_commands)
    _only_the_command_asked(sys.argv[1:])
    try:
        app()
    except SystemExit as e:
        # Typer ends a command that an interrupt left (before a search took it in hand: while
        # it opened its study, say) with 130 and no word, SIGTERM's too.
        interrupt = _interrupt(e)
        if interrupt is None:
            raise
        sigterm = isinstance(interrupt, Terminated)
        typer.echo("interrupted (SIGTERM)" if sigterm else "interrupted", err=True)
        sys.exit(EXIT_TERMINATED if sigterm else EXIT_INTERRUPTED)
    finally:
        app.registered_commands[:] = everything
        # The command is done (its files closed, its output flushed at exit as always): left is
        # the interpreter's last collection of the process's objects, paid by every worker as
        # it exits (bench/README.md#several-workers). Frozen, they are left to the operating
        # system, which frees them with the process.
        gc.freeze()


if __name__ == "__main__":
    main()
