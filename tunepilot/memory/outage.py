"""A database server that goes away and comes back: every storage call a worker makes rides it
out.

A night on a shared PostgreSQL or MySQL meets a restart, a fail-over or a full server (every
connection taken). Optuna's RDB storage raises at the first refused connection, and a worker
died with it (inside Optuna's `_optimize`, an `UnboundLocalError` after the
`StorageInternalError`). `riding.Riding` wraps a storage so that each call, Optuna's (asking,
telling, heartbeats, the stale-trial check) and tunepilot's own, is tried again with backoff
while the server is unreachable, for up to `limit_s` seconds (the `outage` setting, 5 minutes
by default). The first failure and the return are said once each to whoever listens (the
worker's terminal and its log); past the limit the call raises `StorageUnavailable`, which
ends the worker with a message and exit code 4, its running trial left for the others'
stale-trial check.

Only failures of the connection are retried (the server refused, closed or dropped it, or has
no connection left); a wrong query, a constraint or a missing table raises at once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from tunepilot.errors import StorageUnavailable

OUTAGE_S = 300.0  # how long a worker waits for its database before it gives up
# Who hears an outage before a run's display does (opening the storage, a read command): the
# command line puts a line on stderr here. A run's display replaces them while it runs.
ANNOUNCE: list[Callable[[str], None]] = []
# What PostgreSQL and MySQL say when the server is up but cannot take this connection now
# (every one taken, or it is starting or stopping).
_FULL = ("too many clients", "too many connections", "remaining connection slots",
         "the database system is")
# ... and, beside those, when the server is down or dropped the connection.
_GONE = (*_FULL, "connection refused", "could not connect", "server closed the connection",
         "terminating connection", "connection is closed", "lost connection", "can't connect",
         "server has gone away", "connection reset", "connection timed out",
         "no connection to the server", "consuming input failed", "ssl syscall error",
         "connection not open", "broken pipe")


def connection_lost(e: BaseException) -> bool:
    """Whether `e`, or what caused it, is a failure of the connection to the database server
    (not of the query)."""
    return any(any(m in text for m in _GONE) or invalidated for text, invalidated in _chain(e))


def server_full(e: BaseException) -> bool:
    """Whether `e` says the server is up but has no connection to give now (every one taken,
    or it is starting or stopping): what a worker waits out as it opens the storage, where a
    refused connection (a wrong host or port) is refused at once."""
    return any(any(m in text for m in _FULL) for text, _ in _chain(e))


def _chain(e: BaseException) -> list[tuple[str, bool]]:
    """Each exception of `e`'s chain (its causes and contexts): its text in lower case, and
    whether sqlalchemy marked its connection invalidated."""
    out: list[tuple[str, bool]] = []
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        out.append((str(cur).lower(), bool(getattr(cur, "connection_invalidated", False))))
        cur = cur.__cause__ or cur.__context__
    return out


class Outage:
    """One storage's outage state, shared by its threads: when it began, who to tell."""

    def __init__(self, limit_s: float = OUTAGE_S):
        self.limit_s = limit_s
        self.listeners: list[Callable[[str], None]] = list(ANNOUNCE)
        self.since: float | None = None  # monotonic time of the first failure of this outage
        self.gone: StorageUnavailable | None = None  # set once the limit passed
        self.back_at: float | None = None  # monotonic time the last outage ended
        self._lock = threading.Lock()
        # One storage call at a time in this process (the heartbeat's thread waits a few
        # milliseconds for the trial's): with the study lock's own, a worker holds at most two
        # connections.
        self._serial = threading.RLock()

    def call(self, fn: Callable[..., Any], *args: Any,
             retry_if: Callable[[BaseException], bool] = connection_lost, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)`, tried again with backoff while it fails as `retry_if` says
        (the connection failed)."""
        wait = 0.5
        while True:
            try:
                with self._serial:
                    result = fn(*args, **kwargs)
            except Exception as e:
                if not retry_if(e):
                    raise
                self._failed(e)
                time.sleep(wait)
                wait = min(wait * 2, 10.0)
                continue
            if self.since is not None:
                self._back()
            return result

    def _failed(self, e: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            if self.since is None:
                self.since = now
                self.say(f"database unreachable ({_first_line(e)}); retrying for up to "
                         f"{self.limit_s:g} s (the outage setting); a running trial goes on")
            if now - self.since > self.limit_s:
                if self.gone is None:
                    fix = ("every connection it allows is taken: stop some of the programs or "
                           "workers that hold them, or raise the server's max_connections"
                           if server_full(e) else "start the worker again once it is back")
                    self.gone = StorageUnavailable(
                        f"the database stayed unreachable for {now - self.since:.0f} s, past "
                        f"the {self.limit_s:g} s this worker waits (the outage setting): "
                        f"{_first_line(e)}. Its running trial, if any, is left to the other "
                        f"workers' stale-trial check; {fix}")
                raise self.gone from e

    def _back(self) -> None:
        with self._lock:
            if self.since is None:
                return
            self.back_at = time.monotonic()
            down = self.back_at - self.since
            self.since = None
        self.say(f"database back after {down:.0f} s; the search goes on")

    def back_within(self, seconds: float) -> bool:
        """Whether an outage ended less than `seconds` ago."""
        return self.back_at is not None and time.monotonic() - self.back_at < seconds

    def say(self, text: str) -> None:
        """Tells whoever listens (the run's display and log)."""
        for listen in list(self.listeners):
            listen(text)


def _first_line(e: BaseException) -> str:
    while e.__cause__ is not None:  # Optuna's StorageInternalError hides what the server said
        e = e.__cause__
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]


def outage_of(storage: Any) -> Outage | None:
    """The `Outage` a storage `open_storage` made rides through (None: not a server's)."""
    found = getattr(storage, "outage", None)
    return found if isinstance(found, Outage) else None


@contextlib.contextmanager
def heard_by(storage: Any, listen: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, `storage`'s outages are said to `listen` alone (a run's display
    and log, in place of `ANNOUNCE`'s stderr); an outage past its limit ends the block with
    `StorageUnavailable`, wherever its failure surfaced (inside Optuna's `_optimize` it is an
    `UnboundLocalError`)."""
    outage = outage_of(storage)
    if outage is None:
        yield
        return
    before, outage.listeners = outage.listeners, [listen]
    try:
        yield
    except Exception:
        if outage.gone is not None:
            raise outage.gone from None
        raise
    finally:
        outage.listeners = before
