"""Ctrl-C and SIGTERM that are never lost, and never cut a storage call in half.

Python raises KeyboardInterrupt wherever the interpreter happens to be. Inside a C library's
callback into Python (llama.cpp's log callback, for one) the exception is printed and dropped,
and the search would run on. So the handler also records the signal, `check()` raises it
again at safe points (after each proposal, at each epoch report), and if the process is still
running 5 s later the signal is delivered once more, unless the exception has reached the code
that ends the search (`handled()`): there a second one would cut its cleanup short.

Some places must not be cut at all. Raised inside a storage call, the exception left SQLite's
write lock with a connection nobody would return, and the run's next write (marking the trial
failed) waited out SQLite's 30 s before failing; raised while Optuna started a trial's heartbeat
thread (not a daemon), it skipped the thread's stop, and the process printed its summary and
never exited. A signal that arrives inside a hold (`memory.held`: every storage call, and
Optuna's start of a trial) is raised as the hold ends.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tunepilot.errors import Terminated
from tunepilot.memory import held

_requested: int | None = None  # the signal this search was asked to stop by
_redeliver: threading.Timer | None = None
REDELIVER_AFTER_S = 5.0
T = TypeVar("T")
R = TypeVar("R")
hold, release = held.hold, held.release  # for Optuna's start of a trial (`Tuner._created`)


def _exception(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _handler(signum: int, frame: Any) -> None:
    global _requested, _redeliver
    if _requested is None:
        # If the exception below is swallowed (raised inside a C callback or a finalizer), a
        # second delivery raises it again wherever the interpreter is by then.
        _redeliver = threading.Timer(REDELIVER_AFTER_S, signal.raise_signal, (signum,))
        _redeliver.daemon = True
        _redeliver.start()
    else:  # delivered again: one more signal after this ends the process at once
        signal.signal(signum, signal.SIG_DFL)
    _requested = signum
    if held.defer(signum):
        return  # raised as the hold ends
    raise _exception(signum)


def handled() -> None:
    """The interrupt has reached the code that ends the search: no redelivery, which would
    cut that code short (marking the trial failed, the summary). One more signal still ends
    the process at once."""
    if _redeliver is not None:
        _redeliver.cancel()


def objective(func: Callable[[T], R]) -> Callable[[T], R]:
    """`func` as Optuna's objective: the hold from the trial's creation (`hold()` in the
    sampler's `before_trial`) ends as it starts, and an interrupt that leaves it is `handled()`
    (a redelivery would land in Optuna's record of the failed trial, which this waits for)."""

    @functools.wraps(func)
    def run(trial: T) -> R:
        try:
            release()
            return func(trial)
        except KeyboardInterrupt:
            handled()
            raise

    return run


def check() -> None:
    """Raises the interrupt that arrived while a C library had control, if any."""
    if _requested is not None:
        raise _exception(_requested)


@contextmanager
def raising() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt and SIGTERM raises `Terminated`, reliably."""
    global _requested, _redeliver
    if threading.current_thread() is not threading.main_thread() or held.counting():
        yield  # (a thread's search, or inside a `raising()` already: `tune run`'s, say)
        return
    previous = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _requested, _redeliver = None, None
    held.start(True)
    try:
        yield
    finally:
        if _redeliver is not None:
            _redeliver.cancel()
        for s, h in previous.items():
            signal.signal(s, h)
        _requested = None
        held.start(False)
