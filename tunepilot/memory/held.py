"""Storage calls that Ctrl-C and SIGTERM do not cut in half.

A signal raised in the middle of a storage call can leave a connection checked out inside its
transaction: on SQLite that connection kept the write lock, and the run's next write (the stop
it records) waited out SQLite's 30 s timeout, then failed. Inside `holding()` (every call of
the storages `open_storage` makes, `HeldRDBStorage` and `HeldJournalStorage`, and the calls
Optuna's cache makes of them) the signal handler of `runtime.interrupts` records the signal
instead of raising it (`defer`), and the interrupt is raised as the call returns. A call that
waits (on SQLite's lock, say) keeps it until then; pressed twice more, Ctrl-C ends the process
at once.

On a database server the outage rider (`riding.Riding`) waits between the attempts of a call,
outside the hold: Ctrl-C ends a wait for a server at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tunepilot.errors import Terminated

_counting = False  # a handler that defers is installed (`runtime.interrupts.raising`)
_depth = 0  # how many holds the main thread is inside
_pending: int | None = None  # a signal that arrived inside them


def start(counting: bool) -> None:
    """Called as the signal handler is installed (True) and removed (False)."""
    global _counting, _depth, _pending
    _counting, _depth, _pending = counting, 0, None


def counting() -> bool:
    """Whether a handler that defers is installed."""
    return _counting


def defer(signum: int) -> bool:
    """The handler's question: True (and the signal kept for the hold's end) inside a hold."""
    global _pending
    if _depth > 0:
        _pending = signum
        return True
    return False


def _counted() -> bool:
    return _counting and threading.current_thread() is threading.main_thread()


def hold() -> None:
    """From here to `release()`, a signal is recorded, not raised."""
    global _depth
    if _counted():
        _depth += 1


def release() -> None:
    """Ends a `hold()`; the outermost raises the interrupt that arrived meanwhile."""
    global _depth, _pending
    if not _counted():
        return
    _depth = max(0, _depth - 1)
    if _depth == 0 and _pending is not None:
        signum, _pending = _pending, None
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


@contextmanager
def holding() -> Iterator[None]:
    """A block no signal cuts short: one that arrives inside is raised as it ends (from the
    block's own exception, if it raised one: asked to stop, the search stops)."""
    hold()
    try:
        yield
    except BaseException as e:
        try:
            release()
        except KeyboardInterrupt as interrupt:
            raise interrupt from e
        raise
    release()


def _held(base: type, name: str) -> Callable[..., Any]:
    call = getattr(base, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        with holding():
            return call(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = call.__doc__
    return method


# What Optuna's cache (`_CachedStorage`, which Optuna puts over an RDB storage it is given)
# calls of the RDB storage under it, besides the storage protocol: most reads of a study.
_CACHE_CALLS = ("_create_new_trial", "_get_best_trial_id", "_get_trials", "_set_trial_param",
                "_get_stale_trial_ids")


def _held_class(base: type) -> type:
    from optuna.storages import BaseStorage
    from optuna.storages._heartbeat import BaseHeartbeat

    names = {n for n in {*dir(BaseStorage), *dir(BaseHeartbeat), *_CACHE_CALLS}
             if not n.startswith("__") and callable(getattr(base, n, None))}
    cls = type(f"Held{base.__name__}", (base,), {n: _held(base, n) for n in sorted(names)})
    cls.__module__ = __name__
    cls.__doc__ = f"Optuna's {base.__name__}, each call held against Ctrl-C and SIGTERM."
    return cls


_CLASSES: dict[str, type] = {}


def __getattr__(name: str) -> type:
    """`HeldRDBStorage` and `HeldJournalStorage`, made on first use (Optuna's storages are not
    imported with the signal handler), found by name as a pickled storage is loaded."""
    if name not in ("HeldRDBStorage", "HeldJournalStorage"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _CLASSES:
        from optuna import storages

        _CLASSES[name] = _held_class(getattr(storages, name.removeprefix("Held")))
    return _CLASSES[name]
