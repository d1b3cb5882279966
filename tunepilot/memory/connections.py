"""A worker's connections to a database server: one kept for its calls from its storage's
opening (or its first study lock) to its trial's training, none while it trains or waits
(docs/overnight.md#several-workers-one-study). `store.open_storage` gives each server storage a
`worker_pool`; `lock.StudyLock` and the loop say when the worker works and when it idles."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class Kept:
    """What a worker's pool may keep: nothing until the worker works (it opened its storage as
    a worker, or took the study lock: `working`), and nothing while an `idle` block of any of
    its threads runs."""

    def __init__(self, working: bool = False) -> None:
        self.working = working
        self.idling = 0

    def now(self) -> bool:
        return self.working and self.idling == 0


def worker_pool(working: bool = False) -> type:
    """A pool class of one storage's own, its `Kept` state in `kept`: a connection is kept for
    the next call only while `kept.now()`; otherwise each is closed as it comes back. A reader
    (`tune show`, a notebook's loaded study, `tune run --n-workers`'s parent) keeps none; a
    worker keeps one from its storage's opening on (`working`; a connection for each of its
    start's two dozen calls cost the server more than the rest of its start:
    bench/log/2026-12-07.md)."""
    import sqlalchemy
    from sqlalchemy.pool import QueuePool

    kept = Kept(working)

    class WorkerPool(QueuePool):
        pass

    WorkerPool.kept = kept  # type: ignore[attr-defined]

    def checkin(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None and not kept.now():
            record.invalidate()  # closed now; the next checkout connects anew

    sqlalchemy.event.listen(WorkerPool, "checkin", checkin)
    return WorkerPool


def _kept(engine: Any) -> Kept | None:
    return getattr(getattr(engine, "pool", None), "kept", None)


def working(engine: Any) -> None:
    """The process works (a worker's storage is open, or it took the study lock): from now on
    its pool keeps a connection between calls, except inside `idle`."""
    if (kept := _kept(engine)) is not None:
        kept.working = True


_IDLE_GUARD = threading.Lock()


@contextlib.contextmanager
def idle(engine: Any) -> Iterator[None]:
    """While the block runs (a trial's training, a wait for the study lock or for the other
    workers: seconds to hours) `engine` keeps no connection: the idle one is closed, and each
    call made meanwhile (an epoch's report, a heartbeat) closes its own after it."""
    if (kept := _kept(engine)) is None:
        yield
        return
    with _IDLE_GUARD:  # a worker's threads train side by side
        kept.idling += 1
    engine.pool.dispose()  # the idle one; one in use is closed as it comes back
    try:
        yield
    finally:
        with _IDLE_GUARD:
            kept.idling -= 1


def engine_of(storage: Any) -> Any:
    """The SQLAlchemy engine under a storage `open_storage` made (through Optuna's cache and
    the outage rider), or None (a journal file, a storage of the person's own)."""
    return getattr(storage, "engine", None) or getattr(
        getattr(storage, "_backend", None), "engine", None)
